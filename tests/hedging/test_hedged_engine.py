"""The hedging engine (HedgedCall), driven by hand on the fake clock: exact decisions.

No I/O: each test plays the shell, starting copies and reporting their outcomes, and
reads the engine's decisions and effects.
"""

from __future__ import annotations

import httpx
import pytest

from retrysafe import RetryPolicy
from retrysafe.decisions import (
    Admission,
    AskRetry,
    AttemptPlan,
    AwaitOthers,
    EmitEvent,
    Fail,
    Hedge,
    HedgeAnswer,
    RecordHealth,
    RecordLatency,
    ReleaseProbe,
    RetryAnswer,
    Succeed,
    Wait,
)
from retrysafe.governor.breaker import CLOSED_PERMIT, Permit
from retrysafe.hedged_call import HedgedCall
from retrysafe.observe import FIRST_COPY
from retrysafe.testing import FakeClock

URL = "http://api.test/items"
GRANTED = HedgeAnswer()


def make_call(
    method: str = "GET",
    *,
    clock: FakeClock | None = None,
    delay: float = 0.1,
    key: str | None = None,
    body: bytes | None = None,
    stream_body: bool = False,
    max_attempts: int | None = None,
    **policy: object,
) -> tuple[HedgedCall, FakeClock]:
    clock = clock or FakeClock()
    headers = {"Idempotency-Key": key} if key else {}
    if stream_body:
        request = httpx.Request(method, URL, headers=headers, content=iter([b"x"]))
    else:
        request = httpx.Request(method, URL, headers=headers, content=body)
    fields: dict[str, object] = {"hedge_after": delay, "attempt_timeout": 2.0, "deadline": 5.0}
    fields.update(policy)
    call = HedgedCall(
        request,
        hedge_delay=delay,
        policy=RetryPolicy(**fields),
        clock=clock,  # type: ignore[arg-type]
        max_attempts=max_attempts,
    )
    return call, clock


def ok(status: int = 200) -> httpx.Response:
    return httpx.Response(status, content=b"{}")


def start(call: HedgedCall) -> AttemptPlan:
    plan = call.start_attempt()
    assert isinstance(plan, AttemptPlan)
    return plan


def hedge_now(call: HedgedCall, clock: FakeClock) -> AttemptPlan:
    hedge = call.next_hedge()
    assert hedge is not None
    clock.advance(max(0.0, hedge.at - clock.monotonic()))
    plan = call.start_hedge(hedge, GRANTED)
    assert plan is not None
    return plan


def events(call: HedgedCall) -> list[tuple[str, str, str, int]]:
    """(kind, outcome, reason, attempt) of the events the call left in its outbox."""
    return [
        (e.event.kind, e.event.outcome, e.event.reason, e.event.attempt)
        for e in call.take_effects()
        if isinstance(e, EmitEvent)
    ]


def test_the_next_copy_is_due_hedge_after_seconds_after_the_first_started() -> None:
    call, clock = make_call(delay=0.25)
    clock.advance(3.0)
    start(call)
    assert call.next_hedge() == Hedge(3.25)


def test_a_hedged_copy_that_answers_first_wins_and_the_first_is_recorded_lost() -> None:
    call, clock = make_call()
    first = start(call)
    second = hedge_now(call, clock)
    assert (first.number, second.number) == (1, 2)
    clock.advance(0.02)
    step = call.attempt_returned(second, ok())
    assert isinstance(step, Succeed)
    report = step.report
    assert (report.attempts, report.hedges, report.winner) == (2, 1, 2)
    assert [(r.attempt, r.outcome) for r in report.history] == [(1, "hedge_lost"), (2, "success")]
    assert step.response.extensions["retrysafe"] is report
    effects = call.take_effects()
    latencies = [e for e in effects if isinstance(e, RecordLatency)]
    # the winner took 0.02 s; the loser had been out 0.12 s when it lost (a lower bound)
    assert sorted((round(e.seconds, 3), e.censored) for e in latencies) == [
        (0.02, False),
        (0.12, True),
    ]
    kinds = [(e.event.kind, e.event.outcome) for e in effects if isinstance(e, EmitEvent)]
    assert ("hedge", "won") in kinds
    assert ("hedge", "lost") in kinds


def test_every_event_names_the_copy_it_is_about_and_the_loser_ends_as_an_attempt() -> None:
    """The winner's ``attempt`` event is numbered as the report numbers it (2, not the
    history's length when it was recorded), and the copy it beat ends as an attempt
    ``hedge_lost`` (metrics count every request sent, tracers end its span)."""
    call, clock = make_call()
    first = start(call)
    second = hedge_now(call, clock)
    assert events(call) == [("hedge", "sent", "", 2)]
    step = call.attempt_returned(second, ok())
    assert isinstance(step, Succeed)
    assert events(call) == [
        ("attempt", "success", "", 2),
        ("attempt", "hedge_lost", "", 1),
        ("hedge", "lost", FIRST_COPY, 1),
        ("hedge", "won", "", 2),
        ("success", "success", "", 2),
    ]
    assert first.number == 1


def test_the_attempt_a_copy_raced_wins_and_loses_as_the_first_copy_not_as_a_hedge() -> None:
    """The round's own attempt is no hedged copy: its ``won`` says so (``FIRST_COPY``), so
    that the metrics of hedged copies count only copies sent as hedges, and their ``won``
    over ``sent`` is how often a hedge beat it (trial95: every race counted a ``won``)."""
    call, clock = make_call()
    first = start(call)
    hedge_now(call, clock)
    call.take_effects()
    assert isinstance(call.attempt_returned(first, ok()), Succeed)
    assert [event for event in events(call) if event[0] == "hedge"] == [
        ("hedge", "lost", "", 2),
        ("hedge", "won", FIRST_COPY, 1),
    ]


def test_a_final_answer_wins_the_race_as_a_success_does() -> None:
    """A 404 is the first usable answer as a 200 is: the copy that gave it won (it made no
    ``won`` event, so a hedge that beat its attempt to a final answer went uncounted)."""
    call, clock = make_call()
    start(call)
    second = hedge_now(call, clock)
    call.take_effects()
    call.attempt_returned(second, ok(404))  # (its body: read with the response)
    assert [event for event in events(call) if event[0] == "hedge"] == [
        ("hedge", "lost", FIRST_COPY, 1),
        ("hedge", "won", "", 2),
    ]


def test_a_copy_that_failed_here_with_no_answer_won_nothing() -> None:
    """A hedged copy that ends the call with an error of its own (no answer came: a
    scheme no transport handles) decides the call, but beat no one: no ``won`` event
    counts it as a hedge that helped (review88)."""
    call, clock = make_call()
    start(call)
    second = hedge_now(call, clock)
    call.take_effects()
    call.attempt_raised(second, httpx.UnsupportedProtocol("no transport"), during_body=False)
    assert ("hedge", "won") not in [(kind, outcome) for kind, outcome, _, _ in events(call)]


def test_a_retry_event_names_the_copy_that_failed_last() -> None:
    """The second copy fails first, then the first: the call retries after copy 1."""
    call, clock = make_call(attempts=4)
    first = start(call)
    second = hedge_now(call, clock)
    call.take_effects()
    assert call.attempt_returned(second, ok(503)) == AwaitOthers(second)
    step = call.attempt_returned(first, ok(503))
    assert isinstance(step, AskRetry)
    call.retry_answered(step, RetryAnswer())
    assert events(call) == [
        ("attempt", "service_unavailable", "", 2),
        ("attempt", "service_unavailable", "", 1),
        ("retry", "service_unavailable", "", 1),
    ]


def test_a_failed_copy_does_not_end_the_call_while_another_is_in_flight() -> None:
    call, clock = make_call()
    first = start(call)
    second = hedge_now(call, clock)
    step = call.attempt_returned(second, ok(503))
    assert step == AwaitOthers(second)
    assert call.state == "attempting"
    step = call.attempt_returned(first, ok())
    assert isinstance(step, Succeed)
    assert [(r.attempt, r.outcome) for r in step.report.history] == [
        (2, "service_unavailable"),
        (1, "success"),
    ]
    assert step.report.winner == 1


def test_when_every_copy_fails_the_call_retries_as_a_whole() -> None:
    call, clock = make_call(attempts=4)
    first = start(call)
    second = hedge_now(call, clock)
    assert isinstance(
        call.attempt_raised(first, httpx.ConnectError("x"), during_body=False), AwaitOthers
    )
    step = call.attempt_returned(second, ok(503))
    assert isinstance(step, AskRetry)


def test_a_final_answer_from_any_copy_ends_the_call_and_the_others_lose() -> None:
    call, clock = make_call()
    first = start(call)
    hedge_now(call, clock)
    step = call.attempt_returned(first, ok(404))
    assert isinstance(step, Fail)
    assert next((r.attempt, r.outcome) for r in step.report.history) == (2, "hedge_lost")
    assert step.report.history[-1].status == 404
    assert step.report.winner == 1  # the copy whose answer ended the call, a failure too


def test_copies_count_as_attempts() -> None:
    # Nested, the call may make 2 attempts (not the policy's 3): two copies use them up.
    call, clock = make_call(attempts=3, max_hedges=2, max_attempts=2)
    start(call)
    hedge_now(call, clock)
    assert call.next_hedge() is None
    assert call.hedges == 1


def test_the_apps_409_to_a_keyed_post_ends_it_unprocessed_when_hedged_too() -> None:
    # Copy 1 gets the app's own 409 while copy 2 runs (so it reads as the key in use);
    # copy 2 then gets that 409 replayed: the app refused the write, nothing was done.
    call, clock = make_call("POST", key="signup-1", body=b"{}", attempts=3)
    first = start(call)
    second = hedge_now(call, clock)
    assert call.attempt_returned(first, ok(409)) == AwaitOthers(first)
    replayed = httpx.Response(409, headers={"Idempotent-Replayed": "true"}, content=b"{}")
    step = call.attempt_returned(second, replayed)
    assert isinstance(step, Fail)
    assert (step.error.reason, step.error.processed) == ("conflict", "no")


def test_max_hedges_limits_the_copies_of_a_call() -> None:
    call, clock = make_call(attempts=5, max_hedges=2)
    start(call)
    hedge_now(call, clock)
    hedge_now(call, clock)
    assert call.next_hedge() is None
    assert call.hedges == 2


def test_each_copy_is_due_hedge_after_seconds_after_the_one_before() -> None:
    call, clock = make_call(delay=0.1, attempts=5, max_hedges=2)
    started = clock.monotonic()
    start(call)
    hedge_now(call, clock)
    later = call.next_hedge()
    assert later is not None
    assert later.at == pytest.approx(started + 0.2)


def test_no_copy_goes_when_the_deadline_leaves_too_little_time() -> None:
    call, _clock = make_call(delay=4.8, deadline=5.0, min_attempt_time=0.5)
    start(call)
    assert call.next_hedge() is None


def test_copies_never_outlive_the_deadline() -> None:
    call, clock = make_call(delay=1.0, deadline=2.5, attempt_timeout=10.0, min_attempt_time=0.1)
    first = start(call)
    second = hedge_now(call, clock)
    assert first.timeout == 2.5
    assert second.timeout == pytest.approx(1.5)
    assert second.cut_by_deadline


@pytest.mark.parametrize(
    ("method", "key", "body", "stream_body"),
    [
        ("POST", None, b"{}", False),
        ("PATCH", None, b"{}", False),
        ("PUT", None, None, True),  # idempotent, but a one-shot body cannot be sent twice
        ("POST", "k-1", None, True),
    ],
)
def test_requests_unsafe_to_send_twice_are_never_hedged(
    method: str, key: str | None, body: bytes | None, stream_body: bool
) -> None:
    call, _clock = make_call(method, key=key, body=body, stream_body=stream_body)
    start(call)
    assert not call.hedgeable
    assert call.next_hedge() is None


def test_a_keyed_post_is_hedged() -> None:
    call, _clock = make_call("POST", key="k-1", body=b'{"a": 1}')
    start(call)
    assert call.hedgeable
    assert call.next_hedge() is not None


@pytest.mark.parametrize(
    "refusal", ["circuit_not_closed", "cooldown", "pacing", "budget_exhausted"]
)
def test_a_refused_copy_stops_hedging_for_the_attempt(refusal: str) -> None:
    call, clock = make_call(max_hedges=3)
    first = start(call)
    hedge = call.next_hedge()
    assert hedge is not None
    clock.advance(0.1)
    assert call.start_hedge(hedge, HedgeAnswer(refusal)) is None  # type: ignore[arg-type]
    assert ("hedge", "refused", refusal, 2) in events(call)
    assert call.next_hedge() is None
    step = call.attempt_returned(first, ok())
    assert isinstance(step, Succeed)
    assert (step.report.attempts, step.report.hedges, step.report.winner) == (1, 0, None)


def test_a_refused_copy_stops_hedging_for_its_attempt_only() -> None:
    # Refused during attempt 1; attempt 2, after a retry, may be hedged again.
    call, clock = make_call(attempts=4, max_hedges=3)
    first = start(call)
    hedge = call.next_hedge()
    assert hedge is not None
    clock.advance(0.1)
    assert call.start_hedge(hedge, HedgeAnswer("pacing")) is None
    step = call.attempt_returned(first, ok(503))
    assert isinstance(step, AskRetry)
    wait = call.retry_answered(step, RetryAnswer())
    assert isinstance(wait, Wait)
    clock.advance(wait.seconds)
    start(call)
    assert call.next_hedge() is not None


def test_a_losing_copy_that_holds_the_probe_releases_it() -> None:
    call, clock = make_call()
    probe = Permit(allowed=True, probe=True, probe_token=7)
    assert isinstance(call.start_attempt(Admission(permit=probe)), AttemptPlan)
    second = hedge_now(call, clock)
    call.take_effects()
    assert isinstance(call.attempt_returned(second, ok()), Succeed)
    assert ReleaseProbe(probe) in call.take_effects()


def test_start_hedge_needs_the_hedge_next_hedge_gave() -> None:
    call, _clock = make_call()
    start(call)
    with pytest.raises(RuntimeError, match="start_hedge"):
        call.start_hedge(Hedge(123.0), GRANTED)


def test_an_outcome_for_a_plan_not_in_flight_is_refused() -> None:
    call, _clock = make_call()
    first = start(call)
    assert isinstance(call.attempt_returned(first, ok()), Succeed)
    with pytest.raises(RuntimeError):
        call.attempt_returned(first, ok())


def test_abandoning_the_call_releases_every_copys_probe() -> None:
    call, _clock = make_call()
    probe = Permit(allowed=True, probe=True, probe_token=7)
    plan = call.start_attempt(Admission(permit=probe))
    assert isinstance(plan, AttemptPlan)
    call.take_effects()
    call.attempt_abandoned()
    releases = [e for e in call.take_effects() if isinstance(e, ReleaseProbe)]
    assert releases == [ReleaseProbe(probe)]


def test_a_call_cancelled_with_two_copies_in_flight_is_interrupted_after_two_attempts() -> None:
    call, clock = make_call()
    start(call)
    hedge_now(call, clock)
    call.take_effects()
    call.attempt_abandoned("CancelledError")
    events = [e.event for e in call.take_effects() if isinstance(e, EmitEvent)]
    assert [(e.kind, e.attempt, e.outcome, e.exception) for e in events] == [
        ("attempt", 1, "interrupted", "CancelledError"),  # (each copy cut in flight)
        ("attempt", 2, "interrupted", "CancelledError"),
        ("interrupted", 2, "", "CancelledError"),
    ]
    call.attempt_abandoned("CancelledError")  # (a shell tells it again: nothing more)
    assert call.take_effects() == []


def test_hedged_copies_carry_a_closed_permit_when_the_first_had_one() -> None:
    call, clock = make_call()
    first = call.start_attempt(Admission(permit=CLOSED_PERMIT))
    assert isinstance(first, AttemptPlan)
    second = hedge_now(call, clock)
    call.take_effects()
    step = call.attempt_returned(second, ok())
    assert isinstance(step, Succeed)


def test_how_late_a_copys_read_ended_weighs_only_that_copys_timeout() -> None:
    """Copy 1's header read times out 0.2 s in, 0.1 s past its limit (a late loop); copy
    2's body stalls out at 3.0 s, its shell saying nothing of lateness: the breaker
    weighs 0.1 s and 2.9 s, not copy 1's lateness taken off copy 2's (review85)."""
    call, clock = make_call(attempts=2)
    first = call.start_attempt(Admission(permit=CLOSED_PERMIT))  # (the breaker is told)
    assert isinstance(first, AttemptPlan)
    second = hedge_now(call, clock)
    clock.advance(0.1)
    call.attempt_ended_late(0.1)
    assert type(call.attempt_raised(first, httpx.ReadTimeout("x"), during_body=False)) is (
        AwaitOthers
    )
    clock.advance(2.8)
    call.attempt_raised(second, httpx.ReadTimeout("x"), during_body=True)
    told = [e.seconds for e in call.take_effects() if isinstance(e, RecordHealth)]
    assert told == [pytest.approx(0.1), pytest.approx(2.9)]
