"""``/redirect-chain/{key}``: a chain of slow redirects, for deadlines and attempts that
must cover a whole chain rather than each hop.

``/redirect-chain/{key}?hops=3&delay_ms=0&redirect=302&fail_times=0&fail_status=503``
is hop 0. Each hop waits ``delay_ms``, then answers ``redirect`` with a relative
``Location`` to the next hop (the same URL with ``hop=N+1``); hop ``hops`` answers 200,
so a chain is ``hops + 1`` requests. With ``fail_times=N`` every hop first answers
``fail_status`` to its first N requests (counted per hop), then goes on as above.

Each hop counts its own attempts (endpoint ``redirect-chain/N``) and every request is
logged with ``detail`` ``"hop N of H"``, so a test can count requests per hop. Replies
are JSON ``{"status", "attempt", "key", "hop"}``.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import arrive
from retrysafe.chaos.outcomes import NoReply, end_for_shutdown, pause
from retrysafe.chaos.params import MAX_TIMES, InvalidParameter, int_param, status_code
from retrysafe.chaos.replies import ALL_METHODS, reply_json
from retrysafe.chaos.state import ChaosState

__all__ = ["REDIRECT_STATUSES", "routes"]

#: The statuses ``redirect=`` may choose (303 turns any method into GET; 307/308 keep it).
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

# Upper bounds that keep a typo from tying a test run up for hours.
_MAX_MS = 600_000
_MAX_HOPS = 100


def _next_hop_location(request: Request, hop: int) -> str:
    """This request's path and query with ``hop`` set to ``hop`` (other parameters kept)."""
    query = [(name, value) for name, value in request.query_params.multi_items() if name != "hop"]
    query.append(("hop", str(hop)))
    # The path as it was sent (ASGI's raw_path): a decoded one would turn a key's "%41"
    # into "A" on the next hop. (A server without raw_path: the path quoted again.)
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(request.url.path, safe="/")
    return f"{path}?{urlencode(query)}"


def routes(state: ChaosState) -> list[Route]:
    """The redirect-chain endpoint, bound to ``state``."""

    async def redirect_chain(request: Request) -> Response:
        hops = int_param(request, "hops", 3, minimum=0, maximum=_MAX_HOPS)
        hop = int_param(request, "hop", 0, minimum=0, maximum=hops)
        delay_ms = int_param(request, "delay_ms", 0, minimum=0, maximum=_MAX_MS)
        redirect = status_code("redirect", request.query_params.get("redirect") or "302")
        if redirect not in REDIRECT_STATUSES:
            allowed = ", ".join(str(status) for status in sorted(REDIRECT_STATUSES))
            raise InvalidParameter("redirect", f"must be one of {allowed}, got {redirect}")
        fail_times = int_param(request, "fail_times", 0, minimum=0, maximum=MAX_TIMES)
        failure = status_code("fail_status", request.query_params.get("fail_status") or "503")
        arrival = await arrive(state, request, f"redirect-chain/{hop}")
        content = {"attempt": arrival.attempt, "key": arrival.key, "hop": hop}
        detail = f"hop {hop} of {hops}"
        if arrival.attempt <= fail_times:
            reply = reply_json(arrival, failure, {"status": failure, **content}, detail=detail)
        elif hop < hops:
            location = _next_hop_location(request, hop + 1)
            reply = reply_json(
                arrival,
                redirect,
                {"status": redirect, **content, "location": location},
                headers={"location": location},
                detail=detail,
            )
        else:
            reply = reply_json(arrival, 200, {"status": 200, **content}, detail=detail)
        if await pause(request.scope, request.receive, delay_ms / 1000) == "stopping":
            await end_for_shutdown(request.scope, request.receive)
            return NoReply()
        return reply

    return [Route("/redirect-chain/{key}", redirect_chain, methods=ALL_METHODS)]
