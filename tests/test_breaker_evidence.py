"""What the breaker counts: calls, not attempts (a call's own retries are one piece of evidence).

Through a real ``retrysafe.Client`` on ``httpx.MockTransport`` and ``FakeClock``,
with the governor on. Tests of the counting rule pin a breaker that opens on five
failing calls in a row (fewer than a flaky call's own attempts), so that counting
attempts instead of calls would open it.
"""

from __future__ import annotations

import contextlib
import random

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.governor import (
    BreakerSettings,
    BudgetSettings,
    CircuitBreaker,
    Governor,
    GovernorSettings,
    Permit,
)
from retrysafe.testing import FakeClock

CLOSED = Permit(allowed=True)
DEPENDENCY = "http://api.test:80"
#: Opens on five failing calls in a row: a call's own retries alone would reach that.
FIVE_IN_A_ROW = GovernorSettings(breaker=BreakerSettings(consecutive_failures=5, open_for=20.0))


def client_for(clock: FakeClock, governor: Governor, replies: list[int]) -> retrysafe.Client:
    """A client whose server answers with ``replies`` in order, then 200s."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(replies.pop(0) if replies else 200)

    return retrysafe.Client(transport=httpx.MockTransport(handler), clock=clock, governor=governor)


def test_ten_attempts_on_a_flaky_dependency_get_through() -> None:
    """Nine 503s then a 200: one call with attempts=10 succeeds on its tenth attempt."""
    clock = FakeClock(seed=1)
    governor = Governor(FIVE_IN_A_ROW, clock=clock)
    replies = [503] * 9
    client = client_for(clock, governor, replies)
    response = client.get("http://api.test/", policy=RetryPolicy(attempts=10, deadline=120))
    assert response.status_code == 200
    assert retrysafe.report_of(response).attempts == 10
    breaker = governor.guard(DEPENDENCY).breaker
    assert breaker is not None
    assert breaker.state == "closed"


def test_a_few_flaky_calls_in_a_row_do_not_open_the_breaker() -> None:
    """Four calls in a row, each failing four times before it succeeds: closed throughout."""
    clock = FakeClock(seed=2)
    governor = Governor(FIVE_IN_A_ROW, clock=clock)
    replies: list[int] = []
    client = client_for(clock, governor, replies)
    for _ in range(4):
        replies[:] = [503, 503, 503, 503]
        response = client.get("http://api.test/", policy=RetryPolicy(attempts=5, deadline=120))
        assert response.status_code == 200
    assert governor.guard(DEPENDENCY).breaker.state == "closed"  # type: ignore[union-attr]


def test_a_real_outage_still_opens_the_breaker() -> None:
    """Distinct calls that all fail: the ``consecutive_failures``-th failing call in a row
    opens it (mid-call, once its retry failed too: a first failure waits for the retry
    that may save the call), and the next call fails fast with nothing sent."""
    clock = FakeClock(seed=3)
    governor = Governor(FIVE_IN_A_ROW, clock=clock)
    settings = FIVE_IN_A_ROW.breaker
    assert settings is not None
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(503)

    client = retrysafe.Client(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor
    )
    failing = settings.consecutive_failures - 1
    reasons = []
    for _ in range(failing + 2):
        with pytest.raises(retrysafe.ApiError) as caught:
            client.get("http://api.test/")
        reasons.append((caught.value.reason, caught.value.attempts))
    assert reasons == [("attempts_exhausted", 4)] * failing + [
        ("circuit_open", 2),
        ("circuit_open", 0),
    ]
    assert governor.guard(DEPENDENCY).breaker.state == "open"  # type: ignore[union-attr]
    assert len(sent) == 4 * failing + 2 == 18


def test_a_real_outage_opens_the_breaker_with_the_default_settings() -> None:
    """The same outage under the defaults: the twentieth failing call in a row opens it."""
    clock = FakeClock(seed=3)
    governor = Governor(clock=clock)
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(503)),
        clock=clock,
        governor=governor,
    )
    failing = BreakerSettings().consecutive_failures - 1
    reasons = []
    for _ in range(failing + 2):
        with pytest.raises(retrysafe.ApiError) as caught:
            client.get("http://api.test/")
        reasons.append((caught.value.reason, caught.value.attempts))
    assert reasons == [("attempts_exhausted", 4)] * failing + [
        ("circuit_open", 2),
        ("circuit_open", 0),
    ]
    assert governor.guard(DEPENDENCY).breaker.state == "open"  # type: ignore[union-attr]


def test_an_outage_seen_by_many_single_attempt_callers_opens_on_the_ratio() -> None:
    """Failures interleaved with successes (no run of five): the ratio of failing calls trips."""
    clock = FakeClock()
    settings = BreakerSettings(
        consecutive_failures=5, failure_ratio=0.5, ratio_min_calls=20, ratio_window=60.0
    )
    breaker = CircuitBreaker(settings, clock)
    for i in range(40):
        breaker.record(CLOSED, "unhealthy" if i % 4 else "healthy")
        if breaker.state == "open":
            break
    assert breaker.state == "open"
    assert i == settings.ratio_min_calls - 1  # the twentieth call: 15 of 20 failing


# -- the rule, outcome by outcome ---------------------------------------------------------


def test_a_repeat_failure_neither_extends_the_run_nor_counts_as_a_call() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=5), clock)
    breaker.record(CLOSED, "unhealthy")
    for _ in range(50):
        assert breaker.record(CLOSED, "unhealthy", repeat=True) is None
    assert breaker.state == "closed"
    assert breaker.calls_in_window() == 1


def window_of(breaker: CircuitBreaker, clock: FakeClock) -> tuple[int, int]:
    """(calls, failed calls) in the ratio window now (read from the breaker's own tally:
    failed calls have no public reader)."""
    return breaker._tally(int(clock.monotonic() // breaker._bucket_width))


def test_a_repeat_success_takes_back_the_failure_its_call_was_counted_with() -> None:
    """A call that failed, then succeeded on a retry, reads as one healthy call."""
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(ratio_window=60.0), clock)
    breaker.record(CLOSED, "unhealthy")
    assert window_of(breaker, clock) == (1, 1)
    clock.advance(1)
    assert breaker.record(CLOSED, "healthy", repeat=True) is None
    assert window_of(breaker, clock) == (1, 0)  # one healthy call, no failure
    assert breaker.calls_in_window() == 1


def test_a_repeat_success_ends_the_run() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=5, ratio_min_calls=20), clock)
    for _ in range(4):
        breaker.record(CLOSED, "unhealthy")
    breaker.record(CLOSED, "healthy", repeat=True)  # the fourth call succeeds on a retry
    assert window_of(breaker, clock) == (4, 3)
    assert breaker.record(CLOSED, "unhealthy") is None
    assert breaker.state == "closed"  # the run restarted at one
    assert window_of(breaker, clock) == (5, 4)


def test_a_repeat_success_after_its_failure_aged_out_adds_one_healthy_call() -> None:
    """Nothing left to take back: the retry's success counts as one healthy call."""
    clock = FakeClock()
    settings = BreakerSettings(ratio_window=60.0)
    breaker = CircuitBreaker(settings, clock)
    breaker.record(CLOSED, "unhealthy")
    clock.advance(settings.ratio_window * 2)  # the call's failure has left the window
    assert window_of(breaker, clock) == (0, 0)
    assert breaker.record(CLOSED, "healthy", repeat=True) is None
    assert window_of(breaker, clock) == (1, 0)
    assert breaker.calls_in_window() == 1


def test_first_failures_of_distinct_calls_make_the_run() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=3), clock)
    for _ in range(2):
        breaker.record(CLOSED, "unhealthy")
        breaker.record(CLOSED, "unhealthy", repeat=True)
    transition = breaker.record(CLOSED, "unhealthy")
    assert transition is not None
    assert transition.after == "open"


def test_a_probe_decides_even_when_it_is_a_repeat() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=1), clock)
    breaker.record(CLOSED, "unhealthy")
    clock.advance(BreakerSettings().open_for)
    probe = breaker.acquire(probe_lease=10)
    assert probe.probe
    transition = breaker.record(probe, "unhealthy", repeat=True)
    assert transition is not None
    assert transition.after == "open"


def test_neutral_outcomes_count_nowhere() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(), clock)
    for _ in range(10):
        breaker.record(CLOSED, "neutral")
        breaker.record(CLOSED, "neutral", repeat=True)
    assert breaker.calls_in_window() == 0


ONE_FAILING_CALL = GovernorSettings(breaker=BreakerSettings(consecutive_failures=1, open_for=20))


def test_a_503_asking_every_caller_to_wait_counts_at_once() -> None:
    """A first failure waits for its retry before it counts, but not one whose server
    asked for a pause (a 503's Retry-After): the breaker hears at once, and opens for
    the pause; the call's retry, after it, is the half-open probe. (Held back, the
    breaker heard of an outage answered with 503 Retry-After: 2 only after each call's
    two-second wait, and ten times as many requests reached the server first.)"""
    clock = FakeClock()
    governor = Governor(ONE_FAILING_CALL, clock=clock)
    replies = iter([httpx.Response(503, headers={"Retry-After": "2"}), httpx.Response(200)])
    events: list[retrysafe.RetryEvent] = []
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: next(replies)),
        clock=clock,
        governor=governor,
        hooks=[events.append],
    )
    response = client.get("http://api.test/")
    assert (response.status_code, retrysafe.report_of(response).attempts) == (200, 2)
    kinds = [(event.kind, event.attempt) for event in events if event.kind != "attempt"]
    assert kinds[:2] == [("circuit", 1), ("retry", 1)], kinds  # opened before the wait
    assert [event.transition for event in events if event.kind == "circuit"] == [
        "closed->open",
        "open->half_open",
        "half_open->closed",
    ]


def test_a_held_failure_counts_when_its_retry_fails_in_a_way_that_does_not() -> None:
    """A call's 503 is held while it retries; the retry times out after 1 s, where
    healthy answers take 5 s: a timeout the breaker takes for the caller's own limit, and
    does not count. The 503 still does (it was lost, told in the timeout's place)."""
    clock = FakeClock()
    governor = Governor(ONE_FAILING_CALL, clock=clock)
    script: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        step = script.pop(0)
        if step == "slow 200":
            clock.advance(5.0)
            return httpx.Response(200)
        if step == "503":
            return httpx.Response(503)
        clock.advance(1.0)
        raise httpx.ReadTimeout("timed out", request=request)

    policy = RetryPolicy(attempts=2, attempt_timeout=1.0, deadline=30)
    client = retrysafe.Client(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor, policy=policy
    )
    script += ["slow 200"] * 3
    for _ in range(3):
        client.get("http://api.test/")  # healthy answers take 5 s
    script += ["503", "timeout"]
    with pytest.raises(retrysafe.ApiError):
        client.get("http://api.test/")
    assert governor.guard(DEPENDENCY).breaker.state == "open"  # type: ignore[union-attr]


# -- failures whose retry the budget refused --------------------------------------------
# No retry of their own can confirm them. Counted at once, a blip across more calls than
# the budget's tokens opened the circuit (which then refused the granted retries);
# dropped, a dependency failing nine answers in ten with the budget spent never opened it.
# So the next retry of a failed call decides them.


def test_deferred_failures_count_when_a_retry_fails_too() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=5), clock)
    for _ in range(5):
        breaker.defer_failure(CLOSED)
    assert breaker.state == "closed"  # (no evidence yet)
    transition = breaker.retry_ended(failed=True)
    assert breaker.state == "open"
    assert transition is not None
    assert transition.after == "open"


def test_deferred_failures_are_forgotten_when_a_retry_succeeds() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=5), clock)
    for _ in range(5):
        breaker.defer_failure(CLOSED)
    assert breaker.retry_ended(failed=False) is None
    assert breaker.retry_ended(failed=True) is None  # (nothing left to count)
    assert breaker.state == "closed"


def test_a_deferred_failure_older_than_the_failure_window_no_longer_counts() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=5, failure_window=30.0), clock)
    for _ in range(4):
        breaker.defer_failure(CLOSED)
    clock.advance(31.0)
    breaker.defer_failure(CLOSED)
    breaker.retry_ended(failed=True)
    assert breaker.state == "closed"  # one of five counted


def test_deferred_failures_a_healthy_call_came_after_are_no_part_of_a_run() -> None:
    """Four failures deferred, a healthy call, then a call failing twice (its retry fails,
    which counts them): they count toward the failing share of calls, not as failures in
    a row, so that one failing call does not make five in a row."""
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=5), clock)
    for _ in range(4):
        breaker.defer_failure(CLOSED)
    clock.advance(10.0)
    breaker.record_healthy_call(0.1)
    breaker.record(CLOSED, "unhealthy")  # (the failing call's first failure, told now)
    breaker.retry_ended(failed=True)
    assert breaker.state == "closed"
    assert breaker.calls_in_window() == 6  # (all four deferred failures counted)
    for _ in range(4):  # a run of five, from the failing call on
        breaker.record(CLOSED, "unhealthy")
    assert breaker.state == "open"


def test_deferred_failures_after_the_last_healthy_call_join_the_run() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=5), clock)
    breaker.record_healthy_call(0.1)
    clock.advance(1.0)
    for _ in range(4):
        breaker.defer_failure(CLOSED)
    breaker.record(CLOSED, "unhealthy")
    breaker.retry_ended(failed=True)
    assert breaker.state == "open"


def _calls_until_open(fails: float, seed: int, governor_settings: GovernorSettings) -> int | None:
    """Calls (five a second, default policy) to a dependency failing a share ``fails`` of
    its answers before the breaker opens; None if not within 600."""
    clock, rng = FakeClock(seed=seed), random.Random(seed)
    governor = Governor(governor_settings, clock=clock)
    breaker = governor.guard(DEPENDENCY).breaker
    assert breaker is not None
    client = retrysafe.Client(
        transport=httpx.MockTransport(
            lambda request: httpx.Response(503 if rng.random() < fails else 200)
        ),
        clock=clock,
        governor=governor,
    )
    for call in range(600):
        if clock.monotonic() < call / 5:
            clock.advance(call / 5 - clock.monotonic())
        with contextlib.suppress(retrysafe.ApiError):
            client.get("http://api.test/")
        if breaker.state != "closed":
            return call + 1
    return None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_dependency_failing_nine_answers_in_ten_opens_the_breaker_once_the_budget_is_spent(
    seed: int,
) -> None:
    """The budget soon refuses most retries; the retries it still grants fail too, and
    count the refused calls' failures with them, so the failure ratio reads the calls
    that failed (about 105 calls, as before the refusals were deferred)."""
    opened_after = _calls_until_open(0.9, seed, GovernorSettings())
    assert opened_after is not None
    assert opened_after <= 200


def test_an_outage_opens_the_breaker_as_soon_with_an_empty_budget() -> None:
    """Every answer a 503, the budget empty from the start (only 0.1 of a token earned a
    call): the few retries granted fail, and count the deferred failures, so twenty
    failing calls in a row open it, as they would with a full budget."""
    settings = GovernorSettings(budget=BudgetSettings(ratio=0.1, max_tokens=1.0))
    opened_after = _calls_until_open(1.0, 0, settings)
    assert opened_after is not None
    assert opened_after <= 30
