"""Endpoints that are slow or break mid-reply, for a client's timeouts and body handling.

- ``/delay?ms=1000``: 200 after ``ms`` milliseconds.
- ``/hang``: never answers; ends when the client leaves.
- ``/drip?chunks=5&interval_ms=100&chunk_bytes=8``: headers at once (with the full
  Content-Length), then one chunk every ``interval_ms``.
- ``/truncate?promised=1000&sent=100``: Content-Length ``promised``, ``sent`` bytes of
  body, then the connection closes.

None of them outlives the server: a stop ends them at once.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import arrive
from retrysafe.chaos.outcomes import (
    DripResponse,
    NoReply,
    TruncatedResponse,
    end_for_shutdown,
    pause,
)
from retrysafe.chaos.params import InvalidParameter, choice_param, int_param
from retrysafe.chaos.replies import ALL_METHODS, reply_socket_fault, reply_status
from retrysafe.chaos.state import ChaosState

__all__ = ["routes"]

#: ``/drip``'s ``type`` parameter: the media type its body is sent as.
_DRIP_TYPES = {"text": "text/plain", "json": "application/json"}

# Upper bounds that keep a typo from tying a test run up for hours.
_MAX_MS = 600_000
_MAX_CHUNKS = 10_000
_MAX_BYTES = 10_000_000


def routes(state: ChaosState) -> list[Route]:
    """The slow and broken-reply endpoints, bound to ``state``."""

    async def delay(request: Request) -> Response:
        milliseconds = int_param(request, "ms", 1000, minimum=0, maximum=_MAX_MS)
        arrival = await arrive(state, request, "delay")
        reply = reply_status(arrival, 200, detail=f"after {milliseconds} ms")
        if await pause(request.scope, request.receive, milliseconds / 1000) == "stopping":
            await end_for_shutdown(request.scope, request.receive)
            return NoReply()
        return reply

    async def hang(request: Request) -> Response:
        arrival = await arrive(state, request, "hang")
        return reply_socket_fault(arrival, "hang")

    async def drip(request: Request) -> Response:
        chunks = int_param(request, "chunks", 5, minimum=0, maximum=_MAX_CHUNKS)
        interval_ms = int_param(request, "interval_ms", 100, minimum=0, maximum=_MAX_MS)
        chunk_bytes = int_param(request, "chunk_bytes", 8, minimum=1, maximum=_MAX_BYTES)
        # (an error answer whose body is slow or large: its status must not be lost to it)
        status = int_param(request, "status", 200, minimum=200, maximum=599)
        # (a JSON error body, which a keyed 409 or 422 is read for: its digits are a number)
        kind = choice_param(request, "type", "text", _DRIP_TYPES)
        arrival = await arrive(state, request, "drip")
        arrival.record("drip")
        return DripResponse(
            chunks=chunks,
            chunk_bytes=chunk_bytes,
            interval=interval_ms / 1000,
            headers=arrival.headers(),
            status=status,
            media_type=_DRIP_TYPES[kind],
        )

    async def truncate(request: Request) -> Response:
        promised = int_param(request, "promised", 1000, minimum=1, maximum=_MAX_BYTES)
        sent = int_param(request, "sent", 100, minimum=0, maximum=_MAX_BYTES)
        if sent >= promised:
            raise InvalidParameter("sent", f"must be less than promised ({promised})")
        arrival = await arrive(state, request, "truncate")
        arrival.record("truncate")
        return TruncatedResponse(promised=promised, sent=sent, headers=arrival.headers())

    return [
        Route("/delay", delay, methods=ALL_METHODS),
        Route("/hang", hang, methods=ALL_METHODS),
        Route("/drip", drip, methods=ALL_METHODS),
        Route("/truncate", truncate, methods=ALL_METHODS),
    ]
