"""``/retry-after``: a refusal with a Retry-After hint that the server actually enforces.

The first request for a key is refused with ``status`` (default 429) and a hint. A repeat
arriving before the hint allowed is refused again with a fresh hint of the full length
(the wait starts over, as with a server that penalises early callers) and logged as
``early``. The first repeat at or after the allowed time gets 200, and so does every
request after it.

``mode`` picks how the hint is written:

- ``seconds``: delta-seconds, ``Retry-After: 2``; the wait is ``seconds``.
- ``date``: an IMF-fixdate at least ``seconds`` ahead, rounded up to the whole second an
  HTTP-date can express; the wait lasts until that instant.
- ``past-date``: an HTTP-date an hour ago, meaning "now"; no wait is enforced.
- ``garbage``: ``Retry-After: soon``, which carries no wait; none is enforced.
"""

from __future__ import annotations

import math
from email.utils import formatdate

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import arrive
from retrysafe.chaos.params import choice_param, int_param, status_code
from retrysafe.chaos.replies import ALL_METHODS, reply_status
from retrysafe.chaos.state import ChaosState, RetryAfterGate

__all__ = ["RETRY_AFTER_MODES", "routes"]

RETRY_AFTER_MODES = frozenset({"seconds", "date", "past-date", "garbage"})


def _hint(state: ChaosState, mode: str, seconds: int) -> tuple[str, float]:
    """The Retry-After value for ``mode`` and the monotonic time it allows a retry at."""
    now = state.monotonic()
    if mode == "seconds":
        return str(seconds), now + seconds
    wall = state.wall_time()
    if mode == "date":
        target = math.ceil(wall + seconds)
        return formatdate(target, usegmt=True), now + (target - wall)
    if mode == "past-date":
        return formatdate(wall - 3600, usegmt=True), now
    return "soon", now


def routes(state: ChaosState) -> list[Route]:
    """The ``/retry-after`` endpoint, bound to ``state``."""

    async def retry_after(request: Request) -> Response:
        mode = choice_param(request, "mode", "seconds", RETRY_AFTER_MODES)
        seconds = int_param(request, "seconds", 1, minimum=0, maximum=86_400)
        refusal = status_code("status", request.query_params.get("status") or "429")
        arrival = await arrive(state, request, "retry-after")
        with state.lock:
            gate = state.retry_after_gates.get(arrival.key)
            if gate is not None and (gate.served or arrival.arrived >= gate.not_before):
                gate.served = True
                return reply_status(arrival, 200)
            hint, not_before = _hint(state, mode, seconds)
            state.retry_after_gates[arrival.key] = RetryAfterGate(not_before=not_before)
            action = None if gate is None else "early"
            return reply_status(arrival, refusal, retry_after=hint, action=action)

    return [Route("/retry-after", retry_after, methods=ALL_METHODS)]
