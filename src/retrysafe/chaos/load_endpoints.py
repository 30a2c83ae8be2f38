"""Endpoints that fail because of load or time: ``/rate-limit``, ``/outage``, ``/capacity``.

Unlike the per-attempt endpoints these react to *when* and *how many* requests arrive,
which is what a retry budget, a circuit breaker or a shared cooldown is for.

- ``/rate-limit/{bucket}?rps=1&burst=1``: a token bucket per (key, bucket); 429 with
  ``Retry-After`` = whole seconds until a token, rounded up, when empty. ``rps`` is from
  0.000001 to 1000000, ``burst`` from 1 to 1000000; anything else is a 400.
- ``/outage/{key}?down_ms=1000&retry_after=``: 503 from the key's first request until
  ``down_ms`` later, then 200.
- ``/capacity/{pool}?concurrency=1&service_ms=100``: at most ``concurrency`` requests
  in service per (key, pool), each taking ``service_ms`` (even if its client leaves);
  any beyond that get 503 at once.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import arrive
from retrysafe.chaos.limiter import TokenBucket
from retrysafe.chaos.outcomes import NoReply, end_for_shutdown, pause
from retrysafe.chaos.params import float_param, header_value_param, int_param
from retrysafe.chaos.replies import ALL_METHODS, reply_status
from retrysafe.chaos.state import CapacityPool, ChaosState

__all__ = ["routes"]

_MAX_MS = 600_000
# A rate below this refills slower than one token in 11 days; above it, faster than any test.
_MIN_RPS = 1e-6
_MAX_RPS = 1e6
_MAX_BURST = 1_000_000
_MAX_CONCURRENCY = 10_000


def routes(state: ChaosState) -> list[Route]:
    """The load- and time-driven endpoints, bound to ``state``."""

    async def rate_limit(request: Request) -> Response:
        rate = float_param(request, "rps", 1.0, minimum=_MIN_RPS, maximum=_MAX_RPS)
        burst = int_param(request, "burst", 1, minimum=1, maximum=_MAX_BURST)
        bucket_name = request.path_params["bucket"]
        arrival = await arrive(state, request, f"rate-limit/{bucket_name}")
        with state.lock:
            bucket = state.buckets.get((arrival.key, bucket_name))
            if bucket is None:
                bucket = TokenBucket(rate=rate, burst=burst, now=arrival.arrived)
                state.buckets[(arrival.key, bucket_name)] = bucket
            else:
                bucket.reconfigure(rate=rate, burst=burst)
            if bucket.try_take(arrival.arrived):
                return reply_status(arrival, 200)
            wait = bucket.retry_after(arrival.arrived)
        return reply_status(arrival, 429, retry_after=str(wait))

    async def outage(request: Request) -> Response:
        down_ms = int_param(request, "down_ms", 1000, minimum=0, maximum=_MAX_MS)
        retry_after = header_value_param(request, "retry_after")
        arrival = await arrive(state, request, "outage")
        with state.lock:
            started = state.outage_starts.setdefault(arrival.key, arrival.arrived)
        if arrival.arrived - started < down_ms / 1000:
            return reply_status(arrival, 503, retry_after=retry_after)
        return reply_status(arrival, 200)

    async def capacity(request: Request) -> Response:
        concurrency = int_param(request, "concurrency", 1, minimum=0, maximum=_MAX_CONCURRENCY)
        service_ms = int_param(request, "service_ms", 100, minimum=0, maximum=_MAX_MS)
        pool_name = request.path_params["pool"]
        arrival = await arrive(state, request, f"capacity/{pool_name}")
        with state.lock:
            pool = state.pools.setdefault((arrival.key, pool_name), CapacityPool())
            shed = pool.in_flight >= concurrency
            if not shed:
                pool.in_flight += 1
        if shed:
            return reply_status(arrival, 503, detail="shed")
        try:
            reply = reply_status(arrival, 200, detail="served")
            # The work goes on if the client gives up: abandoned work still takes capacity.
            outcome = await pause(
                request.scope, request.receive, service_ms / 1000, end_if_client_leaves=False
            )
            if outcome == "stopping":
                await end_for_shutdown(request.scope, request.receive)
                return NoReply()
            return reply
        finally:
            with state.lock:
                pool.in_flight -= 1

    return [
        Route("/rate-limit/{bucket}", rate_limit, methods=ALL_METHODS),
        Route("/outage/{key}", outage, methods=ALL_METHODS),
        Route("/capacity/{pool}", capacity, methods=ALL_METHODS),
    ]
