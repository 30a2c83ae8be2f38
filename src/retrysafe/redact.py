"""Keeping secrets out of logs, messages, reprs and metrics.

A header or query parameter is secret when its name says so (Authorization,
Cookie, X-Api-Key, or any name containing key, token, secret, password...).
:class:`Redactor` also remembers the secret *values* of one request, so that a
server echoing them back in a body cannot smuggle them into a log line.
"""

from __future__ import annotations

import logging
import re

import httpx

__all__ = [
    "REDACTED",
    "RedactingFilter",
    "Redactor",
    "is_secret_name",
    "redact_httpx_logs",
    "redact_url",
]

REDACTED = "[REDACTED]"

_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
)
_SECRET_WORDS = re.compile(
    r"key|token|secret|passw|pwd|auth|cookie|session|signature|credential", re.IGNORECASE
)
#: Names that contain a secret word but carry no secret.
_NOT_SECRET = frozenset({"idempotency-key"})
#: Secret values shorter than this are not scrubbed from free text (too many false hits).
_MIN_SCRUB_LENGTH = 4


def is_secret_name(name: str) -> bool:
    """Whether a header or query parameter with this name carries a secret."""
    lowered = name.strip().lower()
    if lowered in _NOT_SECRET:
        return False
    return lowered in _SECRET_HEADERS or _SECRET_WORDS.search(lowered) is not None


def redact_url(url: httpx.URL | str) -> str:
    """The URL as text, with its password (or lone username) and secret query values replaced."""
    parsed = httpx.URL(url)
    if parsed.password:
        parsed = parsed.copy_with(username=parsed.username, password=REDACTED)
    elif parsed.username:
        # A lone username is usually a token ("https://ghp_...@host"): hide it.
        parsed = parsed.copy_with(username=REDACTED)
    if parsed.query:
        params = [
            (name, REDACTED if is_secret_name(name) else value)
            for name, value in parsed.params.multi_items()
        ]
        parsed = parsed.copy_with(params=params)
    # httpx percent-encodes the marker's brackets; show it as written.
    return str(parsed).replace("%5BREDACTED%5D", REDACTED)


class Redactor:
    """Scrubs the secret values of one request out of any text."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: list[str]) -> None:
        unique = {secret for secret in secrets if len(secret) >= _MIN_SCRUB_LENGTH}
        # Longest first, so a token is not half-replaced by one of its prefixes.
        self._secrets = sorted(unique, key=len, reverse=True)

    @classmethod
    def for_request(cls, request: httpx.Request) -> Redactor:
        """Collect every secret value the request carries: headers, query, userinfo."""
        secrets: list[str] = []
        for name, value in request.headers.multi_items():
            if is_secret_name(name):
                secrets.append(value)
                # "Bearer abc123": the credential alone may be echoed without its scheme.
                secrets.extend(value.split()[1:])
                secrets.extend(part.split("=", 1)[-1] for part in value.split(";"))
        for name, value in request.url.params.multi_items():
            if is_secret_name(name):
                secrets.append(value)
        if request.url.password:
            secrets.append(request.url.password)
        elif request.url.username:
            secrets.append(request.url.username)
        return cls([secret.strip() for secret in secrets])

    def scrub(self, text: str) -> str:
        """``text`` with every known secret value replaced by ``[REDACTED]``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def __repr__(self) -> str:
        return f"Redactor({len(self._secrets)} secrets)"


class RedactingFilter(logging.Filter):
    """Redacts URLs in httpx's own log records ("HTTP Request: GET https://...?api_key=...").

    httpx logs every request's full URL at INFO; retrysafe's clients install
    this filter on the ``httpx`` logger so query secrets do not reach logs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_url(arg) if isinstance(arg, httpx.URL) else arg for arg in record.args
            )
        return True


_httpx_filter = RedactingFilter()


def redact_httpx_logs() -> None:
    """Install :class:`RedactingFilter` on the ``httpx`` logger (once; safe to call again)."""
    httpx_logger = logging.getLogger("httpx")
    if _httpx_filter not in httpx_logger.filters:
        httpx_logger.addFilter(_httpx_filter)
