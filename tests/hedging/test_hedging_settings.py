"""Hedging's settings and state: RetryPolicy fields, learned latency, the governor's answer."""

from __future__ import annotations

import math
import time

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.decisions import HedgeAnswer
from retrysafe.governor import (
    BreakerSettings,
    BudgetSettings,
    Governor,
    GovernorSettings,
    LimiterSettings,
)
from retrysafe.latency import (
    _REFRESH_EVERY,
    FLOOR,
    MAX_WINDOWS,
    MIN_SAMPLES,
    WARMUP_DELAY,
    LatencyBook,
    LatencyWindow,
)
from retrysafe.testing import FakeClock


def test_hedging_is_off_by_default() -> None:
    assert RetryPolicy().hedge_after is None
    assert RetryPolicy().max_hedges == 1


@pytest.mark.parametrize("value", [0.05, 2, "p95", "p99.9", "P50", " p90 "])
def test_hedge_after_takes_seconds_or_a_percentile(value: float | str) -> None:
    assert RetryPolicy(hedge_after=value).hedge_after == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, r"hedge_after must be > 0 seconds"),
        (-1.0, r"hedge_after must be > 0 seconds"),
        (math.inf, r"hedge_after must be finite"),
        (math.nan, r"hedge_after must be a number of seconds, got nan"),
        (True, r"hedge_after must be seconds \(a number\), a percentile such as 'p95'"),
        ("95", r"hedge_after must be seconds \(a number\) or a percentile such as 'p95'"),
        ("p", r"or a percentile such as 'p95'"),
        ("fast", r"or a percentile such as 'p95'"),
        ("p100", r"from 'p50' to 'p99.999'"),
        ("p10", r"hedging before the median"),
    ],
)
def test_a_bad_hedge_after_says_what_to_write(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(hedge_after=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_max_hedges_must_be_a_whole_number_of_at_least_one(value: object) -> None:
    with pytest.raises(ValueError, match=r"max_hedges must be a whole number >= 1"):
        RetryPolicy(max_hedges=value)  # type: ignore[arg-type]


def test_more_hedges_than_the_attempts_could_send_are_refused() -> None:
    with pytest.raises(ValueError, match=r"max_hedges must be at most attempts - 1 = 1"):
        RetryPolicy(attempts=2, hedge_after=0.1, max_hedges=3)
    assert RetryPolicy(attempts=4, hedge_after=0.1, max_hedges=3).max_hedges == 3
    # Without hedging, max_hedges is unused and not checked against attempts.
    assert RetryPolicy(attempts=1, max_hedges=3).max_hedges == 3


def test_a_percentile_waits_for_warmup_then_follows_the_window() -> None:
    book = LatencyBook()
    for _ in range(MIN_SAMPLES - 1):
        book.record("api", 0.010)
    assert book.hedge_delay("api", "p95") == WARMUP_DELAY
    book.record("api", 0.010)
    assert book.hedge_delay("api", "p95") == 0.010
    assert book.hedge_delay("other", "p95") == WARMUP_DELAY  # per dependency
    assert book.hedge_delay("api", 0.3) == 0.3  # a fixed delay is just that


def test_a_percentile_is_never_below_the_floor() -> None:
    book = LatencyBook()
    for _ in range(100):
        book.record("api", 0.0001)
    assert book.hedge_delay("api", "p99") == FLOOR


def test_the_window_percentile_is_nearest_rank_over_recent_samples() -> None:
    window = LatencyWindow(size=100)
    for ms in range(1, 101):
        window.record(ms / 1000)
    assert window.percentile(95) == 0.095
    assert window.percentile(50) == 0.050
    for _ in range(100):  # the window forgets: only the last 100 count
        window.record(1.0)
    assert window.percentile(50) == 1.0


def test_a_rank_between_two_samples_rounds_up() -> None:
    # 20 samples: p97 and p99 fall between ranks 19 and 20, and nearest rank takes 20.
    window = LatencyWindow(size=100)
    for ms in range(1, 21):
        window.record(ms / 1000)
    assert window.percentile(97) == 0.020
    assert window.percentile(99) == 0.020
    assert window.percentile(50) == 0.010


@pytest.mark.parametrize(("q", "ms"), [(99.9, 999), (99.4, 994), (99.3, 993), (50.1, 501)])
def test_a_rank_that_floats_put_a_hair_past_a_whole_one_is_that_rank(q: float, ms: int) -> None:
    """In floats 99.9 / 100 * 1000 is 999.0000000000001: rounded up as it stood, p99.9 of
    a full default window (1000 samples) was the slowest sample, not the 999th."""
    window = LatencyWindow()
    for taken in range(1, 1001):
        window.record(taken / 1000)
    assert window.percentile(q) == ms / 1000


def test_a_losing_copy_is_learned_too_as_a_lower_bound_of_its_latency() -> None:
    # Left out, the slow copies a hedge cut short would never reach the book, and the
    # percentile would shrink towards the fast ones.
    governor = Governor()
    dependency = "http://p95.test:80"  # (the call's own: its origin)
    for _ in range(MIN_SAMPLES):
        governor.latencies.record(dependency, 0.02)  # warmed up: hedge after 20 ms
    answered = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal answered
        answered += 1
        if answered == 1:
            time.sleep(0.3)  # the first copy is slow; the hedge answers at once
        return httpx.Response(200)

    policy = RetryPolicy(hedge_after="p95")
    transport = httpx.MockTransport(handler)
    with retrysafe.Client(transport=transport, governor=governor, policy=policy) as client:
        response = client.get("http://p95.test/")
    report = retrysafe.report_of(response)
    assert report is not None
    assert (report.hedges, report.winner) == (1, 2)
    assert governor.latencies.window(dependency).seen == MIN_SAMPLES + 2  # winner and loser


def test_a_cached_percentile_catches_up_after_refresh_every_new_samples() -> None:
    # Worked out again only every so often (a sort per read would be costly), but never
    # more than _REFRESH_EVERY samples behind the window.
    window = LatencyWindow(size=1000)
    for _ in range(MIN_SAMPLES):
        window.record(0.010)
    assert window.percentile(50) == 0.010
    for _ in range(_REFRESH_EVERY - 1):
        window.record(1.0)
    assert window.percentile(50) == 0.010  # (cached: 24 new samples are not enough)
    window.record(1.0)
    assert window.percentile(50) == 1.0


def test_two_percentiles_of_one_window_are_cached_apart() -> None:
    window = LatencyWindow(size=100)
    for ms in range(1, 101):
        window.record(ms / 1000)
    assert window.percentile(99.4) == 0.100  # (rank 99.4 rounds up to 100)
    assert window.percentile(99) == 0.099
    assert window.percentile(99.4) == 0.100


def test_an_instant_answer_is_a_sample_too() -> None:
    # A latency of zero (a cached answer, a fake clock) is a real one: left out, the
    # window would warm up later and its percentiles lean slow.
    window = LatencyWindow()
    for _ in range(MIN_SAMPLES):
        window.record(0.0)
    assert window.seen == MIN_SAMPLES
    assert window.percentile(95) == 0.0


def test_nonsense_samples_are_ignored() -> None:
    window = LatencyWindow()
    for value in (-1.0, math.nan, math.inf):
        window.record(value)
    assert window.seen == 0


def guard_with(settings: GovernorSettings) -> tuple[Governor, FakeClock]:
    clock = FakeClock()
    return Governor(settings, clock=clock), clock


def test_a_hedge_spends_a_budget_token_and_is_refused_without_one() -> None:
    budget = BudgetSettings(ratio=0.0, max_tokens=2.0, min_per_second=0.001)
    governor, _ = guard_with(GovernorSettings(budget=budget, breaker=None, limiter=None))
    guard = governor.guard("api")
    assert guard.answer_hedge() == HedgeAnswer()
    assert guard.answer_hedge() == HedgeAnswer()
    assert guard.answer_hedge() == HedgeAnswer("budget_exhausted")


def test_no_hedge_while_the_breaker_is_not_closed() -> None:
    breaker = BreakerSettings(consecutive_failures=1, open_for=10.0)
    governor, _ = guard_with(GovernorSettings(breaker=breaker))
    guard = governor.guard("api")
    assert guard.breaker is not None
    permit = guard.breaker.acquire(probe_lease=1.0)
    guard.breaker.record(permit, "unhealthy")
    tokens = guard.budget.tokens if guard.budget is not None else None
    assert guard.answer_hedge() == HedgeAnswer("circuit_not_closed")
    assert (guard.budget.tokens if guard.budget is not None else None) == tokens  # none spent


def test_no_hedge_during_a_cooldown() -> None:
    governor, _ = guard_with(GovernorSettings())
    guard = governor.guard("api")
    assert guard.limiter is not None
    guard.limiter.start_cooldown(5.0)
    assert guard.answer_hedge() == HedgeAnswer("cooldown")


def test_a_hedge_takes_a_paced_slot_or_is_refused_when_none_is_free() -> None:
    limiter = LimiterSettings(requests_per_second=1.0, burst=1)
    governor, _ = guard_with(GovernorSettings(limiter=limiter))
    guard = governor.guard("api")
    assert guard.answer_hedge() == HedgeAnswer()  # took the one slot
    assert guard.answer_hedge() == HedgeAnswer("pacing")
    assert guard.limiter is not None
    assert guard.limiter.queued() == 0.0  # the refused copy reserved nothing


def test_hedging_with_one_attempt_is_refused_since_no_copy_could_go() -> None:
    with pytest.raises(ValueError, match=r"needs attempts >= 2"):
        RetryPolicy(hedge_after=0.05, attempts=1)
    assert RetryPolicy(hedge_after=0.05, attempts=2).hedge_after == 0.05
    assert RetryPolicy(attempts=1).hedge_after is None  # no hedging: one attempt is fine


# -- bounded memory: what is learned of dependencies no longer called is forgotten ----------


def test_a_latency_book_keeps_a_bounded_number_of_dependencies() -> None:
    book = LatencyBook()
    for i in range(MAX_WINDOWS + 500):
        book.record(f"http://host{i}.test:80", 0.01)
    assert len(book) == MAX_WINDOWS
    book.forget(f"http://host{MAX_WINDOWS + 499}.test:80")
    assert len(book) == MAX_WINDOWS - 1


def test_a_full_latency_book_forgets_the_dependency_it_has_kept_longest() -> None:
    book = LatencyBook()
    for i in range(MAX_WINDOWS):
        for _ in range(MIN_SAMPLES):
            book.record(f"http://host{i}.test:80", 0.01)
    book.record("http://newcomer.test:80", 0.01)
    assert len(book) == MAX_WINDOWS
    # The oldest warms up again; the one kept just before the newcomer is still known.
    assert book.hedge_delay("http://host1.test:80", "p95") == 0.01
    assert book.hedge_delay(f"http://host{MAX_WINDOWS - 1}.test:80", "p95") == 0.01
    assert book.hedge_delay("http://host0.test:80", "p95") == WARMUP_DELAY


def test_the_governor_forgets_the_latencies_of_a_dependency_it_forgets() -> None:
    clock = FakeClock()
    governor = Governor(clock=clock)
    governor.guard("http://a.test:80")
    governor.latencies.record("http://a.test:80", 0.01)
    clock.advance(3600)
    governor.guard("http://b.test:80")  # a sweep: a.test has been idle for an hour
    assert "http://a.test:80" not in governor.dependencies()
    assert len(governor.latencies) == 0


def test_a_fixed_hedge_delay_learns_no_latencies() -> None:
    # Only a percentile (hedge_after="p95") reads them; a fixed delay keeps none.
    governor = Governor()
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    policy = RetryPolicy(hedge_after=1.0)
    with retrysafe.Client(transport=transport, governor=governor, policy=policy) as client:
        for i in range(5):
            client.get(f"http://host{i}.test/")
    assert len(governor.latencies) == 0
    with retrysafe.Client(transport=transport, governor=governor) as client:
        client.get("http://p95.test/", policy=RetryPolicy(hedge_after="p95"))
    assert len(governor.latencies) == 1
