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
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe.attempt_deadline import current_call
from retrysafe.attempt_plan import (
    HARD_END_GRACE,
    AttemptPlan,
    hard_end_after,
    phase_limit,
    plan_attempt,
)

DEADLINE = 0.8
#: The attempt's own limit is far longer: the deadline is what cuts it.
CUT = retrysafe.RetryPolicy(deadline=DEADLINE, attempt_timeout=5.0)


def test_a_cut_attempt_gives_its_phases_the_time_less_the_grace() -> None:
    assert phase_limit(AttemptPlan(1, 0.8, True, True)) == pytest.approx(0.8 - HARD_END_GRACE)
    assert phase_limit(AttemptPlan(1, 0.8, False, True)) == 0.8  # its own limit: unchanged
    # Too short to take the whole grace from: half its time, and it still ends on time.
    assert phase_limit(AttemptPlan(1, 0.08, True, True)) == pytest.approx(0.04)
    for timeout in (0.8, 0.08, 0.01):
        assert hard_end_after(AttemptPlan(1, timeout, True, True)) == timeout
    assert hard_end_after(AttemptPlan(1, 0.8, False, True)) == 0.8 + HARD_END_GRACE


def test_an_attempt_whose_own_hard_end_would_pass_the_deadline_is_cut() -> None:
    """review73: judged by its limit alone, an attempt given its full 1.0 s with 1.03 s
    left was not cut, and its hard end, a grace after, fell 20 ms past the deadline."""
    plan = plan_attempt(1, attempt_timeout=1.0, remaining=1.03, read_body=True)
    assert (plan.timeout, plan.cut_by_deadline) == (1.0, True)
    assert hard_end_after(plan) <= 1.03
    roomy = plan_attempt(1, attempt_timeout=1.0, remaining=1.06, read_body=True)
    assert (roomy.timeout, roomy.cut_by_deadline) == (1.0, False)
    assert hard_end_after(roomy) <= 1.06


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


def _get(flavour: str, policy: retrysafe.RetryPolicy, url: str) -> None:
    if flavour == "sync":
        with retrysafe.Client(policy=policy) as client:
            client.get(url)
        return

    async def main() -> None:
        async with retrysafe.AsyncClient(policy=policy) as client:
            await client.get(url)

    asyncio.run(main())


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_trickled_body_just_within_the_attempts_limit_ends_as_the_deadline(
    chaos: Any, flavour: str
) -> None:
    """Its attempt is cut by the deadline, so it ends on it, as ``DeadlineExceeded``
    (before: ``TransportError``, 20 ms past it)."""
    policy = retrysafe.RetryPolicy(deadline=1.03, attempt_timeout=1.0, attempts=1)
    url = chaos.url("/drip", chunks=200, interval_ms=20)
    started = time.monotonic()
    with pytest.raises(retrysafe.DeadlineExceeded):
        _get(flavour, policy, url)
    assert time.monotonic() - started < 1.03 + 0.5  # (loose: a loaded machine)
