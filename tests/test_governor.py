"""Budget, breaker and limiter arithmetic, with exact transitions on the fake clock."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.classify import classify_response
from retrysafe.classify import health as health_of
from retrysafe.decisions import AskRetry, RetryAnswer
from retrysafe.governor import (
    BreakerSettings,
    BudgetSettings,
    CircuitBreaker,
    Governor,
    GovernorSettings,
    Limiter,
    LimiterSettings,
    Permit,
    RetryBudget,
    Transition,
)
from retrysafe.governor.breaker import Health
from retrysafe.governor.guard import DependencyGuard
from retrysafe.testing import FakeClock

CLOSED = Permit(allowed=True)

# -- RetryBudget ---------------------------------------------------------------------------


def test_budget_starts_full_and_a_retry_spends_one_token() -> None:
    budget = RetryBudget(BudgetSettings(max_tokens=3, min_per_second=0), FakeClock())
    assert [budget.try_spend() for _ in range(4)] == [True, True, True, False]
    assert budget.tokens == 0


def test_first_attempts_earn_ratio_tokens() -> None:
    budget = RetryBudget(BudgetSettings(ratio=0.25, max_tokens=5, min_per_second=0), FakeClock())
    while budget.try_spend():
        pass
    for _ in range(4):
        budget.record_first_attempt()
    assert budget.tokens == pytest.approx(1.0)
    assert budget.try_spend()
    assert not budget.try_spend()


@pytest.mark.parametrize(("ratio", "calls"), [(0.1, 10), (0.2, 5), (1 / 3, 3), (0.01, 100)])
def test_calls_that_earn_a_whole_token_in_fractions_earn_a_retry(ratio: float, calls: int) -> None:
    # Ten tenths sum to 0.9999999999999999 in floats: still the token ten calls earned.
    budget = RetryBudget(BudgetSettings(ratio=ratio, max_tokens=1, min_per_second=0), FakeClock())
    assert budget.try_spend()
    for _ in range(calls - 1):
        budget.record_first_attempt()
    assert not budget.try_spend()
    budget.record_first_attempt()
    assert budget.try_spend()
    assert budget.tokens == 0.0


def test_budget_refills_at_the_floor_rate_up_to_the_cap() -> None:
    clock = FakeClock()
    budget = RetryBudget(BudgetSettings(max_tokens=2, min_per_second=0.5), clock)
    assert budget.try_spend()
    assert budget.try_spend()
    clock.advance(1.0)
    assert budget.tokens == pytest.approx(0.5)
    clock.advance(1.0)
    assert budget.try_spend()
    clock.advance(100)
    assert budget.tokens == 2


# -- CircuitBreaker ------------------------------------------------------------------------


#: The breaker these mechanism tests rely on, pinned so they do not follow the defaults:
#: five failing calls in a row open it, the ratio judges 20 calls over 60 s, open 20 s.
PINNED: dict[str, object] = {
    "consecutive_failures": 5,
    "failure_window": 30.0,
    "ratio_min_calls": 20,
    "ratio_window": 60.0,
    "open_for": 20.0,
    "first_open_for": 20.0,  # (one period, as these tests pin; see test_first_open_period_*)
}
PINNED_BREAKER = BreakerSettings(**PINNED)  # type: ignore[arg-type]


def breaker(clock: FakeClock, **settings: object) -> CircuitBreaker:
    """A breaker with the pinned settings, ``settings`` overriding some (an ``open_for``
    given is its first period too, unless ``first_open_for`` is given)."""
    first = {"first_open_for": settings["open_for"]} if "open_for" in settings else {}
    return CircuitBreaker(BreakerSettings(**{**PINNED, **first, **settings}), clock)  # type: ignore[arg-type]


def half_open_at(clock: FakeClock, **settings: object) -> CircuitBreaker:
    """A breaker (open for 5 s) that five failures opened, its open period just over: the
    next caller is its probe."""
    circuit = breaker(clock, open_for=5, **settings)
    for _ in range(5):
        circuit.record(CLOSED, "unhealthy")
    clock.advance(5)
    return circuit


def pinned_governor(clock: FakeClock, **settings: object) -> Governor:
    """A governor whose breakers use the pinned settings (other pieces: the defaults)."""
    return Governor(GovernorSettings(breaker=PINNED_BREAKER, **settings), clock=clock)  # type: ignore[arg-type]


def test_five_consecutive_failures_open_the_circuit() -> None:
    clock = FakeClock()
    circuit = breaker(clock, consecutive_failures=5)
    for _ in range(4):
        assert circuit.record(CLOSED, "unhealthy") is None
        clock.advance(1)
    assert circuit.record(CLOSED, "unhealthy") == Transition("closed", "open")
    assert circuit.state == "open"


def test_a_success_breaks_the_run() -> None:
    circuit = breaker(FakeClock())
    for health in ["unhealthy"] * 4 + ["healthy"] + ["unhealthy"] * 4:
        circuit.record(CLOSED, health)  # type: ignore[arg-type]
    assert circuit.state == "closed"


def test_failures_spread_wider_than_the_window_do_not_trip() -> None:
    clock = FakeClock()
    circuit = breaker(clock, failure_window=30)
    for _ in range(10):
        circuit.record(CLOSED, "unhealthy")
        clock.advance(8)  # at most 4 failures inside any 30 s window
    assert circuit.state == "closed"


@pytest.mark.parametrize("status", [400, 404, 409, 422, 429])
def test_client_errors_and_rate_limits_never_count(status: int) -> None:
    circuit = breaker(FakeClock())
    response = httpx.Response(status, headers={"Retry-After": "1"})
    verdict = classify_response(response, RetryPolicy(), keyed=False, now=0.0)
    assert health_of(verdict, status) == "neutral"
    for _ in range(50):
        circuit.record(CLOSED, health_of(verdict, status))
    assert circuit.state == "closed"


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_count(status: int) -> None:
    verdict = classify_response(httpx.Response(status), RetryPolicy(), keyed=False, now=0.0)
    assert health_of(verdict, status) == "unhealthy"


def test_a_failure_ratio_over_the_window_trips_once_enough_calls_were_seen() -> None:
    clock = FakeClock()
    circuit = breaker(clock, failure_ratio=0.5, ratio_min_calls=10, ratio_window=60)
    outcomes = ["unhealthy", "healthy"] * 4 + ["unhealthy"]  # 9 calls: not enough yet
    for health in outcomes:
        circuit.record(CLOSED, health)  # type: ignore[arg-type]
    assert circuit.state == "closed"
    assert circuit.record(CLOSED, "healthy") is None  # 10 calls, 5 failed, but a success
    assert circuit.state == "closed"  # never opens a circuit
    assert circuit.record(CLOSED, "unhealthy") == Transition("closed", "open")  # 6 of 11


def _open_after_failures(circuit: CircuitBreaker) -> None:
    for _ in range(5):
        circuit.record(circuit.closed_permit, "unhealthy")
    assert circuit.state == "open"


def _probe(circuit: CircuitBreaker, clock: FakeClock, health: Health) -> Transition | None:
    clock.advance(circuit.open_until() - clock.monotonic())  # type: ignore[operator]
    probe = circuit.acquire(probe_lease=1.0)
    assert probe.probe
    return circuit.record(probe, health)


def test_first_open_period_is_short_so_a_blip_costs_half_a_second() -> None:
    """Opening after a while closed, it probes after first_open_for: a blip is over by
    then, the probe succeeds, and it closes."""
    clock = FakeClock()
    circuit = breaker(clock, open_for=5.0, first_open_for=0.5)
    _open_after_failures(circuit)
    assert circuit.open_until() == pytest.approx(0.5)
    assert _probe(circuit, clock, "healthy") == Transition("half_open", "closed")


def test_each_failed_probe_doubles_the_open_period_up_to_open_for() -> None:
    """A longer blip fails a probe or two; a dependency that is down fails them all, and
    soon every period is open_for."""
    clock = FakeClock()
    circuit = breaker(clock, open_for=5.0, first_open_for=0.5)
    _open_after_failures(circuit)
    periods = []
    for _ in range(6):
        opened_at = circuit.open_until()
        assert _probe(circuit, clock, "unhealthy") == Transition("half_open", "open")
        periods.append(circuit.open_until() - opened_at)  # type: ignore[operator]
    assert periods == pytest.approx([1.0, 2.0, 4.0, 5.0, 5.0, 5.0])
    assert _probe(circuit, clock, "healthy") == Transition("half_open", "closed")


def test_opening_again_soon_after_closing_doubles_the_period_too() -> None:
    """A dependency that flaps (opens again within open_for of closing) gets longer
    periods; after open_for closed, the first period is short again."""
    clock = FakeClock()
    circuit = breaker(clock, open_for=5.0, first_open_for=0.5)
    for expected in (0.5, 1.0, 2.0, 4.0, 5.0):
        _open_after_failures(circuit)
        assert circuit.open_until() == pytest.approx(clock.monotonic() + expected)
        _probe(circuit, clock, "healthy")
        clock.advance(4.9)
    clock.advance(0.1)
    _open_after_failures(circuit)
    assert circuit.open_until() == pytest.approx(clock.monotonic() + 0.5)


def test_first_open_period_is_at_most_open_for_and_a_retry_after_sets_either() -> None:
    clock = FakeClock()
    short = breaker(clock, open_for=0.2, first_open_for=0.5)
    _open_after_failures(short)
    assert short.open_until() == pytest.approx(0.2)
    hinted = breaker(clock, open_for=5.0, first_open_for=0.5, max_open_for=60)
    for _ in range(5):
        hinted.record(CLOSED, "unhealthy", open_for=30.0)
    assert hinted.open_until() == pytest.approx(clock.monotonic() + 30.0)


def test_open_fails_fast_until_the_period_ends_then_lets_exactly_one_probe() -> None:
    clock = FakeClock()
    circuit = breaker(clock, open_for=20)
    for _ in range(5):
        circuit.record(CLOSED, "unhealthy")
    denied = circuit.acquire(probe_lease=10)
    assert (denied.allowed, denied.retry_at) == (False, 20.0)
    clock.advance(19.9)
    assert not circuit.acquire(probe_lease=10).allowed
    clock.advance(0.1)
    probe = circuit.acquire(probe_lease=10)
    assert (probe.allowed, probe.probe, probe.transition) == (
        True,
        True,
        Transition("open", "half_open"),
    )
    assert not circuit.acquire(probe_lease=10).allowed
    assert circuit.record(probe, "healthy") == Transition("half_open", "closed")
    # (a permit of the new closed period: outcomes of calls from before it opened are old)
    assert circuit.acquire(probe_lease=10) == Permit(allowed=True, period=1)


def test_failures_of_calls_that_started_before_it_opened_do_not_open_it_again() -> None:
    # Slow calls admitted while closed report their failures only after an outage opened
    # the breaker and a probe closed it: they tell of the outage, not of the dependency now.
    clock = FakeClock()
    circuit = breaker(clock, open_for=5)
    slow = [circuit.acquire(probe_lease=10) for _ in range(5)]
    for _ in range(5):
        circuit.record(circuit.acquire(probe_lease=10), "unhealthy")
    assert circuit.state == "open"
    clock.advance(5)
    assert circuit.record(circuit.acquire(probe_lease=10), "healthy") is not None
    for permit in slow:
        assert circuit.record(permit, "unhealthy") is None
    assert circuit.state == "closed"
    # nor does an old call's retry that succeeds take back a failure of the new period
    for _ in range(4):
        circuit.record(circuit.acquire(probe_lease=10), "unhealthy")
    for permit in slow:
        circuit.record(permit, "healthy", repeat=True)
    # the new period's own failures count: one more makes five in a row
    assert circuit.record(circuit.acquire(probe_lease=10), "unhealthy") is not None
    assert circuit.state == "open"


def test_a_client_keeps_a_closed_breaker_closed_when_old_calls_fail_late() -> None:
    # The same through a client, on real threads: three slow calls are out when three
    # fast ones open the breaker; the dependency recovers and a probe closes it; then
    # the slow calls' 503s land.
    import threading
    import time

    recovered = threading.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            time.sleep(0.6)
            return httpx.Response(503)
        return httpx.Response(200 if recovered.is_set() else 503)

    governor = Governor(
        GovernorSettings(breaker=BreakerSettings(consecutive_failures=3, open_for=0.2))
    )
    client = retrysafe.Client(
        transport=httpx.MockTransport(answer),
        governor=governor,
        dependency="api",
        policy=RetryPolicy(attempts=1, deadline=3),
    )

    def get(path: str) -> int | str:
        try:
            return client.get("http://api.test" + path).status_code
        except retrysafe.ApiError as error:
            return type(error).__name__

    with client:
        slow = [threading.Thread(target=get, args=("/slow",)) for _ in range(3)]
        for thread in slow:
            thread.start()
        time.sleep(0.05)
        assert [get("/fast") for _ in range(3)] == ["ServerError"] * 3
        breaker = governor.guard("api").breaker
        assert breaker is not None
        assert breaker.state == "open"
        time.sleep(0.25)
        recovered.set()
        assert get("/fast") == 200  # the probe
        for thread in slow:
            thread.join()
        assert breaker.state == "closed"
        assert get("/fast") == 200


def test_a_failed_probe_opens_again() -> None:
    clock = FakeClock()
    circuit = half_open_at(clock)
    probe = circuit.acquire(probe_lease=1)
    assert circuit.record(probe, "unhealthy") == Transition("half_open", "open")
    assert circuit.open_until() == 10.0


def test_a_probe_that_never_reports_frees_its_slot_after_its_lease() -> None:
    clock = FakeClock()
    circuit = half_open_at(clock)
    lost = circuit.acquire(probe_lease=2)
    clock.advance(2)
    second = circuit.acquire(probe_lease=2)
    assert second.probe
    assert circuit.record(lost, "healthy") is None  # the stale probe decides nothing
    assert circuit.state == "half_open"
    assert circuit.record(second, "healthy") == Transition("half_open", "closed")


def test_a_503_retry_after_sets_the_open_period_within_its_cap() -> None:
    clock = FakeClock()
    circuit = breaker(clock, open_for=20, max_open_for=60)
    for _ in range(4):
        circuit.record(CLOSED, "unhealthy")
    circuit.record(CLOSED, "unhealthy", open_for=45)
    assert circuit.open_until() == 45
    other = breaker(clock, open_for=20, max_open_for=60)
    for _ in range(5):
        other.record(CLOSED, "unhealthy", open_for=3600)
    assert other.open_until() == 60


def test_a_probes_503_retry_after_sets_the_next_open_period() -> None:
    clock = FakeClock()
    circuit = half_open_at(clock, max_open_for=60)
    probe = circuit.acquire(probe_lease=1)
    assert circuit.record(probe, "unhealthy", open_for=45) == Transition("half_open", "open")
    assert circuit.open_until() == 5 + 45


def test_a_retry_after_is_not_the_open_period_when_use_retry_after_is_off() -> None:
    clock = FakeClock()
    circuit = breaker(clock, open_for=20, max_open_for=60, use_retry_after=False)
    for _ in range(5):
        circuit.record(CLOSED, "unhealthy", open_for=45)
    assert circuit.open_until() == 20


def test_a_retry_after_of_zero_opens_for_open_for() -> None:
    """A 503 saying ``Retry-After: 0`` does not leave the circuit open for no time at all."""
    clock = FakeClock()
    circuit = breaker(clock, open_for=20)
    for _ in range(5):
        circuit.record(CLOSED, "unhealthy", open_for=0.0)
    assert circuit.open_until() == 20
    assert circuit.state == "open"


@pytest.mark.parametrize("status", [404, 409, 429])
def test_a_probe_the_server_answered_with_a_4xx_closes_the_circuit(status: int) -> None:
    """A 4xx or 429 counts nowhere while closed, but a probe always decides: the server
    answered, so the circuit closes."""
    clock = FakeClock()
    circuit = half_open_at(clock)
    probe = circuit.acquire(probe_lease=1)
    verdict = classify_response(httpx.Response(status), RetryPolicy(), keyed=False, now=0.0)
    outcome = health_of(verdict, status)
    assert outcome == "neutral"
    assert circuit.record(probe, outcome) == Transition("half_open", "closed")
    assert circuit.state == "closed"


def test_a_probe_given_back_late_does_not_free_the_slot_of_the_probe_after_it() -> None:
    """A probe whose lease ran out was replaced; when it ends with no outcome and is given
    back, the probe in flight keeps its slot."""
    clock = FakeClock()
    circuit = half_open_at(clock)
    lost = circuit.acquire(probe_lease=2)
    clock.advance(2)
    assert circuit.acquire(probe_lease=2).probe
    circuit.release(lost)
    assert not circuit.acquire(probe_lease=2).allowed


def test_outcomes_of_calls_started_before_opening_are_ignored() -> None:
    circuit = breaker(FakeClock())
    for _ in range(5):
        circuit.record(CLOSED, "unhealthy")
    assert circuit.record(CLOSED, "healthy") is None
    assert circuit.state == "open"


# -- The guard: a dependency's breaker, budget and limiter together ------------------------


def test_a_call_that_succeeds_at_once_breaks_the_run_as_a_recorded_success_does() -> None:
    # The shells' short path counts a healthy call without a permit (healthy_call).
    guard = pinned_governor(FakeClock()).guard("api")  # five failures in a row open it
    circuit = guard.breaker
    assert circuit is not None
    for _ in range(4):
        circuit.record(CLOSED, "unhealthy")
    guard.healthy_call(0.01)
    for _ in range(4):
        circuit.record(CLOSED, "unhealthy")
    assert circuit.state == "closed"


def open_guard(clock: FakeClock, **settings: object) -> DependencyGuard:
    """The guard of "api", whose breaker is open for 10 s (one failure opened it)."""
    governor = Governor(
        GovernorSettings(
            breaker=BreakerSettings(consecutive_failures=1, open_for=10.0, first_open_for=10.0),
            **settings,  # type: ignore[arg-type]
        ),
        clock=clock,
    )
    guard = governor.guard("api")
    assert guard.breaker is not None
    guard.breaker.record(guard.breaker.acquire(probe_lease=1.0), "unhealthy")
    assert guard.breaker.state == "open"
    return guard


def test_a_retry_whose_wait_outlasts_the_open_period_is_granted() -> None:
    clock = FakeClock()
    guard = open_guard(clock)
    now = clock.monotonic()
    assert guard.answer_retry(AskRetry(11.0, spends_budget=False), now) == RetryAnswer()
    refused = guard.answer_retry(AskRetry(5.0, spends_budget=False), now)
    assert refused.refusal == "circuit_open"


def test_a_paced_slot_goes_back_when_the_breaker_refuses_the_attempt() -> None:
    clock = FakeClock()
    guard = open_guard(clock, limiter=LimiterSettings(requests_per_second=1.0, burst=1))
    first_attempt = SimpleNamespace(
        attempts=0, pacing_held=False, cooldown_waited=0.0, probe_lease=lambda: 1.0
    )
    admission = guard.admit(first_attempt)
    assert admission.permit is not None
    assert not admission.permit.allowed
    # Nothing went: the one slot of the burst is still free for the next caller.
    assert guard.limiter is not None
    assert guard.limiter.reserve_slot()[0] == 0.0


# -- Limiter -------------------------------------------------------------------------------


def test_a_cooldown_is_shared_and_only_extends() -> None:
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(), clock)
    limiter.start_cooldown(5)
    limiter.start_cooldown(2)
    clock.advance(1)
    assert limiter.cooldown_remaining() == 4


def test_pacing_reserves_slots_at_the_rate_after_the_burst() -> None:
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(requests_per_second=4, burst=2), clock)
    assert [limiter.reserve() for _ in range(4)] == [0.0, 0.0, 0.25, 0.5]
    clock.advance(1)
    assert limiter.reserve() == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (lambda: BudgetSettings(ratio=-1), "BudgetSettings.ratio"),
        (lambda: BreakerSettings(consecutive_failures=0), "consecutive_failures"),
        (lambda: BreakerSettings(failure_ratio=1.5), "failure_ratio"),
        (lambda: BreakerSettings(open_for=600), "open_for must be <= max_open_for"),
        (lambda: LimiterSettings(requests_per_second=0), "requests_per_second"),
        (lambda: GovernorSettings(nested_attempts=0), "nested_attempts"),
    ],
)
def test_bad_settings_name_the_field(settings: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings()


# -- through the engine --------------------------------------------------------------------


def outage_client(
    clock: FakeClock, governor: Governor, seen: list[httpx.Request]
) -> retrysafe.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503)

    return retrysafe.Client(transport=httpx.MockTransport(handler), clock=clock, governor=governor)


def test_an_open_circuit_fails_fast_with_nothing_sent() -> None:
    clock = FakeClock(seed=3)
    seen: list[httpx.Request] = []
    client = outage_client(clock, pinned_governor(clock), seen)
    # A call's own retries are one piece of evidence: four failing calls (4 attempts
    # each) are a run of four; the fifth call's failure, once its retry fails too (a
    # first failure alone waits for the retry that may save the call), trips the
    # breaker mid-call.
    for _ in range(4):
        with pytest.raises(retrysafe.ServerError) as failing:
            client.get("http://api.test/")
        assert (failing.value.reason, failing.value.attempts) == ("attempts_exhausted", 4)
    with pytest.raises(retrysafe.ApiError) as fifth:
        client.get("http://api.test/")
    assert (fifth.value.reason, fifth.value.attempts) == ("circuit_open", 2)
    sent = len(seen)
    with pytest.raises(retrysafe.CircuitOpen) as sixth:
        client.get("http://api.test/")
    assert len(seen) == sent == 18
    assert sixth.value.attempts == 0
    assert sixth.value.retry_after == pytest.approx(20, abs=1)
    assert sixth.value.retryable is True


def test_a_drained_budget_refuses_retries_with_the_original_error() -> None:
    clock = FakeClock()
    settings = GovernorSettings(
        budget=BudgetSettings(max_tokens=2, min_per_second=0, ratio=0), breaker=None
    )
    seen: list[httpx.Request] = []
    client = outage_client(clock, Governor(settings, clock=clock), seen)
    with pytest.raises(retrysafe.BudgetExhausted) as caught:
        client.get("http://api.test/")
    error = caught.value
    assert (error.reason, error.attempts, error.retryable) == ("budget_exhausted", 3, True)
    # The last attempt's own facts stay on the refusal: it is not the server's answer.
    assert (error.status, error.outcome, error.retry_after) == (503, "service_unavailable", None)
    with pytest.raises(retrysafe.BudgetExhausted) as again:
        client.get("http://api.test/")
    assert (again.value.reason, again.value.attempts) == ("budget_exhausted", 1)


def test_rate_limit_waits_do_not_spend_the_budget() -> None:
    clock = FakeClock()
    settings = GovernorSettings(budget=BudgetSettings(max_tokens=1, min_per_second=0, ratio=0))
    replies = iter([httpx.Response(429, headers={"Retry-After": "1"})] * 3 + [httpx.Response(200)])
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: next(replies)),
        clock=clock,
        governor=Governor(settings, clock=clock),
    )
    assert client.get("http://api.test/").status_code == 200


def test_retries_of_requests_the_clients_own_pool_held_back_do_not_spend_the_budget() -> None:
    """A pool timeout never reached the server: sent again, the request is its first
    sight of it, not extra load. A budget of one token sees two pool timeouts then a 200;
    the next call's retry of a 503 still finds its token."""
    clock = FakeClock()
    settings = GovernorSettings(
        budget=BudgetSettings(max_tokens=1, min_per_second=0, ratio=0), breaker=None
    )
    replies: list[httpx.Response | Exception] = [
        httpx.PoolTimeout("no connection came free"),
        httpx.PoolTimeout("no connection came free"),
        httpx.Response(200),
        httpx.Response(503),
        httpx.Response(200),
        httpx.Response(503),
    ]

    def reply(request: httpx.Request) -> httpx.Response:
        next_one = replies.pop(0)
        if isinstance(next_one, Exception):
            raise next_one
        return next_one

    client = retrysafe.Client(
        transport=httpx.MockTransport(reply), clock=clock, governor=Governor(settings, clock=clock)
    )
    first = client.get("http://api.test/")
    assert (first.status_code, retrysafe.report_of(first).attempts) == (200, 3)
    second = client.get("http://api.test/")  # its retry of the 503 spends the one token
    assert (second.status_code, retrysafe.report_of(second).attempts) == (200, 2)
    with pytest.raises(retrysafe.BudgetExhausted):  # and now the budget is empty
        client.get("http://api.test/")


def test_a_429_pauses_every_caller_of_the_dependency() -> None:
    clock = FakeClock(randoms=[0.0] * 10)
    replies = iter([httpx.Response(429, headers={"Retry-After": "4"}), httpx.Response(200)])

    def first_handler(request: httpx.Request) -> httpx.Response:
        return next(replies)

    governor = Governor(clock=clock)
    policy = RetryPolicy(attempts=1)
    first = retrysafe.Client(
        transport=httpx.MockTransport(first_handler), clock=clock, governor=governor
    )
    with pytest.raises(retrysafe.RateLimited):
        first.get("http://api.test/a", policy=policy)
    other = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        clock=clock,
        governor=governor,
    )
    clock.advance(1)
    assert other.get("http://api.test/b").status_code == 200
    assert clock.sleeps == [3.0]  # waited out the rest of the shared cooldown


def test_a_cooldown_longer_than_the_deadline_gives_up_at_once() -> None:
    clock = FakeClock()
    governor = Governor(clock=clock)
    governor.guard("http://api.test:80").limiter.start_cooldown(60)  # type: ignore[union-attr]
    seen: list[httpx.Request] = []
    client = outage_client(clock, governor, seen)
    with pytest.raises(retrysafe.CooldownActive) as caught:
        client.get("http://api.test/", policy=RetryPolicy(deadline=5))
    assert (caught.value.reason, caught.value.retry_after) == ("cooldown", 60)
    assert (caught.value.attempts, caught.value.status) == (0, None)
    assert seen == []


def test_dependencies_are_separate_by_origin_or_by_name() -> None:
    clock = FakeClock()
    governor = pinned_governor(clock)
    seen: list[httpx.Request] = []
    client = outage_client(clock, governor, seen)
    for _ in range(5):  # five failing calls in a row
        with pytest.raises(retrysafe.ApiError):
            client.get("http://down.test/")
    assert governor.guard("http://down.test:80").breaker.state == "open"  # type: ignore[union-attr]
    assert governor.guard("http://up.test:80").breaker.state == "closed"  # type: ignore[union-attr]
    with pytest.raises(retrysafe.ServerError):
        client.get("http://up.test/", dependency="payments")
    assert "payments" in governor.dependencies()


def test_circuit_changes_are_events() -> None:
    clock = FakeClock()
    events: list[retrysafe.RetryEvent] = []
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(503)),
        clock=clock,
        governor=pinned_governor(clock),
        hooks=[events.append],
    )
    for _ in range(5):  # five failing calls in a row
        with pytest.raises(retrysafe.ApiError):
            client.get("http://api.test/")
    assert [e.transition for e in events if e.kind == "circuit"] == ["closed->open"]


def test_every_circuit_change_is_an_event_the_half_open_probe_too() -> None:
    clock = FakeClock()
    events: list[retrysafe.RetryEvent] = []
    statuses = iter([503] * 5 + [503, 200])
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(next(statuses))),
        clock=clock,
        governor=pinned_governor(clock),
        policy=RetryPolicy(attempts=1),
        hooks=[events.append],
    )
    for _ in range(5):  # five failing calls in a row open it
        with pytest.raises(retrysafe.ApiError):
            client.get("http://api.test/")
    clock.advance(PINNED_BREAKER.open_for)
    with pytest.raises(retrysafe.ServerError):
        client.get("http://api.test/")  # the probe fails: open again
    clock.advance(PINNED_BREAKER.open_for)
    client.get("http://api.test/")  # this probe succeeds: closed
    assert [e.transition for e in events if e.kind == "circuit"] == [
        "closed->open",
        "open->half_open",
        "half_open->open",
        "open->half_open",
        "half_open->closed",
    ]


def test_governor_off_means_every_call_is_on_its_own() -> None:
    clock = FakeClock()
    seen: list[httpx.Request] = []
    client = outage_client(clock, Governor(GovernorSettings.off(), clock=clock), seen)
    for _ in range(5):
        with pytest.raises(retrysafe.ServerError):
            client.get("http://api.test/")
    assert len(seen) == 20


def test_one_absurd_429_cannot_block_an_origin_for_long() -> None:
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(max_cooldown=300), clock)
    limiter.start_cooldown(99_999_999_999)
    assert limiter.cooldown_remaining() == 300


def half_open_governor(clock: FakeClock) -> Governor:
    governor = pinned_governor(clock, budget=None)
    breaker = governor.guard("http://api.test:80").breaker
    assert breaker is not None
    for _ in range(breaker.settings.consecutive_failures):
        breaker.record(breaker.acquire(probe_lease=1), "unhealthy")
    clock.advance(breaker.settings.open_for)
    assert breaker.state == "half_open"
    return governor


def test_a_probe_interrupted_by_ctrl_c_frees_the_slot_at_once() -> None:
    clock = FakeClock()
    governor = half_open_governor(clock)
    replies: list[object] = [KeyboardInterrupt(), httpx.Response(200)]

    def handler(request: httpx.Request) -> httpx.Response:
        reply = replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        assert isinstance(reply, httpx.Response)
        return reply

    policy = RetryPolicy(attempt_timeout=float("inf"), deadline=float("inf"))
    client = retrysafe.Client(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor, policy=policy
    )
    with pytest.raises(KeyboardInterrupt):
        client.get("http://api.test/")
    assert client.get("http://api.test/").status_code == 200  # a new probe, not CircuitOpen
    assert governor.guard("http://api.test:80").breaker.state == "closed"  # type: ignore[union-attr]


def test_a_rule_that_crashes_during_a_probe_frees_the_slot() -> None:
    clock = FakeClock()
    governor = half_open_governor(clock)

    def buggy(response: httpx.Response) -> retrysafe.Verdict | None:
        raise KeyError("bug")

    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        clock=clock,
        governor=governor,
    )
    with pytest.raises(KeyError):
        client.get("http://api.test/", policy=RetryPolicy(rules=(buggy,)))
    assert client.get("http://api.test/").status_code == 200
