"""Endpoints that fail by status code, per attempt.

Their outcome depends only on the parameters and the attempt number for the key, so a
test states exactly what a client will meet: "503 twice, then 200".

- ``/status/{code}?retry_after=&seed=``: answers ``code`` (200..599; 1xx is refused with
  400 since it cannot end a response; 204/205/304 are sent without a body).
  ``retry_after`` is sent verbatim. ``code`` may be a weighted list, ``503:1,200:3``,
  drawn per attempt from ``(seed, key, attempt)``.
- ``/fail/{key}?times=1&status=503&retry_after=``: ``status`` for the first ``times``
  attempts (with ``retry_after`` verbatim), then 200.
- ``/sequence/{key}?steps=503,429,reset,200&retry_after=``: one step per attempt, the
  last repeating. A step is a status or ``reset`` (TCP RST, no reply), ``close`` (FIN,
  no reply), ``truncate`` (Content-Length 1000, 100 bytes sent, then FIN) or ``hang``
  (no reply until the client leaves). ``retry_after`` goes on 3xx-5xx steps.
- ``/flaky?rate=0.5&seed=&status=503``: fails with ``status`` when the draw for
  ``(seed, key, attempt)`` is below ``rate``, else 200.

Every reply is JSON ``{"status", "attempt", "key"}`` with ``X-Attempt``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import arrive
from retrysafe.chaos.chance import draw, weighted_choice
from retrysafe.chaos.outcomes import TruncatedResponse
from retrysafe.chaos.params import (
    MAX_TIMES,
    InvalidParameter,
    float_param,
    header_value_param,
    int_param,
    parse_number,
    status_code,
)
from retrysafe.chaos.replies import ALL_METHODS, reply_socket_fault, reply_status
from retrysafe.chaos.state import ChaosState

__all__ = ["SEQUENCE_FAULTS", "parse_sequence", "parse_weighted_statuses", "routes"]

#: Transport faults a ``/sequence`` step may name besides a status code.
SEQUENCE_FAULTS = frozenset({"reset", "close", "truncate", "hang"})

# What a ``truncate`` step promises and sends.
_TRUNCATE_PROMISED = 1000
_TRUNCATE_SENT = 100
# Weights are relative; a bound keeps their sum finite.
_MAX_WEIGHT = 1e6


def parse_weighted_statuses(raw: str) -> list[tuple[int, float]]:
    """``"503:1,200:3"`` as ``[(503, 1.0), (200, 3.0)]``; a bare code weighs 1."""
    options: list[tuple[int, float]] = []
    for entry in raw.split(","):
        code_text, _, weight_text = entry.partition(":")
        code = status_code("code", code_text)
        weight = 1.0
        if weight_text:
            weight = parse_number("code", weight_text, minimum=0.0, maximum=_MAX_WEIGHT)
        options.append((code, weight))
    if sum(weight for _, weight in options) <= 0:
        raise InvalidParameter("code", "the weights must add up to more than zero")
    return options


def parse_sequence(raw: str) -> list[int | str]:
    """``"503,429,reset,200"`` as ``[503, 429, "reset", 200]``."""
    steps: list[int | str] = []
    for token in raw.split(","):
        step = token.strip().lower()
        steps.append(step if step in SEQUENCE_FAULTS else status_code("steps", step))
    return steps


def routes(state: ChaosState) -> list[Route]:
    """The status-code endpoints, bound to ``state``."""

    async def status(request: Request) -> Response:
        options = parse_weighted_statuses(request.path_params["code"])
        retry_after = header_value_param(request, "retry_after")
        seed = request.query_params.get("seed", "")
        arrival = await arrive(state, request, "status")
        chosen = options[0][0]
        if len(options) > 1:
            chosen = weighted_choice(options, draw(seed, arrival.key, arrival.attempt))
        return reply_status(arrival, chosen, retry_after=retry_after)

    async def fail(request: Request) -> Response:
        times = int_param(request, "times", 1, minimum=0, maximum=MAX_TIMES)
        failure = status_code("status", request.query_params.get("status") or "503")
        retry_after = header_value_param(request, "retry_after")
        arrival = await arrive(state, request, "fail")
        if arrival.attempt <= times:
            return reply_status(arrival, failure, retry_after=retry_after)
        return reply_status(arrival, 200)

    async def sequence(request: Request) -> Response:
        steps = parse_sequence(request.query_params.get("steps") or "200")
        retry_after = header_value_param(request, "retry_after")
        arrival = await arrive(state, request, "sequence")
        step = steps[min(arrival.attempt, len(steps)) - 1]
        if isinstance(step, int):
            hint = retry_after if step >= 300 else None
            return reply_status(arrival, step, retry_after=hint)
        if step == "truncate":
            arrival.record("truncate")
            return TruncatedResponse(
                promised=_TRUNCATE_PROMISED, sent=_TRUNCATE_SENT, headers=arrival.headers()
            )
        if step == "reset":
            return reply_socket_fault(arrival, "reset")
        if step == "close":
            return reply_socket_fault(arrival, "close")
        return reply_socket_fault(arrival, "hang")

    async def flaky(request: Request) -> Response:
        rate = float_param(request, "rate", 0.5, minimum=0.0, maximum=1.0)
        failure = status_code("status", request.query_params.get("status") or "503")
        seed = request.query_params.get("seed", "")
        arrival = await arrive(state, request, "flaky")
        failed = draw(seed, arrival.key, arrival.attempt) < rate
        return reply_status(arrival, failure if failed else 200)

    return [
        Route("/status/{code}", status, methods=ALL_METHODS),
        Route("/fail/{key}", fail, methods=ALL_METHODS),
        Route("/sequence/{key}", sequence, methods=ALL_METHODS),
        Route("/flaky", flaky, methods=ALL_METHODS),
    ]
