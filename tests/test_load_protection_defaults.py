"""The default budget and breaker cost a healthy caller nothing and still protect a sick one.

Pins the properties the defaults in ``retrysafe.governor.settings`` were chosen for
(``benchmarks/load_protection.py`` measures them over a real socket): a dependency failing
independently at 20 % loses no more calls than a plain 4-attempt retrier; a long
``RetryPolicy(attempts=10)`` gets through; a full outage of many distinct calls is cut to
at most 0.2x a plain retrier's attempts, and to 1.3x the calls with the budget alone.
``httpx.MockTransport`` and ``FakeClock``: deterministic, no real time.
"""

from __future__ import annotations

import collections
import random

import httpx

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.chaos.chance import draw
from retrysafe.governor import BreakerSettings, CircuitBreaker, Governor, GovernorSettings
from retrysafe.governor.breaker import CLOSED_PERMIT
from retrysafe.testing import FakeClock

PLAIN_ATTEMPTS = 4  # RetryPolicy()'s attempts: the plain retrier compared against


class Flaky:
    """A server failing each attempt of each call (its path) with probability ``rate``,
    drawn from ``(seed, path, attempt)``: the same draws whatever the client does."""

    def __init__(self, rate: float, seed: str = "defaults") -> None:
        self.rate = rate
        self.seed = seed
        self.attempts: collections.Counter[str] = collections.Counter()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        attempt = self.attempts[path]
        self.attempts[path] += 1
        failed = draw(self.seed, path, attempt) < self.rate
        return httpx.Response(503 if failed else 200)

    @property
    def total(self) -> int:
        return sum(self.attempts.values())


def run(
    settings: GovernorSettings | None,
    server: Flaky,
    calls: int,
    *,
    gap: float = 0.0,
    policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value
) -> int:
    """``calls`` distinct GETs one after another (``gap`` virtual seconds apart); the
    number that succeeded. ``settings`` None: the default ``Governor``."""
    clock = FakeClock(seed=11)
    governor = Governor(clock=clock) if settings is None else Governor(settings, clock=clock)
    client = retrysafe.Client(
        transport=httpx.MockTransport(server), clock=clock, governor=governor, policy=policy
    )
    ok = 0
    for n in range(calls):
        try:
            response = client.get(f"http://api.test/c{n}")
        except retrysafe.ApiError:
            pass
        else:
            ok += response.status_code == 200
        clock.advance(gap)
    return ok


def test_twenty_percent_independent_failures_cost_no_more_than_a_plain_retrier() -> None:
    """2,000 calls at 20 %: within 0.3 points (6 calls) of a plain 4-attempt retrier."""
    calls = 2000
    plain = run(GovernorSettings.off(), Flaky(0.20), calls)
    governed = run(None, Flaky(0.20), calls)
    assert plain >= calls - 10  # 0.2 ** 4: about 3 of 2,000 fail every attempt
    assert governed >= plain - 0.003 * calls


def test_the_old_ten_percent_budget_would_have_failed_that() -> None:
    """The check above catches a budget too small for 20 % (the pre-issue-9 ratio 0.1)."""
    calls = 2000
    plain = run(GovernorSettings.off(), Flaky(0.20), calls)
    old = GovernorSettings(budget=retrysafe.governor.BudgetSettings(ratio=0.1))
    assert run(old, Flaky(0.20), calls) < plain - 0.003 * calls


def test_ten_attempts_on_a_dependency_failing_nine_times_get_through() -> None:
    """Nine 503s then a 200, twice in a row: each call succeeds on its tenth attempt."""
    clock = FakeClock(seed=5)
    governor = Governor(clock=clock)
    replies: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(replies.pop(0) if replies else 200)

    client = retrysafe.Client(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor
    )
    for _ in range(2):
        replies[:] = [503] * 9
        response = client.get("http://api.test/", policy=RetryPolicy(attempts=10, deadline=300))
        assert response.status_code == 200
        report = retrysafe.report_of(response)
        assert report is not None
        assert report.attempts == 10


def test_a_full_outage_of_many_distinct_calls_is_cut_to_a_fifth_of_a_plain_retrier() -> None:
    """1,000 calls, 10 ms apart, to a dependency answering only 503: at most 0.2x the
    attempts of a plain retrier (which sends 4 per call)."""
    calls = 1000
    plain = Flaky(1.0)
    run(GovernorSettings.off(), plain, calls, gap=0.01)
    assert plain.total == PLAIN_ATTEMPTS * calls
    governed = Flaky(1.0)
    assert run(None, governed, calls, gap=0.01) == 0
    assert governed.total <= 0.2 * plain.total


def test_the_budget_alone_keeps_a_full_outage_under_one_point_three_times_the_calls() -> None:
    """Breaker off: 4,000 calls, 1 ms apart (a busy client: concurrent calls overlap, so
    little time passes per call; here the backoff is made short to match), all
    failing: at most 1.3 attempts per call."""
    calls = 4000
    server = Flaky(1.0)
    quick = RetryPolicy(backoff_base=0.001, backoff_cap=0.004)
    run(GovernorSettings(breaker=None), server, calls, gap=0.001, policy=quick)
    assert server.total <= 1.3 * calls


def interleaved_outcomes(rate: float, calls: int, seed: int) -> list[tuple[bool, bool]]:
    """The outcomes of ``calls`` 4-attempt calls failing independently at ``rate``, as
    (healthy, repeat) pairs, shuffled as many concurrent calls interleave them."""
    rng = random.Random(seed)
    events: list[tuple[bool, bool]] = []
    for _ in range(calls):
        failures = 0
        while failures < PLAIN_ATTEMPTS and rng.random() < rate:
            failures += 1
        if failures:
            events.append((False, False))  # the call's first outcome; its repeats add nothing
        if failures < PLAIN_ATTEMPTS:
            events.append((True, failures > 0))
    rng.shuffle(events)
    return events


def opened(settings: BreakerSettings, events: list[tuple[bool, bool]]) -> bool:
    clock = FakeClock()
    breaker = CircuitBreaker(settings, clock)
    for healthy, repeat in events:
        breaker.record(CLOSED_PERMIT, "healthy" if healthy else "unhealthy", repeat=repeat)
        clock.advance(0.001)  # 1,000 outcomes a second: all inside the windows
        if breaker.state != "closed":
            return True
    return False


def test_interleaved_independent_failures_up_to_half_do_not_open_the_default_breaker() -> None:
    """10,000 concurrent calls' outcomes at 20 %, 30 % and 50 % independent failures,
    interleaved: the default breaker stays closed (retries save those calls)."""
    for rate in (0.2, 0.3, 0.5):
        for seed in range(3):
            assert not opened(BreakerSettings(), interleaved_outcomes(rate, 10_000, seed))


def test_five_in_a_row_would_open_on_interleaved_half_failures() -> None:
    """The check above catches the pre-issue-9 run length of 5."""
    events = interleaved_outcomes(0.5, 10_000, 0)
    assert opened(BreakerSettings(consecutive_failures=5), events)


def test_interleaved_outcomes_of_a_full_outage_open_the_default_breaker() -> None:
    events = interleaved_outcomes(1.0, 100, 0)
    assert opened(BreakerSettings(), events)
