"""The common start of every chaos request: which key, which attempt, and its log record.

An endpoint calls :func:`arrive` first, decides what to do from the attempt number and
its own state, then calls :meth:`Arrival.record` with what it did. Every reply it builds
carries ``X-Attempt`` from :meth:`Arrival.headers`.
"""

from __future__ import annotations

import dataclasses
import hashlib

from starlette.requests import Request

from retrysafe.chaos.state import ChaosRecord, ChaosState

__all__ = ["Arrival", "arrive", "key_of"]


def key_of(request: Request) -> str:
    """The request's state key: the ``{key}`` path segment, else the ``key`` query parameter.

    A request with neither shares the key ``""``.
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
    """Read the whole body and count the attempt for ``(endpoint, key)``.

    ``endpoint`` names the counter: the route (``"fail"``) plus any path segment that
    scopes state (``"rate-limit/search"``), never the segment that only picks a reply
    (``/status/{code}`` counts as ``"status"`` whatever the code).
    """
    body = await request.body()
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
