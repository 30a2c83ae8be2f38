"""Call: the sans-I/O state machine that makes every retry decision.

A shell (``RetryTransport`` and friends) drives one :class:`Call` per request::

    call = Call(request, policy=policy, clock=clock, dependency=origin)
    while True:
        plan = call.begin_attempt()           # AttemptPlan, or Fail
        ... send with plan.timeout, read the body ...
        decision = call.attempt_returned(response)   # or attempt_raised(exc, ...)
        # Succeed -> return; Fail -> give up; Wait -> sleep decision.seconds, loop

The Call never touches a socket and never sleeps; it reads time from the
injected clock. Methods called out of order raise ``RuntimeError``: the
states are ``ready`` -> ``attempting`` -> ``ready`` (after a Wait) or ``done``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import httpx

from retrysafe.classify import (
    Verdict,
    classify_exception,
    classify_response,
    health,
    may_have_acted,
)
from retrysafe.clock import Clock
from retrysafe.decisions import AttemptPlan, CallReport, Decision, Fail, Succeed, Wait
from retrysafe.errors import (
    ApiError,
    AttemptRecord,
    CircuitOpen,
    DeadlineExceeded,
    RetryAfterTooLong,
)
from retrysafe.failures import describe_body, error_class_for
from retrysafe.governor import DependencyGuard, Permit, Transition
from retrysafe.nesting import RetryScope
from retrysafe.observe import Observer, RetryEvent
from retrysafe.policy import RetryPolicy
from retrysafe.redact import Redactor, redact_url
from retrysafe.timing import Deadline, backoff_delay

__all__ = ["IDEMPOTENCY_HEADER", "Call", "default_dependency", "is_replayable"]

IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Waits the server asked for because we were too fast: they do not spend the retry budget.
_RATE_LIMIT_REASONS = frozenset({"rate_limited", "idempotency_key_in_use"})
#: Give-up reasons that mean this call, or one nested in it, already retried.
_RETRIED_REASONS = frozenset({"attempts_exhausted", "nested_retry_exhausted"})
#: A half-open probe that never reports frees its slot after at most this long.
_MAX_PROBE_LEASE = 60.0


def default_dependency(url: httpx.URL) -> str:
    """The dependency a URL belongs to by default: its origin, ``scheme://host:port``."""
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    return f"{url.scheme}://{url.host}:{port}"


def is_replayable(request: httpx.Request) -> bool:
    """Whether the request's body can be sent again byte for byte (bytes, not a stream)."""
    return isinstance(request.stream, httpx.ByteStream)


class Call:
    """Every decision of one retrying HTTP call, free of I/O.

    It decides whether an attempt may start and with what timeout, what an
    outcome means, whether it is safe and worth repeating, how long to wait,
    and which error to give up with.
    """

    def __init__(
        self,
        request: httpx.Request,
        *,
        policy: RetryPolicy,
        clock: Clock,
        dependency: str | None = None,
        scope_deadline: Deadline | None = None,
        observer: Observer | None = None,
        guard: DependencyGuard | None = None,
        retry_scope: RetryScope | None = None,
        nested_attempts: int | None = 2,
    ) -> None:
        self.policy = policy
        self.method = request.method.upper()
        self._request_url = request.url
        self.dependency = dependency or default_dependency(request.url)
        self.idempotency_key = request.headers.get(IDEMPOTENCY_HEADER)
        self.replayable = is_replayable(request)
        self._clock = clock
        self._request = request
        self._observer = observer or Observer()
        self._started = clock.monotonic()
        self.deadline = Deadline.after(policy.deadline, clock).tighter(scope_deadline)
        self.state: Literal["ready", "attempting", "done"] = "ready"
        self._guard = guard
        # The nesting guard (None: off) caps a nested call's attempts, and stops a call
        # from retrying a failure that a call nested in its attempt already retried.
        self._scope = retry_scope if nested_attempts is not None else None
        nested = self._scope is not None and self._scope.nested
        #: Attempts this call may make: fewer when nested inside another retrying call.
        self.max_attempts = policy.attempts
        if nested and nested_attempts is not None:
            self.max_attempts = min(policy.attempts, nested_attempts)
        self._history: list[AttemptRecord] = []
        self._plan: AttemptPlan | None = None
        self._permit: Permit | None = None
        self._pacing_reserved = False
        self._attempt_started = 0.0
        #: A wait was granted for the next attempt: it may start with less than
        #: min_attempt_time left (a sleep can overshoot by a little).
        self._promised = False
        self._last_response: httpx.Response | None = None
        self._last_cause: Exception | None = None
        #: Sticky across attempts: some attempt may have been acted on by the server.
        self._may_have_processed = False

    @functools.cached_property
    def url(self) -> str:
        """The request's URL with secrets redacted (computed once, when first needed)."""
        return redact_url(self._request_url)

    @functools.cached_property
    def _redactor(self) -> Redactor:
        return Redactor.for_request(self._request)

    # -- the shell's three calls ------------------------------------------------------

    def begin_attempt(self) -> AttemptPlan | Wait | Fail:
        """Plan the next attempt; or wait out a shared cooldown or pacing slot first;
        or give up because the deadline, a cooldown or an open circuit forbids it.
        """
        self._require("ready", "begin_attempt")
        remaining = self.deadline.remaining()
        needed = 0.0 if self._promised else self.policy.min_attempt_time
        if remaining <= 0 or remaining < needed:
            return self._deadline_exceeded(
                cause=self._last_cause, response=self._last_response, reason="deadline_exceeded"
            )
        guard = self._guard
        if guard is not None and guard.limiter is not None:
            hold = self._limiter_wait(guard)
            if hold is not None:
                return hold
        timeout = self.deadline.attempt_timeout(self.policy.attempt_timeout)
        if guard is not None and guard.breaker is not None:
            permit = guard.breaker.acquire(probe_lease=min(timeout, _MAX_PROBE_LEASE))
            self._emit_transition(permit.transition)
            if not permit.allowed:
                return self._circuit_open(permit)
            self._permit = permit
        if guard is not None and guard.budget is not None and not self._history:
            guard.budget.record_first_attempt()
        if self._scope is not None:
            self._scope.nested_gave_up = False
        self._promised = False
        self._plan = AttemptPlan(
            number=len(self._history) + 1,
            timeout=timeout,
            cut_by_deadline=timeout < self.policy.attempt_timeout,
        )
        self._attempt_started = self._clock.monotonic()
        self.state = "attempting"
        return self._plan

    def _limiter_wait(self, guard: DependencyGuard) -> Wait | Fail | None:
        """A Wait for a dependency-wide cooldown or a pacing slot, a Fail if it is too long."""
        assert guard.limiter is not None
        cooldown = guard.limiter.cooldown_remaining()
        if cooldown > 0:
            wait = self._hinted_wait(cooldown)
            if wait is None:
                return self._give_up(
                    RetryAfterTooLong,
                    "cooldown",
                    self._last_outcome("cooldown"),
                    self._last_response,
                    self._last_cause,
                    True,
                    {"retry_after": cooldown},
                )
            self._promised = True
            return Wait(wait)
        if self._pacing_reserved:
            self._pacing_reserved = False
            return None
        pace = guard.limiter.reserve()
        if pace <= 0:
            return None
        if not self.deadline.allows(pace, self.policy.min_attempt_time):
            return self._deadline_exceeded(
                cause=self._last_cause, response=self._last_response, reason="deadline_insufficient"
            )
        self._pacing_reserved = True
        self._promised = True
        return Wait(pace)

    def attempt_abandoned(self) -> None:
        """The attempt ended with no outcome (the caller cancelled it, or a rule raised).

        Frees what the attempt held, such as the breaker's single half-open probe
        slot, so the dependency is not blocked until the probe's lease runs out.
        """
        if self.state != "attempting":
            return
        self.state = "done"
        guard = self._guard
        if guard is not None and guard.breaker is not None and self._permit is not None:
            guard.breaker.release(self._permit)
        self._permit = None

    def attempt_returned(self, response: httpx.Response) -> Decision:
        """The attempt produced a complete response (body read)."""
        self._require("attempting", "attempt_returned")
        verdict = classify_response(
            response, self.policy, keyed=self.idempotency_key is not None, now=self._clock.time()
        )
        self._record(verdict, status=response.status_code, exception=None)
        self._inform_governor(verdict, response.status_code)
        return self._decide(verdict, response=response, cause=None, during_body=False)

    def attempt_raised(self, exc: Exception, *, during_body: bool) -> Decision:
        """The attempt failed with ``exc``; ``during_body`` if headers had already arrived."""
        self._require("attempting", "attempt_raised")
        verdict = classify_exception(exc, during_body=during_body)
        self._record(verdict, status=None, exception=type(exc).__name__)
        self._inform_governor(verdict, None)
        return self._decide(verdict, response=None, cause=exc, during_body=during_body)

    # -- decisions ----------------------------------------------------------------------

    def _decide(
        self,
        verdict: Verdict,
        *,
        response: httpx.Response | None,
        cause: Exception | None,
        during_body: bool,
    ) -> Decision:
        self._last_response, self._last_cause = response, cause
        if verdict.kind != "success" and may_have_acted(verdict, response):
            self._may_have_processed = True
        if verdict.kind == "success":
            self.state = "done"
            report = self._report(error=None)
            self._emit("success", verdict, response)
            if response is None:  # pragma: no cover - success always carries a response
                raise RuntimeError("a success verdict needs a response")
            response.extensions["retrysafe"] = report
            return Succeed(response, report)
        self.state = "done"
        if verdict.kind == "permanent":
            return self._fail(
                verdict, verdict.reason, response, cause, during_body, retryable=False
            )
        assert self._plan is not None
        if isinstance(cause, httpx.TimeoutException) and self._plan.cut_by_deadline:
            return self._deadline_exceeded(
                cause=cause, response=response, reason="deadline_exceeded"
            )
        if not self._safe_to_repeat(verdict, response):
            return self._fail(
                verdict, "unsafe_to_repeat", response, cause, during_body, retryable=False
            )
        if self._scope is not None and self._scope.nested_gave_up:
            # A call nested in this attempt already retried this failure; don't multiply it.
            return self._fail(
                verdict, "nested_retry_exhausted", response, cause, during_body, retryable=True
            )
        if len(self._history) >= self.max_attempts:
            return self._fail(
                verdict, "attempts_exhausted", response, cause, during_body, retryable=True
            )
        wait = self._wait_for(verdict)
        if wait is None:
            if verdict.after is not None:
                return self._retry_after_too_long(verdict, response, cause)
            return self._fail(
                verdict, "deadline_insufficient", response, cause, during_body, retryable=True
            )
        refusal = self._governor_refusal(verdict, wait)
        if refusal is not None:
            return self._fail(verdict, refusal, response, cause, during_body, retryable=True)
        self._history[-1] = dataclasses.replace(self._history[-1], wait=wait)
        self._emit("retry", verdict, response, wait=wait)
        self._promised = True
        self.state = "ready"
        return Wait(wait)

    def _hinted_wait(self, hint: float) -> float | None:
        """The wait for a server's hint: the hint plus jitter on top, or None if too long.

        Jitter is never subtracted and never reaches into the time kept for the
        next attempt, so clients told the same time spread out without any
        coming back early or running out of time.
        """
        policy = self.policy
        if policy.max_retry_after is not None and hint > policy.max_retry_after:
            return None
        if not self.deadline.allows(hint, policy.min_attempt_time):
            return None
        room = self.deadline.remaining() - policy.min_attempt_time - hint
        return hint + min(policy.retry_after_jitter * self._clock.random(), max(0.0, room))

    def _safe_to_repeat(self, verdict: Verdict, response: httpx.Response | None) -> bool:
        """DESIGN §3: repeat only what cannot do the work twice, with bytes we can resend."""
        if not self.replayable:
            # The stream is spent once the request was written; only a never-sent one is intact.
            return response is None and verdict.processed == "no"
        return (
            self.method in self.policy.idempotent_methods
            or self.idempotency_key is not None
            or verdict.processed == "no"
        )

    def _wait_for(self, verdict: Verdict) -> float | None:
        """Seconds to wait before the next attempt, or None if the deadline forbids it."""
        policy = self.policy
        if verdict.after is not None:
            return self._hinted_wait(verdict.after)
        retries_so_far = len(self._history) - 1
        wait = backoff_delay(
            retries_so_far, policy.backoff_base, policy.backoff_cap, self._clock.random()
        )
        if not self.deadline.allows(wait, policy.min_attempt_time):
            return None
        return wait

    # -- load protection ----------------------------------------------------------------

    def _inform_governor(self, verdict: Verdict, status: int | None) -> None:
        """Tell the breaker how healthy the dependency looked, and start any 429 cooldown."""
        guard = self._guard
        if guard is None:
            return
        if guard.breaker is not None and self._permit is not None:
            open_for = verdict.after if status == 503 else None
            transition = guard.breaker.record(
                self._permit, health(verdict, status), open_for=open_for
            )
            self._emit_transition(transition)
            self._permit = None
        if guard.limiter is not None and status == 429 and verdict.after is not None:
            guard.limiter.start_cooldown(verdict.after)

    def _governor_refusal(self, verdict: Verdict, wait: float) -> str | None:
        """Why the dependency's governor refuses this retry, or None if it allows it."""
        guard = self._guard
        if guard is None:
            return None
        if guard.breaker is not None:
            open_until = guard.breaker.open_until()
            if open_until is not None and open_until > self._clock.monotonic() + wait:
                return "circuit_open"
        rate_limited = verdict.reason in _RATE_LIMIT_REASONS
        if guard.budget is not None and not rate_limited and not guard.budget.try_spend():
            return "budget_exhausted"
        return None

    def _circuit_open(self, permit: Permit) -> Fail:
        retry_after = None
        if permit.retry_at is not None:
            retry_after = max(0.0, permit.retry_at - self._clock.monotonic())
        return self._give_up(
            CircuitOpen,
            "circuit_open",
            self._last_outcome("circuit_open"),
            self._last_response,
            self._last_cause,
            True,
            {"retry_after": retry_after},
        )

    def _emit_transition(self, transition: Transition | None) -> None:
        if transition is None:
            return
        self._observer.emit(
            RetryEvent(
                kind="circuit",
                dependency=self.dependency,
                method=self.method,
                url=self.url,
                attempt=len(self._history),
                reason=f"{transition.before}->{transition.after}",
                status=None,
                elapsed=self._clock.monotonic() - self._started,
            )
        )

    def _last_outcome(self, default: str) -> str:
        return self._history[-1].reason if self._history else default

    # -- giving up ---------------------------------------------------------------------

    def _fail(
        self,
        verdict: Verdict,
        reason: str,
        response: httpx.Response | None,
        cause: Exception | None,
        during_body: bool,
        *,
        retryable: bool,
    ) -> Fail:
        error_class, extra = error_class_for(
            verdict,
            response,
            cause,
            during_body=during_body,
            may_have_processed=self._may_have_processed,
        )
        return self._give_up(error_class, reason, verdict.reason, response, cause, retryable, extra)

    def _retry_after_too_long(
        self, verdict: Verdict, response: httpx.Response | None, cause: Exception | None
    ) -> Fail:
        assert verdict.after is not None
        return self._give_up(
            RetryAfterTooLong,
            "retry_after_too_long",
            verdict.reason,
            response,
            cause,
            retryable=True,
            extra={"retry_after": verdict.after},
        )

    def _deadline_exceeded(
        self, *, cause: Exception | None, response: httpx.Response | None, reason: str
    ) -> Fail:
        outcome = self._last_outcome(reason)
        return self._give_up(DeadlineExceeded, reason, outcome, response, cause, True, {})

    def _give_up(
        self,
        error_class: type[ApiError],
        reason: str,
        outcome: str,
        response: httpx.Response | None,
        cause: Exception | None,
        retryable: bool,
        extra: dict[str, Any],
    ) -> Fail:
        self.state = "done"
        body, excerpt = (None, "") if response is None else describe_body(response, self._redactor)
        error = error_class(
            reason=reason,
            outcome=outcome,
            method=self.method,
            url=self.url,
            retryable=retryable,
            status=response.status_code if response is not None else None,
            body=body,
            body_excerpt=excerpt,
            attempts=len(self._history),
            history=tuple(self._history),
            response=response,
            elapsed=self._clock.monotonic() - self._started,
            may_have_processed=self._may_have_processed,
            **extra,
        )
        report = self._report(error=error)
        if response is not None:
            response.extensions["retrysafe"] = report
        # Tell the enclosing call only when retrying happened here or deeper down.
        retried = len(self._history) > 1 or reason in _RETRIED_REASONS
        if self._scope is not None and self._scope.parent is not None and retryable and retried:
            self._scope.parent.nested_gave_up = True
        self._observer.emit(
            RetryEvent(
                kind="failure",
                dependency=self.dependency,
                method=self.method,
                url=self.url,
                attempt=len(self._history),
                reason=reason,
                status=error.status,
                elapsed=error.elapsed,
                error=error_class.__name__,
                outcome=outcome,
            ),
            body_excerpt=excerpt,
        )
        return Fail(error, response, cause, report)

    # -- bookkeeping -------------------------------------------------------------------

    def _record(self, verdict: Verdict, *, status: int | None, exception: str | None) -> None:
        assert self._plan is not None
        now = self._clock.monotonic()
        self._history.append(
            AttemptRecord(
                number=self._plan.number,
                reason=verdict.reason,
                status=status,
                exception=exception,
                started=self._attempt_started - self._started,
                elapsed=now - self._attempt_started,
                timeout=self._plan.timeout,
            )
        )

    def _report(self, *, error: ApiError | None) -> CallReport:
        return CallReport(
            attempts=len(self._history),
            waits=tuple(record.wait for record in self._history[:-1]),
            elapsed=self._clock.monotonic() - self._started,
            idempotency_key=self.idempotency_key,
            dependency=self.dependency,
            history=tuple(self._history),
            error=error,
        )

    def _emit(
        self,
        kind: Literal["retry", "success"],
        verdict: Verdict,
        response: httpx.Response | None,
        *,
        wait: float = 0.0,
    ) -> None:
        self._observer.emit(
            RetryEvent(
                kind=kind,
                dependency=self.dependency,
                method=self.method,
                url=self.url,
                attempt=len(self._history),
                reason=verdict.reason,
                status=response.status_code if response is not None else None,
                wait=wait,
                elapsed=self._clock.monotonic() - self._started,
            )
        )

    def _require(self, state: str, action: str) -> None:
        if self.state != state:
            raise RuntimeError(
                f"Call.{action}() needs state {state!r}, but the call is {self.state!r}"
            )

    def __repr__(self) -> str:
        return (
            f"Call({self.method} {self.url}, state={self.state!r}, attempts={len(self._history)})"
        )
