"""The retry budget pays for a burst's retries from what the burst earned.

A call earns as its first attempt ends, before it may ask for a retry. With a
``burst_window`` (off by default), what calls earn while the bucket is full is kept that
many seconds (the overflow), spent before the bucket, oldest first. Arithmetic on the fake
clock; the same over real sockets is ``benchmarks/budget_burst.py``.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

import retrysafe
from retrysafe.governor import BudgetSettings, Governor, GovernorSettings
from retrysafe.governor.budget import RetryBudget
from retrysafe.governor.guard import DependencyGuard
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio

#: A budget with a burst window (off by default) of 10 s.
WINDOWED = BudgetSettings(burst_window=10)


def _budget(clock: FakeClock, **settings: float) -> RetryBudget:
    return RetryBudget(
        BudgetSettings(min_per_second=0, **{"burst_window": 10.0, **settings}), clock
    )


def _spend_all(budget: RetryBudget) -> int:
    granted = 0
    while budget.try_spend():
        granted += 1
    return granted


def test_a_burst_of_a_thousand_calls_pays_for_270_retries_not_60() -> None:
    # The user trial's burst: 1,000 calls started together earn 0.27 each.
    budget = _budget(FakeClock())
    for _ in range(1000):
        budget.record_first_attempt()
    assert budget.tokens == pytest.approx(60 + 270)
    assert _spend_all(budget) == 330


def test_with_no_burst_window_the_bucket_alone_keeps_max_tokens() -> None:
    budget = _budget(FakeClock(), burst_window=0)
    for _ in range(1000):
        budget.record_first_attempt()
    assert budget.tokens == 60
    assert _spend_all(budget) == 60


def test_the_overflow_expires_after_the_window_and_the_bucket_stays() -> None:
    clock = FakeClock()
    budget = _budget(clock)
    for _ in range(100):
        budget.record_first_attempt()  # 27 tokens past a full bucket
    clock.advance(9.5)
    assert budget.tokens == pytest.approx(87)
    clock.advance(1.0)  # 10.5 s after they were earned
    assert budget.tokens == 60
    assert _spend_all(budget) == 60


def test_the_overflow_expires_a_tenth_of_the_window_at_a_time() -> None:
    clock = FakeClock()
    budget = _budget(clock)
    for _ in range(100):
        budget.record_first_attempt()  # 27 at 0 s
    clock.advance(5)
    for _ in range(200):
        budget.record_first_attempt()  # 54 at 5 s
    clock.advance(5.5)  # 10.5 s: the first 27 are gone, the 54 stay
    assert budget.tokens == pytest.approx(60 + 54)
    clock.advance(5)  # 15.5 s
    assert budget.tokens == 60


def test_a_retry_spends_the_overflow_first_oldest_first() -> None:
    clock = FakeClock()
    budget = _budget(clock)
    for _ in range(10):
        budget.record_first_attempt()  # 2.7 at 0 s
    clock.advance(5)
    for _ in range(10):
        budget.record_first_attempt()  # 2.7 at 5 s
    for _ in range(3):
        assert budget.try_spend()  # 2.7 from 0 s, then 0.3 from 5 s
    assert budget.tokens == pytest.approx(60 + 2.4)
    clock.advance(5.5)  # the 0 s slot would have expired: nothing was left in it
    assert budget.tokens == pytest.approx(60 + 2.4)
    for _ in range(2):
        assert budget.try_spend()  # 2 from the 5 s slot
    assert budget.tokens == pytest.approx(60.4)  # the bucket untouched, 0.4 left over
    assert budget.try_spend()  # 0.4 of overflow and 0.6 of the bucket
    assert budget.tokens == pytest.approx(59.4)


def test_an_empty_bucket_earns_back_first_then_overflows() -> None:
    budget = _budget(FakeClock(), max_tokens=2)
    assert _spend_all(budget) == 2
    for _ in range(10):
        budget.record_first_attempt()  # 2.7: 2 fill the bucket, 0.7 overflow
    assert budget.tokens == pytest.approx(2.7)
    assert budget.try_spend()
    assert budget.try_spend()
    assert not budget.try_spend()  # 0.7 left: less than a token


def test_a_refund_past_a_full_bucket_is_kept_as_overflow() -> None:
    clock = FakeClock()
    budget = _budget(clock, max_tokens=2)
    for _ in range(10):
        budget.record_first_attempt()  # full, and 2.7 of overflow
    assert budget.try_spend()  # from the overflow
    budget.refund()  # the retry was never sent
    assert budget.tokens == pytest.approx(4.7)
    clock.advance(11)
    assert budget.tokens == 2


def test_an_outage_after_healthy_traffic_finds_at_most_one_window_of_earnings() -> None:
    # 30 s at 100 calls a second, then every call fails: the retries granted at once
    # are the bucket's 60 and what the last 10 s earned, not what the 30 s earned.
    clock = FakeClock()
    budget = _budget(clock)
    for _ in range(3000):
        budget.record_first_attempt()
        clock.advance(0.01)
    granted = _spend_all(budget)
    assert 60 + 0.27 * 900 <= granted <= 60 + 0.27 * 1000
    assert granted < 60 + 0.27 * 3000


def test_a_guard_with_overflow_is_not_at_rest() -> None:
    clock = FakeClock()
    budget = _budget(clock)
    guard = DependencyGuard("api.test", budget, None, None)
    assert guard.at_rest()
    budget.record_first_attempt()
    assert not guard.at_rest()  # a fresh guard would not have the 0.27
    clock.advance(11)
    assert guard.at_rest()


@pytest.mark.parametrize("window", [-1.0, float("inf"), float("nan"), 1e-320, 0.0005])
def test_a_burst_window_that_is_no_number_of_seconds_is_refused(window: float) -> None:
    with pytest.raises(ValueError, match="burst_window"):
        BudgetSettings(burst_window=window)


def _client_over(handler: Any, clock: FakeClock, governor: Governor) -> retrysafe.Client:
    return retrysafe.Client(transport=httpx.MockTransport(handler), clock=clock, governor=governor)


def test_a_call_earns_as_its_first_attempt_ends_not_as_it_is_admitted() -> None:
    # Gathered calls wait for the pool's connections after they are admitted, some for
    # longer than the window (trial108: 2,000 calls on 10 connections lost 73 to
    # BudgetExhausted, earned at admission and expired before their retries).
    clock = FakeClock()
    governor = Governor(GovernorSettings(budget=WINDOWED, breaker=None), clock=clock)

    def after_a_long_queue(request: httpx.Request) -> httpx.Response:
        clock.advance(15)  # admitted at 0 s, answered at 15 s
        return httpx.Response(200)

    with _client_over(after_a_long_queue, clock, governor) as client:
        client.get("http://api.test/")
    clock.advance(8)  # 23 s: 8 s after the answer, 23 s after the admission
    budget = governor.guard("http://api.test:80").budget
    assert budget is not None
    assert budget.tokens == pytest.approx(60.27)


def test_a_failed_first_attempt_earns_before_its_retry_asks() -> None:
    # A bucket of none: the call's own 1.0 pays for its own retry.
    clock = FakeClock(randoms=[0.0])
    tiny = BudgetSettings(ratio=1.0, max_tokens=1, min_per_second=0, burst_window=0)
    governor = Governor(GovernorSettings(budget=tiny, breaker=None), clock=clock)
    budget = governor.guard("http://api.test:80").budget
    assert budget is not None
    assert budget.try_spend()  # empty
    replies = [503, 200]
    with _client_over(lambda _: httpx.Response(replies.pop(0)), clock, governor) as client:
        assert client.get("http://api.test/").status_code == 200
    assert budget.tokens == 0


@pytest.mark.parametrize("fake", ["governor", "client"])
def test_the_budget_keeps_its_own_time_when_the_client_reads_another_clock(fake: str) -> None:
    # (A test that gave only one of them a fake clock: the overflow must still expire
    # on the budget's own clock, as it did before the drive handed it readings.)
    clock = FakeClock()
    governor = Governor(
        GovernorSettings(budget=WINDOWED, breaker=None),
        clock=clock if fake == "governor" else None,
    )
    client_clock = clock if fake == "client" else None
    with retrysafe.Client(
        transport=httpx.MockTransport(lambda _: httpx.Response(200)),
        clock=client_clock,
        governor=governor,
    ) as client:
        for _ in range(100):
            client.get("http://api.test/")
    budget = governor.guard("http://api.test:80").budget
    assert budget is not None
    assert budget.tokens == pytest.approx(87)
    if fake == "governor":
        clock.advance(11)
        assert budget.tokens == 60


async def test_a_burst_answered_after_it_was_all_admitted_pays_for_its_retries() -> None:
    # 400 calls gathered at once, all admitted before any answer comes (as calls queue
    # for a pool), every fourth failing once. Earned as they were admitted, the calls'
    # 108 tokens came to a full bucket and were lost, and 40 of the 100 retries were
    # refused; earned as each answer comes, the successes refill what the retries spend.
    calls, clock = 400, FakeClock()
    all_admitted = anyio.Event()
    arrived: set[str] = set()

    async def answer(request: httpx.Request) -> httpx.Response:
        key = request.url.params["key"]
        first = key not in arrived
        arrived.add(key)
        if len(arrived) == calls:
            all_admitted.set()
        await all_admitted.wait()
        return httpx.Response(503 if first and int(key) % 4 == 3 else 200)

    governor = Governor(GovernorSettings(breaker=None), clock=clock)
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(answer), clock=clock, governor=governor
    ) as client:
        outcomes: list[str] = []

        async def call(key: int) -> None:
            try:
                await client.get("http://api.test/", params={"key": key})
            except retrysafe.ApiError as error:
                outcomes.append(type(error).__name__)
            else:
                outcomes.append("ok")

        async with anyio.create_task_group() as group:
            for key in range(calls):
                group.start_soon(call, key)
    assert outcomes == ["ok"] * calls
