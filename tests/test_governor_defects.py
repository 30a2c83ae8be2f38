"""The four governor defects found by review (issue 9), each pinned by a test.

(1) a paced slot nobody will use is returned, and the pacing queue is bounded;
(2) the breaker's window keeps bounded memory however many calls succeed;
(3) a half-open probe's lease outlives its attempt (no 60 s cap);
(4) idle guards for origins no longer called are evicted.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.governor import (
    BreakerSettings,
    CircuitBreaker,
    Governor,
    GovernorSettings,
    Limiter,
    LimiterSettings,
)
from retrysafe.governor.limiter import QUEUE_FULL
from retrysafe.testing import FakeClock

DEPENDENCY = "http://api.test:80"

# -- (1) pacing: a slot nobody will use goes back; the queue is bounded ---------------------


def test_an_overload_of_paced_callers_that_give_up_leaves_no_debt() -> None:
    """377 concurrent callers through a real Client, paced at 5/s with a 1 s deadline
    (real clock): those whose slot is too far away give up and return it, so after the
    overload the queue holds nothing and the next call is let through at once."""
    rate = 5.0
    settings = GovernorSettings(
        budget=None, breaker=None, limiter=LimiterSettings(requests_per_second=rate)
    )
    governor = Governor(settings)
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        governor=governor,
        policy=RetryPolicy(deadline=1.0, min_attempt_time=0.1),
    )
    outcomes: list[str] = []
    lock = threading.Lock()

    def call(_: int) -> None:
        try:
            client.get("http://api.test/")
            result = "ok"
        except retrysafe.ApiError as error:
            result = "refused" if error.attempts == 0 else "failed"
        with lock:
            outcomes.append(result)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(call, range(377)))
    assert len(outcomes) == 377
    assert outcomes.count("refused") > 300  # most could not wait for a slot
    assert outcomes.count("ok") >= 5
    limiter = governor.guard(DEPENDENCY).limiter
    assert limiter is not None
    # Every refused caller gave its slot back: at most the last admitted slot is queued.
    assert limiter.reserve() <= 2.0 / rate
    assert client.get("http://api.test/").status_code == 200


def test_slots_that_are_never_returned_cannot_queue_callers_for_ever() -> None:
    """Bounded debt by design: even reservations nobody returns (a caller that vanished)
    never put the next slot further away than ``max_cooldown``."""
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(requests_per_second=5, max_cooldown=30), clock)
    waits = [limiter.reserve() for _ in range(10_000)]
    # One slot now, then one every 0.2 s up to 30 s ahead; every later ask finds it full.
    assert max(wait for wait in waits if wait != QUEUE_FULL) == pytest.approx(30.0)
    assert waits.count(QUEUE_FULL) == 10_000 - 151
    assert limiter.queued() == pytest.approx(30.0 * 5)
    clock.advance(30.0)
    assert limiter.reserve() <= 0.2 + 1e-9  # paid back in at most max_cooldown


def test_a_returned_slot_shortens_the_queue_by_one_interval() -> None:
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(requests_per_second=10), clock)
    assert limiter.reserve() == 0.0
    assert limiter.reserve() == pytest.approx(0.1)
    limiter.release()
    assert limiter.reserve() == pytest.approx(0.1)
    limiter.release()
    limiter.release()  # more returned than queued: the bucket still holds at most ``burst``
    assert limiter.reserve() == 0.0
    assert limiter.reserve() == pytest.approx(0.1)


# -- (2) the breaker's window: bounded memory ---------------------------------------------


def window_cells(breaker: CircuitBreaker) -> int:
    """How many cells the breaker's ratio window keeps (entries or time buckets)."""
    return len(breaker._window)


def test_four_hundred_thousand_successes_keep_the_window_small() -> None:
    clock = FakeClock()
    settings = BreakerSettings(ratio_window=60.0)
    breaker = CircuitBreaker(settings, clock)
    permit = breaker.acquire(probe_lease=1)
    for i in range(400_000):
        breaker.record(permit, "healthy")
        if i % 1000 == 0:
            clock.advance(0.01)  # 4,000 calls a second: all inside one 60 s window
    assert window_cells(breaker) <= 20
    assert breaker.calls_in_window() == 400_000
    clock.advance(settings.ratio_window * 2)
    assert breaker.calls_in_window() == 0


def test_the_bucketed_window_still_trips_on_the_ratio_and_forgets_old_calls() -> None:
    clock = FakeClock()
    settings = BreakerSettings(failure_ratio=0.5, ratio_min_calls=10, ratio_window=60)
    breaker = CircuitBreaker(settings, clock)
    permit = breaker.acquire(probe_lease=1)
    for _ in range(3):  # old calls, 6 failed of 9, forgotten a window later
        breaker.record(permit, "unhealthy")
        breaker.record(permit, "unhealthy")
        breaker.record(permit, "healthy")
    clock.advance(61)
    assert breaker.calls_in_window() == 0
    for _ in range(4):  # 4 failed of 8: too few calls to judge (remembered: 10 of 17)
        breaker.record(permit, "healthy")
        breaker.record(permit, "unhealthy")
    assert breaker.state == "closed"
    breaker.record(permit, "healthy")
    breaker.record(permit, "unhealthy")  # 5 of 10: the ratio trips
    assert breaker.state == "open"


def test_a_success_on_the_short_path_starts_a_reused_bucket_afresh() -> None:
    """The ring's bucket a window ago is reused for now: a healthy call counted on the
    short path does not inherit the calls and failures it held."""
    clock = FakeClock()
    settings = BreakerSettings(ratio_window=60)
    breaker = CircuitBreaker(settings, clock)
    for _ in range(3):
        breaker.record(breaker.closed_permit, "unhealthy")
    clock.advance(settings.ratio_window)  # (the same bucket of the ring, a window later)
    breaker.record_healthy_call(0.1)
    assert breaker.calls_in_window() == 1
    assert breaker._tally(int(clock.monotonic() // breaker._bucket_width)) == (1, 0)


# -- (3) the probe lease outlives its attempt ---------------------------------------------


class FakeCall:
    """What the governor reads of a call (``CallFacts``)."""

    def __init__(self, lease: float) -> None:
        self.attempts = 0
        self.pacing_held = False
        self.cooldown_waited = 0.0
        self._lease = lease

    def probe_lease(self) -> float:
        return self._lease


#: A breaker that opens on five failing calls in a row and stays open 20 s (pinned, so
#: these tests do not follow the defaults).
PINNED_BREAKER = BreakerSettings(consecutive_failures=5, open_for=20.0, max_open_for=300.0)


def half_open(clock: FakeClock) -> Governor:
    governor = Governor(GovernorSettings(budget=None, breaker=PINNED_BREAKER), clock=clock)
    breaker = governor.guard(DEPENDENCY).breaker
    assert breaker is not None
    for _ in range(PINNED_BREAKER.consecutive_failures):
        breaker.record(breaker.acquire(probe_lease=1), "unhealthy")
    clock.advance(PINNED_BREAKER.open_for)
    assert breaker.state == "half_open"
    return governor


def test_a_probe_with_a_two_minute_attempt_keeps_its_slot_for_the_whole_attempt() -> None:
    clock = FakeClock()
    guard = half_open(clock).guard(DEPENDENCY)
    first = guard.admit(FakeCall(lease=120.0))
    assert first.permit is not None
    assert first.permit.probe
    clock.advance(119.0)  # the first probe is still running (attempt_timeout=120)
    second = guard.admit(FakeCall(lease=120.0))
    assert second.permit is not None
    assert not second.permit.allowed


def test_a_probe_that_never_reports_frees_its_slot_soon_after_its_attempt_would_end() -> None:
    clock = FakeClock()
    guard = half_open(clock).guard(DEPENDENCY)
    assert guard.admit(FakeCall(lease=120.0)).permit.probe  # type: ignore[union-attr]
    clock.advance(125.0)
    again = guard.admit(FakeCall(lease=120.0))
    assert again.permit is not None
    assert again.permit.probe


def test_a_probe_with_no_time_limit_at_all_gets_a_finite_lease() -> None:
    """attempt_timeout and deadline both infinite: the lease is ``max_open_for``."""
    clock = FakeClock()
    guard = half_open(clock).guard(DEPENDENCY)
    assert guard.admit(FakeCall(lease=math.inf)).permit.probe  # type: ignore[union-attr]
    clock.advance(PINNED_BREAKER.max_open_for - 1)
    assert not guard.admit(FakeCall(lease=math.inf)).permit.allowed  # type: ignore[union-attr]
    clock.advance(2)
    assert guard.admit(FakeCall(lease=math.inf)).permit.probe  # type: ignore[union-attr]


def test_a_two_minute_probe_through_a_client_is_not_joined_by_a_second() -> None:
    """A second caller while the probe is in flight is refused, and told so and when."""
    clock = FakeClock()
    governor = half_open(clock)
    sent: list[float] = []
    second: list[BaseException] = []

    def other_caller() -> None:
        try:
            client.get("http://api.test/")
        except retrysafe.ApiError as error:
            second.append(error)

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(clock.monotonic())
        if len(sent) == 1:
            clock.advance(90)  # the probe takes 90 s of its 120 s attempt; meanwhile:
            thread = threading.Thread(target=other_caller)
            thread.start()
            thread.join()
        return httpx.Response(200)

    policy = RetryPolicy(attempt_timeout=120, deadline=300)
    client = retrysafe.Client(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor, policy=policy
    )
    assert client.get("http://api.test/").status_code == 200
    assert len(sent) == 1
    assert len(second) == 1
    refused = second[0]
    assert isinstance(refused, retrysafe.CircuitOpen)
    # It is told a probe is in flight (not "open", not kept for a patient caller), and to
    # come back as the probe's lease ends (the attempt's 120 s and 1 s more).
    message = str(refused)
    assert "its circuit breaker has one probe in flight and waits for it" in message
    assert "keeps its one probe" not in message
    assert "open for" not in message
    assert refused.retry_after == pytest.approx(120 + 1 - 90)


# -- (4) idle guards are evicted ----------------------------------------------------------


def test_an_idle_hour_of_many_hosts_leaves_a_bounded_number_of_guards() -> None:
    clock = FakeClock()
    governor = Governor(clock=clock)
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        clock=clock,
        governor=governor,
    )
    for i in range(20_000):
        client.get(f"http://host{i}.test/")
        clock.advance(3600 / 20_000)  # an hour of calls, each host once
    assert len(governor.dependencies()) <= 2_000
    clock.advance(3600)  # an idle hour
    client.get("http://last.test/")
    assert len(governor.dependencies()) <= 10


def test_a_guard_that_holds_something_is_kept() -> None:
    clock = FakeClock()
    governor = Governor(GovernorSettings(breaker=PINNED_BREAKER), clock=clock)
    breaker = governor.guard("http://down.test:80").breaker
    assert breaker is not None
    for _ in range(PINNED_BREAKER.consecutive_failures):
        breaker.record(breaker.acquire(probe_lease=1), "unhealthy")
    assert breaker.state == "open"
    limiter = governor.guard("http://slow.test:80").limiter
    assert limiter is not None
    limiter.start_cooldown(250)
    budget = governor.guard("http://spent.test:80").budget
    assert budget is not None
    assert budget.try_spend()
    clock.advance(100)
    for i in range(5_000):
        governor.guard(f"http://host{i}.test:80")
    clock.advance(90)
    recent = governor.guard("http://recent.test:80").breaker
    assert recent is not None
    recent.record(recent.acquire(probe_lease=1), "unhealthy")
    clock.advance(10)
    governor.guard("http://new.test:80")  # a new dependency: idle guards are swept
    kept = set(governor.dependencies())
    assert {"http://down.test:80", "http://slow.test:80", "http://recent.test:80"} <= kept
    # The spent budget refilled long ago (0.5 tokens a second): nothing left to keep.
    assert "http://spent.test:80" not in kept
    assert len(kept) <= 10
    # The same guards are found again while they hold their state.
    assert governor.guard("http://down.test:80").breaker is breaker
    assert governor.guard("http://recent.test:80").breaker is recent


def test_an_evicted_dependency_gets_a_fresh_guard_that_works() -> None:
    clock = FakeClock()
    governor = Governor(clock=clock)
    first = governor.guard("http://a.test:80")
    clock.advance(3600)
    for i in range(5_000):
        governor.guard(f"http://host{i}.test:80")
    again = governor.guard("http://a.test:80")
    assert again is not first
    assert again.breaker is not None
    assert again.breaker.state == "closed"


@pytest.mark.parametrize(
    "settings", [GovernorSettings(), GovernorSettings(breaker=None)], ids=["default", "no-breaker"]
)
def test_a_guard_a_call_has_just_asked_for_is_not_swept(settings: GovernorSettings) -> None:
    """Made a minute ago, then asked for by a call now in flight (or called a moment
    ago): a sweep keeps it, so what that call reports (a 429's cooldown) is seen."""
    clock = FakeClock()
    governor = Governor(settings, clock=clock)
    first = governor.guard("http://a.test:80")
    clock.advance(61)
    assert governor.guard("http://a.test:80") is first  # a call starts: asked for now
    governor.guard("http://b.test:80")  # a new dependency, a minute since the last sweep
    assert governor.guard("http://a.test:80") is first
    assert first.limiter is not None
    first.limiter.start_cooldown(30)  # the call in flight got a 429
    assert governor.guard("http://a.test:80").limiter is first.limiter


def test_a_dependency_whose_call_is_in_flight_is_not_swept_by_another_calls_sweep() -> None:
    """A call marks its dependency's guard as asked for, as ``Governor.guard`` does: a
    sweep that another dependency's first call starts while it runs keeps it."""
    clock = FakeClock()
    governor = retrysafe.Governor(clock=clock)

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/while-in-flight":
            governor.guard("http://b.test:80")  # a minute on: this sweeps
        return httpx.Response(200)

    transport = retrysafe.RetryTransport(
        httpx.MockTransport(answer), clock=clock, governor=governor
    )
    with httpx.Client(transport=transport) as client:
        first = client.get("http://a.test/first")
        report = retrysafe.report_of(first)
        assert report is not None
        clock.advance(61)
        client.get("http://a.test/while-in-flight")
    assert report.dependency in governor.dependencies()


def test_a_guard_is_swept_a_minute_after_the_sweep_that_saw_its_last_call() -> None:
    clock = FakeClock()
    governor = Governor(clock=clock)
    first = governor.guard("http://a.test:80")
    clock.advance(61)
    governor.guard("http://a.test:80")  # its last call
    governor.guard("http://b.test:80")  # sweep: a.test seen now
    clock.advance(59)
    governor.guard("http://c.test:80")  # (no sweep yet: less than a minute since the last)
    clock.advance(2)
    governor.guard("http://d.test:80")  # sweep: 61 s since a.test was seen, nobody asked
    assert "http://a.test:80" not in governor.dependencies()
    assert governor.guard("http://a.test:80") is not first


def test_a_young_guard_is_never_swept() -> None:
    """A guard just made (its first call may still be in flight) stays, at rest or not."""
    clock = FakeClock()
    governor = Governor(clock=clock)
    for i in range(5_000):
        governor.guard(f"http://host{i}.test:80")
    assert len(governor.dependencies()) == 5_000


def test_a_breaker_whose_window_holds_healthy_calls_is_not_at_rest() -> None:
    """A fresh breaker would have an empty window: one that counted healthy calls lately
    is not at rest (its guard is kept, and the calls still count toward the ratio)."""
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(ratio_window=60), clock)
    assert breaker.at_rest()
    breaker.record_healthy_call(0.1)
    assert not breaker.at_rest()
    clock.advance(121)
    assert breaker.at_rest()
