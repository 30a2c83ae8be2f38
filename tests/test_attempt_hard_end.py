"""An attempt the deadline cuts ends on the deadline, not a grace after it.

Each attempt's phases (connect, each read and write) get its time, and the shells end
the whole attempt a little later (``HARD_END_GRACE``), so that httpx's own timeouts,
which know how far the request got, fire first. Found in a user trial: for an attempt
whose time is what the deadline left, that grace ran past the deadline, and a server
trickling its body held a 0.8 s call for 0.85 s. Such an attempt's phases now end the
grace sooner, and its hard end falls on the deadline.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

import retrysafe
from retrysafe.attempt_deadline import current_call
from retrysafe.attempt_plan import HARD_END_GRACE, AttemptPlan, phase_limit

DEADLINE = 0.8
#: The attempt's own limit is far longer: the deadline is what cuts it.
CUT = retrysafe.RetryPolicy(deadline=DEADLINE, attempt_timeout=5.0)


def test_a_cut_attempt_gives_its_phases_the_time_less_the_grace() -> None:
    assert phase_limit(AttemptPlan(1, 0.8, True, True)) == pytest.approx(0.8 - HARD_END_GRACE)
    assert phase_limit(AttemptPlan(1, 0.8, False, True)) == 0.8  # its own limit: unchanged
    assert phase_limit(AttemptPlan(1, 0.08, True, True)) == 0.08  # too short to take from


def _seen_by_the_transport(seen: dict[str, float]) -> httpx.Response:
    """What the attempt in flight was given: its hard end and its read timeout, each
    as seconds from now."""
    call = current_call.get()
    assert call is not None
    assert call.attempt_ends_at is not None
    seen["hard_end_in"] = call.attempt_ends_at - time.monotonic()
    return httpx.Response(200)


def test_a_sync_attempt_cut_by_the_deadline_ends_on_it() -> None:
    seen: dict[str, float] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["read"] = request.extensions["timeout"]["read"]
        return _seen_by_the_transport(seen)

    with retrysafe.Client(transport=httpx.MockTransport(handler), policy=CUT) as client:
        client.get("http://api.test/items")
    assert 0.5 < seen["hard_end_in"] <= DEADLINE
    assert seen["read"] <= DEADLINE - HARD_END_GRACE + 1e-9


def test_an_async_attempt_cut_by_the_deadline_ends_on_it() -> None:
    seen: dict[str, float] = {}

    async def handler(request: httpx.Request) -> httpx.Response:
        seen["read"] = request.extensions["timeout"]["read"]
        return _seen_by_the_transport(seen)

    async def main() -> None:
        async with retrysafe.AsyncClient(
            transport=httpx.MockTransport(handler), policy=CUT
        ) as client:
            await client.get("http://api.test/items")

    asyncio.run(main())
    assert 0.5 < seen["hard_end_in"] <= DEADLINE
    assert seen["read"] <= DEADLINE - HARD_END_GRACE + 1e-9


def test_an_attempt_its_own_limit_cuts_keeps_the_grace_after_it() -> None:
    seen: dict[str, float] = {}
    policy = retrysafe.RetryPolicy(deadline=30.0, attempt_timeout=DEADLINE)
    with retrysafe.Client(
        transport=httpx.MockTransport(lambda request: _seen_by_the_transport(seen)),
        policy=policy,
    ) as client:
        client.get("http://api.test/items")
    assert seen["hard_end_in"] > DEADLINE  # its limit, then the grace for httpx's timeouts
