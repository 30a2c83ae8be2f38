"""Turning a final outcome into the error a caller can act on.

Which :class:`~retrysafe.ApiError` subclass a failure becomes follows from the
last outcome: the status class for a response, ``BadResponse`` for a body that
could not be read, ``TransportError`` when no response came back. The failing
body is kept bounded, parsed when JSON, and scrubbed of the request's secrets.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from retrysafe.classify import Verdict
from retrysafe.errors import (
    ApiError,
    BadResponse,
    ClientError,
    QuotaExhausted,
    RateLimited,
    ServerError,
    TransportError,
)
from retrysafe.redact import Redactor

__all__ = ["describe_body", "error_class_for"]

#: How much of a failing body an error keeps (``ApiError.body``), and shows in its message.
_BODY_LIMIT = 64 * 1024
_EXCERPT_LIMIT = 200


def error_class_for(
    verdict: Verdict,
    response: httpx.Response | None,
    cause: Exception | None,
    *,
    during_body: bool,
    may_have_processed: bool,
) -> tuple[type[ApiError], dict[str, Any]]:
    """The error class for a failed call's last outcome, and its class-specific fields."""
    if response is not None:
        status = response.status_code
        if verdict.reason == "quota_exhausted":
            return QuotaExhausted, {}
        if status == 429:
            return RateLimited, {"retry_after": verdict.after}
        if 400 <= status < 500:
            return ClientError, {}
        if status >= 500:
            return ServerError, {}
        return BadResponse, {}
    if during_body and not isinstance(cause, httpx.TimeoutException):
        return BadResponse, {}
    return TransportError, {"sent": "maybe" if may_have_processed else "no"}


def describe_body(response: httpx.Response | None, redactor: Redactor) -> tuple[Any, str]:
    """The failing body, parsed when JSON, bounded and scrubbed, plus a one-line excerpt."""
    if response is None:
        return None, ""
    content = response.content[:_BODY_LIMIT]
    text = redactor.scrub(content.decode(response.encoding or "utf-8", errors="replace"))
    body: Any = text
    if len(response.content) <= _BODY_LIMIT:
        try:
            body = _scrub_json(json.loads(text), redactor)
        except ValueError:
            body = text
    excerpt = " ".join(text.split())
    if len(excerpt) > _EXCERPT_LIMIT:
        excerpt = excerpt[: _EXCERPT_LIMIT - 3] + "..."
    return body, excerpt


def _scrub_json(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor.scrub(value)
    if isinstance(value, list):
        return [_scrub_json(item, redactor) for item in value]
    if isinstance(value, dict):
        return {key: _scrub_json(item, redactor) for key, item in value.items()}
    return value
