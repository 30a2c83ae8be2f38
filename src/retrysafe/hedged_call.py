"""HedgedCall: the engine of a call that may have more than one copy in flight.

A :class:`~retrysafe.engine.Call` whose policy sets ``hedge_after``. It is
still pure (facts in, decisions and effects out); what it adds is the decision
to send a *hedged copy* of the attempt in flight when it has not answered in
time, and the rules for several copies at once:

- only a request safe to send twice is hedged: an idempotent method or a write
  carrying an idempotency key (every copy carries the same key, since copies are
  the same request), with a replayable body; any other call behaves exactly like
  a plain :class:`Call`;
- :meth:`next_hedge` says when the next copy is due (a :class:`Hedge`) or that
  none will be: ``max_hedges`` reached, the policy's ``attempts`` used up by
  copies sent and in flight, or too little time left before the deadline;
- the shell asks the governor (a :class:`HedgeAnswer`: the breaker closed, no
  cooldown, a paced slot if pacing, and a retry-budget token) and tells
  :meth:`start_hedge`, which plans the copy or, refused, stops hedging this round;
- the first usable answer wins (a success, or a final answer such as a 4xx); a
  copy that fails in a way another attempt could fix does not end the call while
  another copy is in flight (:class:`AwaitOthers`); when the last one fails, the
  usual retry rules apply to the call as a whole;
- when the call ends, every copy still in flight is abandoned: recorded in the
  history as ``"hedge_lost"``, with its probe released, and the shell cancels it.

Driving it::

    plan = call.start_attempt(admission)          # as for any Call
    # send plan; then until a step other than AwaitOthers:
    hedge = call.next_hedge()                     # Hedge(at) or None
    #   if nothing answered by hedge.at: plan = call.start_hedge(hedge, answer); send it
    #   an answer came: step = call.attempt_returned(plan, response) (or attempt_raised)
    # a Succeed or Fail: cancel every other copy still in flight.
"""

from __future__ import annotations

from typing import Literal

import httpx

from retrysafe.attempt_plan import plan_attempt
from retrysafe.classify import SUCCESS, Verdict, may_have_acted
from retrysafe.clock import Clock
from retrysafe.decisions import (
    OPEN_ADMISSION,
    Admission,
    AttemptPlan,
    AwaitOthers,
    CallReport,
    Decision,
    Fail,
    Hedge,
    HedgeAnswer,
    RecordLatency,
    ReleaseProbe,
    Succeed,
    Wait,
)
from retrysafe.engine import Call
from retrysafe.errors import ApiError, AttemptRecord
from retrysafe.governor.breaker import CLOSED_PERMIT, Permit
from retrysafe.observe import FIRST_COPY
from retrysafe.policy import RetryPolicy
from retrysafe.timing import Deadline

__all__ = ["HedgedCall"]

#: The outcome recorded for a copy cancelled because another copy answered first.
LOST = "hedge_lost"


class _Flight:
    """One copy in flight: when it started, the breaker permit it holds, whether the
    engine asked for its body (a :class:`ReadBody`: it is being read within the attempt)."""

    __slots__ = ("body_read", "permit", "plan", "started")

    def __init__(self, plan: AttemptPlan, started: float, permit: Permit | None) -> None:
        self.plan = plan
        self.started = started
        self.permit = permit
        self.body_read = False


class HedgedCall(Call):
    """A :class:`Call` that may hedge: see the module docstring.

    ``hedge_delay`` is a fact the shell works out before the call (the policy's
    fixed delay, or the dependency's learned percentile): the engine reads no
    shared state.
    """

    def __init__(
        self,
        request: httpx.Request,
        *,
        hedge_delay: float,
        policy: RetryPolicy,
        clock: Clock,
        dependency: str | None = None,
        deadline: Deadline | None = None,
        retries_used: int = 0,
        max_attempts: int | None = None,
        stream: bool = False,
        observed: bool = True,
        started: float | None = None,
        elapsed_before: float = 0.0,
        returns_answers: bool = False,
    ) -> None:
        super().__init__(
            request,
            policy=policy,
            clock=clock,
            dependency=dependency,
            deadline=deadline,
            retries_used=retries_used,
            max_attempts=max_attempts,
            stream=stream,
            observed=observed,
            started=started,
            elapsed_before=elapsed_before,
            returns_answers=returns_answers,
        )
        #: Seconds after a copy starts before the next one is due.
        self.hedge_delay = hedge_delay
        policy = self.policy
        #: Whether this request may be sent twice at all (else no copy is ever sent):
        #: copies in flight at once share its body, so only bytes (a multipart form's
        #: files are read as they are sent).
        self.hedgeable = isinstance(request.stream, httpx.ByteStream) and (
            self.method in policy.idempotent_methods or self.idempotency_key is not None
        )
        self._flights: dict[AttemptPlan, _Flight] = {}
        #: The numbers of the hedged copies sent (a round's first copy is no hedge).
        self._hedged_copies: set[int] = set()
        #: Refused (or out of time) this round: no more copies until the next attempt.
        self._round_closed = False
        self._last_start = 0.0
        self._winner: int | None = None

    @property
    def hedges(self) -> int:
        """Hedged copies sent so far."""
        return len(self._hedged_copies)

    def in_flight(self, plan: AttemptPlan) -> bool:
        """Whether ``plan``'s copy is in flight (its outcome is awaited)."""
        return plan in self._flights

    # -- starting copies -----------------------------------------------------------------

    def start_attempt(self, admission: Admission = OPEN_ADMISSION) -> AttemptPlan | Wait | Fail:
        step = super().start_attempt(admission)
        if type(step) is AttemptPlan:
            self._flights[step] = _Flight(step, self._attempt_started, self._permit)
            self._last_start = self._attempt_started
            self._round_closed = False
        return step

    def next_hedge(self) -> Hedge | None:
        """When the next hedged copy is due, or None if no copy will be sent now."""
        if self.state != "attempting" or not self.hedgeable or self._round_closed:
            return None
        policy = self.policy
        if len(self._hedged_copies) >= policy.max_hedges:
            return None
        if len(self._history) + len(self._flights) >= self.max_attempts:
            return None
        at = self._last_start + self.hedge_delay
        if at + policy.min_attempt_time > self.deadline.at:
            return None  # a copy then could not get the least time an attempt needs
        return Hedge(at)

    def start_hedge(self, hedge: Hedge, answer: HedgeAnswer) -> AttemptPlan | None:
        """The governor's ``answer`` for ``hedge``: the copy's plan, or None (refused)."""
        if self.state != "attempting" or self.next_hedge() != hedge:
            raise RuntimeError(
                f"Call.start_hedge() needs the hedge next_hedge() gave, in state 'attempting'; "
                f"the call is {self.state!r}"
            )
        number = len(self._history) + len(self._flights) + 1
        if answer.refusal is not None:
            self._round_closed = True
            self._emit_hedge(number, "refused", answer.refusal)
            return None
        remaining = self.deadline.remaining()
        if remaining < self.policy.min_attempt_time:
            self._round_closed = True
            self._emit_hedge(number, "refused", "deadline")
            return None
        plan = plan_attempt(number, self.policy.attempt_timeout, remaining, not self._stream)
        first = next(iter(self._flights.values()), None)
        # Copies go only while the breaker is closed: a closed permit (None: no breaker).
        # (the first copy's: a permit of the breaker's current closed period)
        permit = CLOSED_PERMIT if first is None else first.permit
        if permit is not None and permit.probe:
            permit = CLOSED_PERMIT
        now = self._clock.monotonic()
        self._flights[plan] = _Flight(plan, now, permit)
        self._hedged_copies.add(number)
        self._last_start = now
        self._emit_hedge(number, "sent")
        return plan

    # -- outcomes --------------------------------------------------------------------------

    def attempt_returned(self, plan: AttemptPlan, response: httpx.Response) -> Decision:
        self._take_up(plan, "attempt_returned")
        step = super().attempt_returned(plan, response)
        flight = self._flights.get(plan)
        if flight is not None:  # a ReadBody: the copy is still in flight
            flight.body_read = True
        return step

    def _succeed(self, plan: AttemptPlan, response: httpx.Response) -> Succeed:
        """A success takes the general path here (the base class's short path knows of
        one attempt only): it ends every other copy and reports which one won."""
        self._record(SUCCESS, status=response.status_code, exception=None)
        self._inform_governor(SUCCESS, response.status_code, response)
        step = self._decide(SUCCESS, response=response, cause=None, during_body=False)
        assert isinstance(step, Succeed)
        return step

    def attempt_raised(
        self,
        plan: AttemptPlan,
        exc: Exception,
        *,
        during_body: bool,
        answer: httpx.Response | None = None,
    ) -> Decision:
        self._take_up(plan, "attempt_raised")
        return super().attempt_raised(plan, exc, during_body=during_body, answer=answer)

    def _take_up(self, plan: AttemptPlan, action: str) -> None:
        """Make ``plan``'s copy the one the base engine's bookkeeping works on."""
        flight = self._flights.get(plan)
        if flight is None or self.state != "attempting":
            state = "attempting" if self.state == "attempting" else self.state
            raise RuntimeError(
                f"Call.{action}() got a plan that is not a copy in flight (call is {state!r})"
            )
        self._plan = plan
        self._attempt_started = flight.started
        self._permit = flight.permit
        self._body_read = flight.body_read

    def _decide(
        self,
        verdict: Verdict,
        *,
        response: httpx.Response | None,
        cause: Exception | None,
        during_body: bool,
    ) -> Decision:
        plan = self._plan
        assert plan is not None
        flight = self._flights.pop(plan)
        if verdict.kind == "success":
            self.effects.append(RecordLatency(self._clock.monotonic() - flight.started))
            if self._hedged_copies:
                self._winner = plan.number
                self._abandon_others()
                self._emit_hedge(plan.number, "won")
            return super()._decide(verdict, response=response, cause=cause, during_body=during_body)
        if self._flights and verdict.kind != "permanent":
            # Another copy may still answer: this failure does not end the call.
            self._last_response, self._last_cause = response, cause
            self._verdict, self._during_body = verdict, during_body
            # (a "key in use" answer while another copy runs is about that copy, whose
            # own outcome will say whether the server acted)
            if may_have_acted(verdict, response) and verdict.reason != "idempotency_key_in_use":
                self._processed = "maybe"
            return AwaitOthers(plan)
        self._abandon_others()
        if self._hedged_copies:
            self._winner = plan.number
            if verdict.kind == "permanent" and response is not None:
                # (a final answer, such as a 404, wins too; a copy that failed here, with
                # no answer, won nothing: review88)
                self._emit_hedge(plan.number, "won")
        return super()._decide(verdict, response=response, cause=cause, during_body=during_body)

    def _key_may_be_in_use(self) -> bool:
        # (another copy still in flight may be running under the key too)
        return len(self._flights) > 1 or super()._key_may_be_in_use()

    def attempt_abandoned(self, interrupted_by: str | None = None) -> None:
        if self.state == "done":
            return
        current = self._permit
        for flight in self._flights.values():
            if flight.permit is not None and flight.permit is not current and flight.permit.probe:
                self.effects.append(ReleaseProbe(flight.permit))
        super().attempt_abandoned(interrupted_by)  # (its event counts the copies in flight)
        self._flights.clear()

    def _in_flight(self) -> list[int]:
        return [plan.number for plan in self._flights]

    def _abandon_others(self) -> None:
        """Every copy still in flight lost: record it, learn its latency so far, free it.

        The lost copies go into the history before the deciding copy's record, which
        stays last (the call's outcome, and the wait before a retry, are read from it).
        """
        now = self._clock.monotonic()
        lost: list[AttemptRecord] = []
        for flight in self._flights.values():
            elapsed = now - flight.started
            lost.append(
                AttemptRecord(
                    attempt=flight.plan.number,
                    outcome=LOST,
                    status=None,
                    exception=None,
                    started=flight.started - self._started,
                    elapsed=elapsed,
                    timeout=flight.plan.timeout,
                )
            )
            self.effects.append(RecordLatency(elapsed, censored=True))
            if flight.permit is not None and flight.permit.probe:
                self.effects.append(ReleaseProbe(flight.permit))
            if self._observed:
                # A lost copy was sent too: it ends as an attempt (metrics count it, a
                # tracer ends its span) before the hedge event that says it lost.
                super()._emit("attempt", LOST, None, attempt=flight.plan.number)
            self._emit_hedge(flight.plan.number, "lost")
        self._flights.clear()
        if lost:
            self._history[-1:-1] = lost

    # -- reporting -------------------------------------------------------------------------

    def _report(self, *, error: ApiError | None, now: float | None = None) -> CallReport:
        report = super()._report(error=error, now=now)
        if not self._hedged_copies:
            return report
        return report._replace(hedges=len(self._hedged_copies), winner=self._winner)

    def _emit(
        self,
        kind: Literal["attempt", "retry", "success", "hedge"],
        outcome: str,
        status: int | None,
        *,
        wait: float = 0.0,
        exception: str | None = None,
        attempt: int | None = None,
        reason: str = "",
    ) -> None:
        """As :meth:`Call._emit`, but an ``attempt`` or ``retry`` event names the copy it
        is about: with copies in flight, the history's length is not that copy's number
        (a copy that wins is recorded before the copies it beat are)."""
        if attempt is None and kind in ("attempt", "retry"):
            plan = self._plan
            assert plan is not None
            attempt = plan.number
        super()._emit(
            kind, outcome, status, wait=wait, exception=exception, attempt=attempt, reason=reason
        )

    def _emit_hedge(self, number: int, outcome: str, reason: str = "") -> None:
        if self._observed:
            if outcome in ("won", "lost") and number not in self._hedged_copies:
                reason = FIRST_COPY  # (the round's own attempt, no hedge: see observe)
            super()._emit("hedge", outcome, None, attempt=number, reason=reason)
