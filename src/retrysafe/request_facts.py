"""Facts about a request that every layer reads the same way.

Its idempotency key (a blank header is none), the dependency it belongs to
by default (its origin), and whether its body can be sent again, worked out
cheaply: all are read for every call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import httpx
from httpx._multipart import FileField, MultipartStream

from retrysafe.rewound_file import RewoundFile

__all__ = [
    "IDEMPOTENCY_HEADER",
    "KEY_SENT_BEFORE_EXTENSION",
    "DependencyNamer",
    "default_dependency",
    "idempotency_key_of",
    "new_idempotency_key",
    "replayable_body",
]

#: Names the dependency a request belongs to: load protection (budget, breaker,
#: cooldowns) is kept per name. A plain string names every request the same.
DependencyNamer = Callable[[httpx.Request], str]

IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
_KEY_NAME: Final = IDEMPOTENCY_HEADER.lower().encode("ascii")
#: Request extension set (True) on a journal operation resumed after its key was sent: an
#: earlier run's request under the key may still be running on the server.
KEY_SENT_BEFORE_EXTENSION: Final = "retrysafe.key_sent_before"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def new_idempotency_key() -> str:
    """A fresh idempotency key: a random UUID (version 4), the form most APIs ask for.

    (:mod:`uuid` is imported here, when the first key is made: importing it loads
    :mod:`platform`, about 2 ms that every ``import retrysafe`` would pay otherwise.)"""
    import uuid

    return str(uuid.uuid4())


#: Origin names already worked out, by the URL's raw host, then its raw scheme and port:
#: a client calls few origins, and httpx's URL properties (IDNA, port defaults) cost more
#: than a lookup. (Keyed by the host alone, so a lookup hashes one string, not a tuple
#: of three: each request parses its URL into new strings, whose hashes are not cached.)
#: Bounded: cleared when it grows past ``_ORIGINS_KEPT`` hosts, each keeping at most
#: ``_ORIGINS_PER_HOST``.
_origins: dict[str, list[tuple[str, int | None, str]]] = {}
_ORIGINS_KEPT: Final = 256
_ORIGINS_PER_HOST: Final = 8


def default_dependency(url: httpx.URL) -> str:
    """The dependency a URL belongs to by default: its origin, ``scheme://host:port``."""
    # The parsed reference's fields are plain tuple reads (private to httpx, like the
    # header triples below; the pin in pyproject keeps both).
    reference = url._uri_reference
    scheme, host, port = reference.scheme, reference.host, reference.port
    known = _origins.get(host)
    if known is not None:
        for known_scheme, known_port, name in known:
            if known_port == port and known_scheme == scheme:
                return name
    name = _origin(url)
    if known is None:
        if len(_origins) >= _ORIGINS_KEPT:
            _origins.clear()
        _origins[host] = [(scheme, port, name)]
    elif len(known) < _ORIGINS_PER_HOST:
        known.append((scheme, port, name))
    return name


def _origin(url: httpx.URL) -> str:
    """``scheme://host:port`` of ``url``, read through httpx's properties (the host
    decoded from IDNA, the scheme's default port filled in)."""
    scheme = url.scheme
    host = url.host
    if ":" in host:  # an IPv6 address, bracketed as in a URL
        host = f"[{host}]"
    return f"{scheme}://{host}:{url.port or _DEFAULT_PORTS.get(scheme)}"


def idempotency_key_of(request: httpx.Request) -> str | None:
    """The request's idempotency key; a blank or whitespace header is no key at all."""
    # httpx's Headers.get first works out the encoding of every header of a new request;
    # its (raw, lower-cased, value) triples answer at a fraction of the cost. They are
    # private, but every httpx the package accepts (pyproject pins <0.29) keeps them.
    for triple in request.headers._list:
        if triple[1] == _KEY_NAME:
            try:
                # (a key set after the request was built goes out as UTF-8: its own bytes
                # say so, not a guess made over every header of the request)
                key = triple[2].decode("utf-8")
            except UnicodeDecodeError:
                key = triple[2].decode("latin-1")
            return key if key.strip() else None
    return None


def replayable_body(stream: object) -> bool:
    """Whether a request whose body is httpx's ``stream`` can be sent again, byte for
    byte, after an attempt sent it: bytes (``content=``, ``json=``, ``data=`` a dict),
    or a multipart form (``files=``) whose every file is bytes, text, or a file httpx
    can rewind (``seekable()``: httpx seeks each file back to its start as it sends
    it), or a file read through a :class:`~retrysafe.rewound_file.RewoundFile`. A
    generator, or a file that cannot be rewound, is spent once sent.

    (One attempt after another: copies sent at once, as hedging does, share the
    stream, so only bytes are hedged.)
    """
    if isinstance(stream, (httpx.ByteStream, RewoundFile)):
        return True
    if not isinstance(stream, MultipartStream):
        return False
    for field in stream.fields:
        if isinstance(field, FileField) and not isinstance(field.file, (str, bytes)):
            try:
                if not field.file.seekable():
                    return False
            except Exception:  # (no seekable(), or it failed: cannot be told, so no)
                return False
    return True
