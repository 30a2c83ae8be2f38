"""Checking a Redis URL before redis-py reads it, for :class:`~retrysafe.fleet.RedisFleet`
and :class:`~retrysafe.idempotency.RedisStore`.

redis-py reads a URL leniently where a typo matters: a database that is not a number
(``redis://host:6379/zz``) is dropped without a word and database 0 used, and a port that
is not one fails with a message that quotes what it could not read. Each owner refused
what redis-py refused with one message, about percent-encoding the password, which sent a
user with a mistyped port looking in the wrong place (trial103).

The messages here never quote the URL: in a mistyped one, the password may be anywhere
(a ``#`` in it starts the fragment, a ``/`` the path).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

from retrysafe.redact import redact_url_text

__all__ = ["SCHEMES", "check_redis_url"]

#: The schemes redis-py reads.
SCHEMES: Final = ("redis://", "rediss://", "unix://")

_PERCENT_ENCODE: Final = (
    "percent-encode special characters in the password (e.g. '#' as %23, '@' as %40, "
    "'/' as %2F, '?' as %3F)"
)


def check_redis_url(url: str, owner: str) -> None:
    """Raise :class:`ValueError` naming what to fix in ``url`` for ``owner`` (the class
    the URL was given to, e.g. ``"RedisFleet"``), if redis-py would refuse it or read it
    as other than written: no scheme, a port that is not one, a database that is not a
    number. (The host is for the connection to judge.)"""
    if not url.lower().startswith(SCHEMES):
        # (redacted as every URL retrysafe shows: a password before an '@' or in the query)
        raise ValueError(
            f"{owner}(url): the URL needs a scheme, one of {', '.join(SCHEMES)}; "
            f"got {redact_url_text(url)!r} (e.g. {owner}('redis://127.0.0.1:6379/0'))"
        )
    parts = urlsplit(url)
    unix = parts.scheme.lower() == "unix"
    # An '@' after where the host ended: a '#', '/' or '?' in the password ended it.
    # (A socket's path may hold one: there, only the query and the fragment count.)
    after_host = (
        parts.query + parts.fragment if unix else url[url.index("//") + 2 + len(parts.netloc) :]
    )
    if "@" in after_host:
        raise ValueError(f"{owner}(url): the URL cannot be read; {_PERCENT_ENCODE}")
    try:
        parts.port  # noqa: B018 - read for the ValueError it raises
    except ValueError:
        raise ValueError(
            f"{owner}(url): the port in the URL is not a number from 0 to 65535 (e.g. "
            "redis://127.0.0.1:6379/0); if the password holds a ':', " + _PERCENT_ENCODE
        ) from None  # (not chained: the parser's message quotes what it read as the port)
    if unix:
        return  # (the path is the socket's)
    database = unquote(parts.path).strip("/")
    if database and not (database.isascii() and database.isdigit()):
        raise ValueError(
            f"{owner}(url): the database in the URL's path must be a number, e.g. "
            f"redis://127.0.0.1:6379/0 (or no path for database 0); redis-py would use "
            f"database 0 instead"
        )
    for name, value in parse_qsl(parts.query):
        if name == "db" and not (value.isascii() and value.isdigit()):
            raise ValueError(f"{owner}(url): the URL's db= must be a number, e.g. ?db=0")
