"""Building and logging the chaos server's replies, so each is recorded exactly as sent."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from retrysafe.chaos.arrival import Arrival
from retrysafe.chaos.outcomes import SocketFault, SocketFaultKind, supports_socket_faults

__all__ = ["ALL_METHODS", "BODILESS_STATUSES", "reply_json", "reply_socket_fault", "reply_status"]

#: Methods every chaos endpoint answers (HEAD gets the headers only).
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

#: Statuses that must not carry content (RFC 9110): sent with an empty body.
BODILESS_STATUSES = frozenset({204, 205, 304})


def reply_json(
    arrival: Arrival,
    status: int,
    content: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    action: str | None = None,
    detail: str = "",
) -> Response:
    """A JSON reply (empty for 204/205/304), logged as ``action`` (default ``status:N``)."""
    arrival.record(action or f"status:{status}", detail)
    all_headers = arrival.headers(headers)
    if status in BODILESS_STATUSES:
        return Response(status_code=status, headers=all_headers)
    return JSONResponse(content, status_code=status, headers=all_headers)


def reply_status(
    arrival: Arrival,
    status: int,
    *,
    retry_after: str | None = None,
    action: str | None = None,
    detail: str = "",
) -> Response:
    """The plain reply of the status endpoints: ``{"status", "attempt", "key"}`` as JSON."""
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    content = {"status": status, "attempt": arrival.attempt, "key": arrival.key}
    return reply_json(arrival, status, content, headers=headers, action=action, detail=detail)


def reply_socket_fault(arrival: Arrival, kind: SocketFaultKind, *, detail: str = "") -> Response:
    """No reply at all (reset, close or hang), or a logged 501 where the server cannot."""
    if kind != "hang" and not supports_socket_faults(arrival.request.scope):
        content = {"error": f"{kind!r} needs retrysafe.chaos.ChaosServer (ChaosH11Protocol)"}
        return reply_json(arrival, 501, content, detail=detail)
    arrival.record(kind, detail)
    return SocketFault(kind)
