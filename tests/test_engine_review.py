"""Engine decisions pinned step by step: the boundaries and the bookkeeping a mutation
review of :class:`retrysafe.Call` found unpinned.

These tests drive the pure engine directly on a :class:`FakeClock`, as the shells do
(``start_attempt`` -> ``attempt_returned``/``attempt_raised`` -> ``retry_answered``).
"""

from __future__ import annotations

import httpx
import pytest

from retrysafe import Call, CircuitOpen, RetryPolicy
from retrysafe.classify import Verdict
from retrysafe.decisions import (
    Admission,
    AskRetry,
    AttemptPlan,
    DeferFailure,
    EmitEvent,
    Fail,
    ReadBody,
    RecordHealth,
    ReleasePacing,
    RetryAnswer,
    Succeed,
    Wait,
)
from retrysafe.engine import HEALTHY_WHILE_CLOSED
from retrysafe.governor.breaker import CLOSED_PERMIT, Permit
from retrysafe.request_facts import KEY_SENT_BEFORE_EXTENSION
from retrysafe.testing import FakeClock


def _call(clock: FakeClock, **policy: object) -> Call:
    """A GET's call under ``RetryPolicy(**policy)``, with no one listening for events."""
    request = httpx.Request("GET", "https://api.test/items")
    return Call(request, policy=RetryPolicy(**policy), clock=clock, observed=False)  # type: ignore[arg-type]


def _plan(step: object) -> AttemptPlan:
    assert isinstance(step, AttemptPlan), step
    return step


def test_a_breaker_whose_retry_time_already_passed_says_retry_after_zero() -> None:
    """An open breaker's ``retry_at`` in the past gives ``retry_after == 0``, never negative."""
    clock = FakeClock()
    clock.advance(100.0)
    call = _call(clock)
    step = call.start_attempt(Admission(permit=Permit(False, retry_at=clock.monotonic() - 3.0)))
    assert isinstance(step, Fail)
    assert isinstance(step.error, CircuitOpen)
    assert step.error.reason == "circuit_open"
    assert step.error.retry_after == 0.0


def test_a_call_abandoned_while_waiting_for_its_paced_slot_gives_the_slot_back() -> None:
    """Cancelled during a pacing wait: the slot reserved for it goes back, by its name."""
    clock = FakeClock()
    call = _call(clock)
    assert call.start_attempt(Admission(pacing=1.0, slot=42.0)) == Wait(1.0)
    assert call.pacing_held
    call.take_effects()
    call.attempt_abandoned("CancelledError")
    effects = call.take_effects()
    assert [e for e in effects if not isinstance(e, EmitEvent)] == [ReleasePacing(42.0)]
    assert not call.pacing_held


@pytest.mark.parametrize("attempts", [1, 3])
def test_a_nested_give_up_is_named_as_the_nested_one_even_on_the_last_attempt(
    attempts: int,
) -> None:
    """When a retrying call nested in the attempt already gave up, the call stops with
    ``nested_retry_exhausted`` (not ``attempts_exhausted`` on its last attempt), and says
    it retried."""
    clock = FakeClock()
    call = _call(clock, attempts=attempts)
    plan = _plan(call.start_attempt())
    call.nested_call_gave_up()
    step = call.attempt_returned(plan, httpx.Response(503))
    assert isinstance(step, Fail)
    assert step.error.reason == "nested_retry_exhausted"
    assert step.retried


def test_an_attempt_after_a_granted_retry_starts_even_if_the_sleep_overshot() -> None:
    """A retry is granted only with min_attempt_time left after its wait; the attempt it
    promised starts even when the sleep overshot into that time."""
    clock = FakeClock(randoms=[0.0])
    call = _call(clock, deadline=10.0, min_attempt_time=1.0)
    plan = _plan(call.start_attempt())
    ask = call.attempt_returned(plan, httpx.Response(503, headers={"Retry-After": "9"}))
    assert ask == AskRetry(9.0, spends_budget=True)
    assert call.retry_answered(ask, RetryAnswer()) == Wait(9.0)
    clock.advance(9.01)  # 0.99 s left, under min_attempt_time
    second = _plan(call.start_attempt())
    assert second.number == 2
    assert second.cut_by_deadline


def test_a_limit_announced_used_up_that_resets_now_starts_no_cooldown() -> None:
    """A success announcing its limit used up with a reset of 0 s pauses no one."""
    clock = FakeClock()
    call = _call(clock)
    plan = _plan(call.start_attempt(Admission(permit=CLOSED_PERMIT)))
    resets_now = httpx.Response(200, headers={"RateLimit": '"default";r=0;t=0'})
    assert isinstance(call.attempt_returned(plan, resets_now), Succeed)
    assert call.take_effects() == [HEALTHY_WHILE_CLOSED]


def test_a_call_that_gives_up_after_one_attempt_has_not_retried() -> None:
    """``Fail.retried`` says this call already retried; after a single attempt it did not,
    so an enclosing retrying call may still retry (here: a hint too long to wait)."""
    clock = FakeClock()
    call = _call(clock)
    plan = _plan(call.start_attempt())
    step = call.attempt_returned(plan, httpx.Response(503, headers={"Retry-After": "3600"}))
    assert isinstance(step, Fail)
    assert step.error.reason == "retry_after_too_long"
    assert step.error.retryable
    assert not step.retried


def test_a_final_failure_after_retries_is_not_marked_retried() -> None:
    """A failure no one may retry (a 404 after a 503) is not ``retried``: that mark is for
    a retryable failure an enclosing call must not retry again."""
    clock = FakeClock(randoms=[0.0])
    call = _call(clock)
    plan = _plan(call.start_attempt())
    ask = call.attempt_returned(plan, httpx.Response(503))
    assert isinstance(ask, AskRetry)
    assert isinstance(call.retry_answered(ask, RetryAnswer()), Wait)
    step = call.attempt_returned(_plan(call.start_attempt()), httpx.Response(404))
    assert isinstance(step, Fail)
    assert not step.error.retryable
    assert not step.retried


def test_the_failure_event_carries_the_body_excerpt_for_the_log() -> None:
    """Giving up leaves a failure event whose excerpt of the last body is for the log."""
    clock = FakeClock()
    call = _call(clock)
    plan = _plan(call.start_attempt())
    step = call.attempt_returned(plan, httpx.Response(404, text="no such item here"))
    assert isinstance(step, Fail)
    failure = call.take_effects()[-1]
    assert isinstance(failure, EmitEvent)
    assert failure.event.kind == "failure"
    assert "no such item here" in failure.body_excerpt


def _resumed_keyed_post() -> httpx.Request:
    """A keyed POST whose key an earlier run of its operation already sent."""
    return httpx.Request(
        "POST",
        "https://api.test/payments",
        headers={"Idempotency-Key": "op-1"},
        extensions={KEY_SENT_BEFORE_EXTENSION: True},
    )


def test_a_resumed_operation_may_have_been_processed_even_if_this_run_was_refused() -> None:
    """An earlier run sent the key: a connection refused now does not make the work
    surely undone, so the error says ``processed == "maybe"``."""
    clock = FakeClock()
    call = Call(_resumed_keyed_post(), policy=RetryPolicy(attempts=1), clock=clock)
    plan = _plan(call.start_attempt())
    step = call.attempt_raised(plan, httpx.ConnectError("refused"), during_body=False)
    assert isinstance(step, Fail)
    assert step.error.processed == "maybe"


def test_a_streamed_400_is_read_before_it_is_judged_even_if_a_rule_accepts_it() -> None:
    """Every error status (400 included) of a streamed call is read before it is judged,
    so a rule sees the body; only statuses under 400 may be settled on headers alone."""

    def accept_400(response: httpx.Response) -> Verdict | None:
        return Verdict.success() if response.status_code == 400 else None

    clock = FakeClock()
    request = httpx.Request("GET", "https://api.test/items")
    policy = RetryPolicy(rules=[accept_400])
    call = Call(request, policy=policy, clock=clock, stream=True, observed=False)
    plan = _plan(call.start_attempt())
    assert not plan.read_body
    unread = httpx.Response(400, stream=httpx.ByteStream(b"{}"))  # (as a transport returns it)
    assert call.attempt_returned(plan, unread) == ReadBody(plan)


def test_a_first_try_success_is_new_evidence_for_the_breaker_not_a_repeat() -> None:
    """The one healthy call a first-try success reports is not a repeat within a call:
    every breaker (the fleet's too) must count it."""
    clock = FakeClock()
    call = _call(clock)
    plan = _plan(call.start_attempt(Admission(permit=CLOSED_PERMIT)))
    assert isinstance(call.attempt_returned(plan, httpx.Response(200)), Succeed)
    (health,) = call.take_effects()
    assert isinstance(health, RecordHealth)
    assert (health.permit, health.health, health.repeat) == (CLOSED_PERMIT, "healthy", False)


def _first_failure_held(clock: FakeClock) -> Call:
    """A call whose first attempt got a 503 and whose retry was granted: its failure is
    held back for the retry, and the call is in its backoff."""
    call = _call(clock)
    plan = _plan(call.start_attempt(Admission(permit=CLOSED_PERMIT)))
    request = httpx.Request("GET", "https://api.test/items")
    ask = call.attempt_returned(plan, httpx.Response(503, request=request))
    assert isinstance(ask, AskRetry)
    assert isinstance(call.retry_answered(ask, RetryAnswer()), Wait)
    assert not [e for e in call.take_effects() if isinstance(e, RecordHealth)]  # (held)
    return call


def test_a_call_cancelled_in_its_backoff_leaves_its_held_failure_to_another_retry() -> None:
    """The retry was never sent: the first failure goes to the breaker to defer."""
    call = _first_failure_held(FakeClock())
    call.attempt_abandoned()
    effects = call.take_effects()
    deferred = [e for e in effects if isinstance(e, DeferFailure)]
    assert len(deferred) == 1
    assert deferred[0].record.health == "unhealthy"
    assert not [e for e in effects if isinstance(e, RecordHealth)]


def _first_timeout_held(clock: FakeClock) -> tuple[Call, AskRetry]:
    """A call whose first attempt timed out while the dependency answered others: its
    failure is held back for the retry, as a 503's is (a blip of timeouts one retry fixes
    must not open the circuit)."""
    call = _call(clock)
    plan = _plan(call.start_attempt(Admission(permit=CLOSED_PERMIT)))
    call.answered_during_attempt()
    ask = call.attempt_raised(plan, httpx.ReadTimeout("stalled"), during_body=False)
    assert isinstance(ask, AskRetry)
    assert not [e for e in call.take_effects() if isinstance(e, RecordHealth)]  # (held)
    return call, ask


def test_a_first_timeout_with_no_answer_to_anyone_meanwhile_is_told_at_once() -> None:
    """A hung dependency answers no one: its retry would take another whole attempt to
    confirm the timeout, so the breaker hears of it now."""
    call = _call(FakeClock())
    plan = _plan(call.start_attempt(Admission(permit=CLOSED_PERMIT)))
    ask = call.attempt_raised(plan, httpx.ReadTimeout("stalled"), during_body=False)
    assert isinstance(ask, AskRetry)
    told = [e for e in call.take_effects() if isinstance(e, RecordHealth)]
    assert [(e.health, e.repeat) for e in told] == [("unhealthy", False)]


def test_the_fact_of_answers_meanwhile_is_the_attempts_own() -> None:
    """Given for one attempt, it does not carry over to the retry."""
    call, ask = _first_timeout_held(FakeClock())
    assert isinstance(call.retry_answered(ask, RetryAnswer()), Wait)
    plan = _plan(call.start_attempt(Admission(permit=CLOSED_PERMIT)))
    call.take_effects()
    call.attempt_raised(plan, httpx.ReadTimeout("stalled"), during_body=False)
    told = [e for e in call.take_effects() if isinstance(e, RecordHealth)]
    assert [(e.health, e.repeat) for e in told] == [("unhealthy", False), ("unhealthy", True)]


def test_a_first_timeout_is_held_and_taken_back_when_its_retry_succeeds() -> None:
    call, ask = _first_timeout_held(FakeClock())
    assert isinstance(call.retry_answered(ask, RetryAnswer()), Wait)
    plan = _plan(call.start_attempt(Admission(permit=CLOSED_PERMIT)))
    call.take_effects()
    request = httpx.Request("GET", "https://api.test/items")
    call.attempt_returned(plan, httpx.Response(200, request=request))
    told = [e for e in call.take_effects() if isinstance(e, RecordHealth)]
    assert [e.health for e in told] == ["healthy"]


def test_a_held_timeout_counts_when_the_caller_gives_up_in_the_backoff() -> None:
    """Unlike a 503, which is left to another call's retry: callers that all give up in
    the backoff of a hung dependency would otherwise never open the circuit."""
    call, ask = _first_timeout_held(FakeClock())
    assert isinstance(call.retry_answered(ask, RetryAnswer()), Wait)
    call.take_effects()
    call.attempt_abandoned()
    effects = call.take_effects()
    told = [e for e in effects if isinstance(e, RecordHealth)]
    assert [(e.health, e.repeat, e.seconds is not None) for e in told] == [
        ("unhealthy", False, True)
    ]
    assert not [e for e in effects if isinstance(e, DeferFailure)]


def test_a_held_timeout_counts_when_the_budget_refuses_its_retry() -> None:
    call, ask = _first_timeout_held(FakeClock())
    call.retry_answered(ask, RetryAnswer("budget_exhausted"))
    effects = call.take_effects()
    told = [e for e in effects if isinstance(e, RecordHealth)]
    assert [(e.health, e.repeat) for e in told] == [("unhealthy", False)]
    assert not [e for e in effects if isinstance(e, DeferFailure)]


def test_a_call_cancelled_while_its_retry_is_in_flight_counts_its_held_failure() -> None:
    """The retry went unanswered for as long as the caller waited: the failure counts."""
    call = _first_failure_held(FakeClock())
    _plan(call.start_attempt(Admission(permit=CLOSED_PERMIT)))
    call.take_effects()
    call.attempt_abandoned()
    effects = call.take_effects()
    told = [e for e in effects if isinstance(e, RecordHealth)]
    assert [(e.health, e.repeat) for e in told] == [("unhealthy", False)]
    assert not [e for e in effects if isinstance(e, DeferFailure)]
