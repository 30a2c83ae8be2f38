"""The common start of every chaos request: which key, which attempt, and its log record.

An endpoint calls :func:`arrive` first, decides what to do from the attempt number and
its own state, then calls :meth:`Arrival.record` with what it did. Every reply it builds
carries ``X-Attempt`` from :meth:`Arrival.headers`.
"""

from __future__ import annotations

import dataclasses
import hashlib

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from retrysafe.chaos.state import ChaosRecord, ChaosState

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_BODY_BYTES_STATE",
    "Arrival",
    "BodyTooLarge",
    "arrive",
    "body_too_large_response",
    "key_of",
    "read_body",
]

#: The largest request body the chaos app reads, unless told otherwise: 1 MiB.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
#: Where :func:`~retrysafe.chaos.create_app` keeps its limit: ``app.state.<this>``.
MAX_BODY_BYTES_STATE = "chaos_max_body_bytes"


class BodyTooLarge(Exception):
    """A request body over the app's limit; answered 413 without reading the rest."""

    def __init__(self, limit: int, read: int) -> None:
        super().__init__(f"the request body is over {limit} bytes")
        self.limit = limit
        self.read = read


async def body_too_large_response(request: Request, exc: Exception) -> Response:
    """Starlette exception handler: 413 with the limit and how much was read, then close.

    The connection is closed because the unread rest of the body is still on it.
    """
    if not isinstance(exc, BodyTooLarge):  # pragma: no cover - registered for it only
        raise exc
    content = {
        "error": f"the request body is larger than this chaos server's limit of {exc.limit} "
        "bytes (the max_body_bytes setting)",
        "limit": exc.limit,
        "read": exc.read,
    }
    return JSONResponse(content, status_code=413, headers={"connection": "close"})


def _limit_of(request: Request) -> int:
    app = request.scope.get("app")
    limit = getattr(getattr(app, "state", None), MAX_BODY_BYTES_STATE, None)
    return limit if isinstance(limit, int) else DEFAULT_MAX_BODY_BYTES


async def read_body(request: Request) -> bytes:
    """The request body, read as it streams in and refused once past the app's limit.

    A Content-Length over the limit is refused before a byte of the body is read; a body
    without one (chunked) is read until it passes the limit, never further. Either way
    :exc:`BodyTooLarge` is raised and the rest is left unread.
    """
    limit = _limit_of(request)
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit, 0)
    chunks: list[bytes] = []
    read = 0
    async for chunk in request.stream():
        read += len(chunk)
        if read > limit:
            raise BodyTooLarge(limit, read)
        chunks.append(chunk)
    return b"".join(chunks)


def key_of(request: Request) -> str:
    """The request's state key: the ``{key}`` path segment, else the ``key`` query parameter.

    A request with neither shares the key ``""``. (One with both takes the path's: a test
    may keep several counters under keys of its own, ``/fail/{key}-a``.)
    """
    path_key = request.path_params.get("key")
    if isinstance(path_key, str):
        return path_key
    return request.query_params.get("key", "")


@dataclasses.dataclass(frozen=True, slots=True)
class Arrival:
    """A counted request: its key, attempt number, body and the state to record into."""

    state: ChaosState
    request: Request
    endpoint: str
    key: str
    attempt: int
    arrived: float
    body: bytes
    body_sha256: str

    @property
    def idempotency_key(self) -> str | None:
        """The request's Idempotency-Key header, if it sent one."""
        return self.request.headers.get("idempotency-key")

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Headers for any reply to this request: ``X-Attempt`` plus ``extra``."""
        headers = {"X-Attempt": str(self.attempt)}
        if extra:
            headers.update(extra)
        return headers

    def record(self, action: str, detail: str = "") -> None:
        """Log this request with what the server did (see :class:`ChaosRecord`)."""
        self.state.append(
            ChaosRecord(
                time=self.arrived,
                method=self.request.method,
                path=self.request.url.path,
                query=self.request.url.query,
                endpoint=self.endpoint,
                key=self.key,
                attempt=self.attempt,
                idempotency_key=self.idempotency_key,
                body_sha256=self.body_sha256,
                action=action,
                detail=detail,
            )
        )


async def arrive(state: ChaosState, request: Request, endpoint: str) -> Arrival:
    """Read the body (up to the app's limit: :func:`read_body`), count the attempt.

    The attempt is counted for ``(endpoint, key)``. A body over the limit raises
    :exc:`BodyTooLarge` (413) before anything is counted or logged.

    ``endpoint`` names the counter: the route (``"fail"``) plus any path segment that
    scopes state (``"rate-limit/search"``), never the segment that only picks a reply
    (``/status/{code}`` counts as ``"status"`` whatever the code).
    """
    body = await read_body(request)
    key = key_of(request)
    arrived = state.monotonic()
    attempt = state.next_attempt(endpoint, key)
    return Arrival(
        state=state,
        request=request,
        endpoint=endpoint,
        key=key,
        attempt=attempt,
        arrived=arrived,
        body=body,
        body_sha256=hashlib.sha256(body).hexdigest(),
    )
