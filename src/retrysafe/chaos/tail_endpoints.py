"""A heavy-tailed endpoint for hedging: ``/tail/{key}``.

``/tail/{key}?slow_fraction=0.02&slow_ms=1000&fast_ms=10&seed=``: every request
(each hedged copy too) draws on its own whether it is slow: a fraction
``slow_fraction`` (0 to 1) of requests take ``slow_ms``, the rest ``fast_ms``,
then answer 200 with ``{"status", "attempt", "key", "slow"}``. The draw is
reproducible: it depends only on ``seed``, the key and the request's number for
that key (see :mod:`retrysafe.chaos.chance`). ``slow_fraction=0.8`` is a brownout.

A client that leaves before the answer (a cancelled hedged copy) is seen: the
wait ends at once and the request is logged with action ``"disconnected"``
and detail ``"slow after N ms"`` / ``"fast after N ms"``; answered requests are
logged ``"status:200"`` with detail ``"slow"`` or ``"fast"``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import arrive
from retrysafe.chaos.chance import draw
from retrysafe.chaos.outcomes import NoReply, end_for_shutdown, pause
from retrysafe.chaos.params import float_param, int_param
from retrysafe.chaos.replies import ALL_METHODS, reply_json
from retrysafe.chaos.state import ChaosState

__all__ = ["routes"]

_MAX_MS = 600_000


def routes(state: ChaosState) -> list[Route]:
    """The heavy-tailed endpoint, bound to ``state``."""

    async def tail(request: Request) -> Response:
        fraction = float_param(request, "slow_fraction", 0.02, minimum=0.0, maximum=1.0)
        slow_ms = int_param(request, "slow_ms", 1000, minimum=0, maximum=_MAX_MS)
        fast_ms = int_param(request, "fast_ms", 10, minimum=0, maximum=_MAX_MS)
        seed = request.query_params.get("seed", "")
        arrival = await arrive(state, request, "tail")
        slow = draw(seed, arrival.key, arrival.attempt) < fraction
        kind = "slow" if slow else "fast"
        outcome = await pause(request.scope, request.receive, (slow_ms if slow else fast_ms) / 1000)
        if outcome == "disconnected":
            waited = (state.monotonic() - arrival.arrived) * 1000
            arrival.record("disconnected", f"{kind} after {waited:.0f} ms")
            return NoReply()
        if outcome == "stopping":
            await end_for_shutdown(request.scope, request.receive)
            return NoReply()
        content = {"status": 200, "attempt": arrival.attempt, "key": arrival.key, "slow": slow}
        return reply_json(arrival, 200, content, detail=kind)

    return [Route("/tail/{key}", tail, methods=ALL_METHODS)]
