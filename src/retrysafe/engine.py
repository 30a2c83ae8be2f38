"""Call: the sans-I/O state machine that makes every retry decision of one call.

It takes facts in and gives decisions out; it sends nothing, sleeps never and
calls nothing outward (no governor, no hooks, no logging). A shell drives it::

    call = Call(request, policy=policy, clock=clock)
    step = call.start_attempt()                  # the governor's Admission in
    while True:
        # AttemptPlan -> send; then call.attempt_returned(plan, response)
        #                       or call.attempt_raised(plan, exc, during_body=...)
        # ReadBody    -> read the body; then call.attempt_returned(plan, response)
        #                or, if that read fails, call.attempt_raised(plan, exc,
        #                during_body=True, answer=response)
        # AskRetry    -> ask the governor; then call.retry_answered(answer)
        # Wait        -> sleep; then call.start_attempt(admission)
        # Succeed / Fail -> the call is over
    effects = call.take_effects()               # after each step: apply them

States: ``ready`` (may start an attempt) -> ``attempting`` (an attempt is out)
-> ``asking`` (waiting for the governor's answer to a retry) -> ``ready`` after
a Wait, or ``done``. A method called out of order raises ``RuntimeError``.

What it decides: whether an attempt may start and with what timeout, what an
outcome means, whether a repeat is safe and worth it, how long to wait, and
which error to give up with. The arithmetic lives in :mod:`retrysafe.waits`,
the errors are built by :func:`retrysafe.failures.give_up_error`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

import httpx

from retrysafe.attempt_plan import plan_attempt
from retrysafe.classify import (
    CLIENTS_OWN_QUEUE,
    SUCCESS,
    TIMEOUT_REASONS,
    Processed,
    Verdict,
    classify_exception,
    classify_response,
    headers_decide,
    health,
    may_have_acted,
    retryable_later,
)
from retrysafe.clock import Clock
from retrysafe.decisions import (
    ERROR_BODY_READ_AT_MOST,
    OPEN_ADMISSION,
    Admission,
    AskRetry,
    AttemptPlan,
    CallReport,
    Decision,
    DeferFailure,
    Effect,
    EmitEvent,
    Fail,
    ReadBody,
    RecordHealth,
    RefundBudget,
    ReleasePacing,
    ReleaseProbe,
    RetryAnswer,
    RetryEnded,
    StartCooldown,
    Succeed,
    Wait,
)
from retrysafe.errors import ApiError, AttemptRecord
from retrysafe.governor.breaker import CLOSED_PERMIT, Permit
from retrysafe.hints import RateLimitAnnouncement, announced_limit
from retrysafe.observe import RetryEvent
from retrysafe.policy import RetryPolicy
from retrysafe.redact import Redactor, redact_url
from retrysafe.request_facts import (
    KEY_SENT_BEFORE_EXTENSION,
    default_dependency,
    idempotency_key_of,
    replayable_body,
)
from retrysafe.timing import Deadline
from retrysafe.waits import backoff_wait, hinted_wait, safe_to_repeat

if TYPE_CHECKING:  # loaded by the first call that gives up (see _stop)
    from retrysafe.failures import StopKind

__all__ = ["HEALTHY_WHILE_CLOSED", "Call"]

#: Waits the server asked for because we were too fast: they do not spend the retry budget.
_RATE_LIMIT_REASONS: Final = frozenset({"rate_limited", "idempotency_key_in_use"})
#: Retries that spend no retry budget: those the server asked for (above), and those of a
#: request the client's own queue held back (a pool timeout, an HTTP/2 stream limit). The
#: budget bounds the load retries add to a dependency; a request it never saw adds none
#: when sent again, and a burst larger than the pool must not spend the tokens a failing
#: server's retries need (its calls then ended in BudgetExhausted, blaming the server).
_FREE_RETRY_REASONS: Final = _RATE_LIMIT_REASONS | CLIENTS_OWN_QUEUE
#: Give-up reasons that mean this call, or one nested in it, already retried.
_RETRIED_REASONS: Final = frozenset({"attempts_exhausted", "nested_retry_exhausted"})
#: The effect of a call that succeeded at once while the breaker was closed: shells may
#: apply it by identity, on a short path (see ``Drive.returned``).
HEALTHY_WHILE_CLOSED: Final = RecordHealth(CLOSED_PERMIT, "healthy", None)
#: The effect of a granted retry that will never be sent (see Call._refund_unsent_retry).
REFUND_ONE_RETRY: Final = RefundBudget()
#: The effects of a failed call's retry that ended: failed again, or succeeded (they
#: decide the failures the breaker deferred; see DeferFailure).
RETRY_FAILED: Final = RetryEnded(True)
RETRY_SUCCEEDED: Final = RetryEnded(False)


class Call:
    """Every decision of one retrying HTTP call, free of I/O.

    Facts it is given: the request, the policy, a clock to read (never to sleep
    on), the deadline it shares with an enclosing scope or redirect chain, how
    many retries that chain already used, whether it runs nested inside another
    retrying call, and whether the caller streams the body.
    """

    # Defaults every call starts from, kept on the class so a new call sets only what
    # differs (a call is made for every request: each assignment saved is time saved).
    _plan: AttemptPlan | None = None
    _permit: Permit | None = None
    _pacing_held = False
    #: The longest cooldown the next attempt waited out (seconds; see cooldown_waited).
    _cooldown_waited = 0.0
    #: The paced slot held (Admission.slot), to name it if it is given back.
    _pacing_slot = 0.0
    _attempt_started = 0.0
    #: The dependency answered other calls while the attempt in flight waited (a fact
    #: the shell gives: see answered_during_attempt).
    _answered_meanwhile = False
    #: The body of the response in hand was read because the engine asked (ReadBody).
    _body_read = False
    #: A wait was granted for the next attempt: it may start with less than
    #: min_attempt_time left (a sleep can overshoot by a little).
    _promised = False
    #: The granted wait's retry spent a budget token, and the retry has not been sent yet.
    _spent_unsent = False
    #: How long the attempt in flight waited for a connection (see attempt_queued).
    _queued = 0.0
    #: How late the event loop let the attempt in flight end (see attempt_ended_late).
    _late = 0.0
    _verdict: Verdict | None = None
    _last_response: httpx.Response | None = None
    _last_cause: Exception | None = None
    _during_body = False
    _nested_gave_up = False
    #: This call already reported an unhealthy outcome to the breaker.
    _failed_before = False
    #: Its first unhealthy outcome, held back from the breaker while a retry may still
    #: save the call (see _inform_governor); reported when the call ends without one.
    _unreported_failure: RecordHealth | None = None
    #: Sticky across attempts: whether some attempt may have been acted on by the server.
    _processed: Processed = "no"
    _url: str | None = None
    state: Literal["ready", "attempting", "asking", "done"] = "ready"

    def __init__(
        self,
        request: httpx.Request,
        *,
        policy: RetryPolicy,
        clock: Clock,
        dependency: str | None = None,
        deadline: Deadline | None = None,
        retries_used: int = 0,
        max_attempts: int | None = None,
        stream: bool = False,
        observed: bool = True,
        started: float | None = None,
        replayable: bool | None = None,
        elapsed_before: float = 0.0,
        returns_answers: bool = False,
    ) -> None:
        self.policy = policy
        self.method: str = request.method
        self._request = request
        self.dependency: str = dependency or default_dependency(request.url)
        self.idempotency_key = idempotency_key_of(request)
        #: An earlier run of this call's operation sent its key (a resumed journal
        #: operation): its request may still be running on the server.
        self._key_sent_before = request.extensions.get(KEY_SENT_BEFORE_EXTENSION) is True
        if self._key_sent_before:
            # ...so the server may have acted on it, whatever this run's attempts get: a
            # refused connection now does not make the operation surely undone.
            self._processed = "maybe"
        #: The body can be sent again byte for byte (bytes, not a one-shot stream). Read
        #: before the first attempt is sent: sending a one-shot stream may leave it
        #: replaced by the bytes it held (so a Call made for an attempt in flight is told).
        self.replayable = replayable_body(request.stream) if replayable is None else replayable
        self._clock = clock
        #: When the call started (default now): a Call made for an attempt already in
        #: flight (see adopt_attempt) started when that attempt did.
        self._started = clock.monotonic() if started is None else started
        #: Where the call's reported time counts from: its start, less the time a redirect
        #: chain's earlier hops took (``elapsed_before``; the call is the whole chain).
        self._reported_from = self._started - elapsed_before
        self.deadline = deadline if deadline is not None else Deadline.after(policy.deadline, clock)
        #: Attempts this call may make: fewer when nested, or when an earlier hop of a
        #: redirect chain already retried (one retry allowance serves the whole chain).
        limit = policy.attempts if max_attempts is None else min(policy.attempts, max_attempts)
        self.max_attempts = max(1, limit - retries_used)
        #: Retries the redirect chain's earlier hops used (the error tells of them).
        self._earlier_retries = retries_used
        # (compared as sums: at - started may round below a deadline that equals
        # min_attempt_time, while started + deadline >= started + min is exact)
        if self.deadline.at >= self._started + policy.min_attempt_time:
            # The first attempt may start even if the clock moved on a little since the
            # call began with enough time for it (a policy whose deadline is its
            # min_attempt_time sends); a call that began with too little does not start.
            self._promised = True
        self._stream = stream
        #: The answer a call ends on goes back to the caller as the response itself, which
        #: the caller reads (a drop-in transport, the requests and aiohttp adapters with
        #: raise_on_status=False); otherwise it becomes an error that carries its body
        #: (retrysafe.Client, the adapters raising on status).
        self._returns_answers = returns_answers
        self._observed = observed
        self._history: list[AttemptRecord] = []
        self.effects: list[Effect] = []

    @property
    def url(self) -> str:
        """The request's URL with secrets redacted (computed once, when first needed)."""
        if self._url is None:
            self._url = redact_url(self._request.url)
        return self._url

    @property
    def attempts(self) -> int:
        """Attempts made so far."""
        return len(self._history)

    def elapsed_so_far(self) -> float:
        """Seconds since the call started, as its events and report count them (a redirect
        chain's from its first hop)."""
        return self._clock.monotonic() - self._reported_from

    @property
    def pacing_held(self) -> bool:
        """A paced slot is reserved for the next attempt: the governor must not reserve another."""
        return self._pacing_held

    @property
    def cooldown_waited(self) -> float:
        """The longest cooldown (seconds) the next attempt already waited out (0: none):
        the governor lets it go through a new cooldown up to twice as long, which another
        429 started meanwhile (see ``governor.guard.waits_out``)."""
        return self._cooldown_waited

    def take_effects(self) -> list[Effect]:
        """What the shell must do on the side since the last call: apply in order.

        (``effects`` is the outbox itself: a shell may test it for emptiness first.)
        """
        effects, self.effects = self.effects, []
        return effects

    def probe_lease(self) -> float:
        """How long a half-open probe permit for the next attempt may be held."""
        return self.deadline.attempt_timeout(self.policy.attempt_timeout)

    # -- starting an attempt -----------------------------------------------------------

    def start_attempt(self, admission: Admission = OPEN_ADMISSION) -> AttemptPlan | Wait | Fail:
        """Plan the next attempt, given the governor's ``admission``; or wait out a
        cooldown or a pacing slot first; or give up when time or the breaker forbids it.
        """
        if self.state != "ready":
            self._out_of_order("ready", "start_attempt")
        remaining = self.deadline.remaining()
        if remaining <= 0 or (not self._promised and remaining < self.policy.min_attempt_time):
            self._return_admission(admission)
            return self._stop("deadline", "deadline_exceeded")
        if admission.cooldown > 0:
            self._return_admission(admission)
            wait = hinted_wait(admission.cooldown, self.policy, self.deadline, self._clock.random())
            if wait is None:
                return self._stop(
                    "cooldown",
                    "cooldown",
                    retry_after=admission.cooldown,
                    detail=self._too_long(admission.cooldown, admission.detail),
                )
            self._promised = True
            if admission.cooldown > self._cooldown_waited:
                self._cooldown_waited = admission.cooldown
            return Wait(wait)
        if admission.pacing > 0:
            if admission.queue_full:  # no slot reserved: none to wait for, none to give back
                return self._stop(
                    "pacing", "pacing", retry_after=admission.pacing, detail=admission.detail
                )
            self._pacing_held = True
            self._pacing_slot = admission.slot
            if not self.deadline.allows(admission.pacing, self.policy.min_attempt_time):
                self._return_admission(admission)
                return self._slot_too_late(admission.pacing, admission.detail)
            self._promised = True
            return Wait(admission.pacing)
        permit = admission.permit
        if permit is not None and not permit.allowed:
            self._return_admission(admission)  # a paced slot held for this attempt goes back
            retry_after = None
            if permit.retry_at is not None:
                retry_after = max(0.0, permit.retry_at - self._clock.monotonic())
            return self._stop(
                "circuit", "circuit_open", retry_after=retry_after, detail=admission.detail
            )
        self._pacing_held = False
        self._cooldown_waited = 0.0
        self._permit = permit
        self._promised = False
        self._spent_unsent = False
        self._queued = 0.0
        self._late = 0.0
        self._nested_gave_up = False
        plan = plan_attempt(
            len(self._history) + 1, self.policy.attempt_timeout, remaining, not self._stream
        )
        self._plan = plan
        self._body_read = False
        self._attempt_started = self._clock.monotonic()
        self._answered_meanwhile = False
        self.state = "attempting"
        return plan

    def adopt_attempt(self, plan: AttemptPlan, permit: Permit | None, started: float) -> None:
        """Take over the first attempt, planned and sent without a Call (see
        :mod:`retrysafe.first_attempt`), as if :meth:`start_attempt` had returned
        ``plan`` at ``started`` under the breaker's ``permit``."""
        if self.state != "ready" or self._history or plan.number != 1:
            raise RuntimeError("Call.adopt_attempt() takes over a fresh call's first attempt only")
        self._permit = permit
        self._plan = plan
        self._body_read = False
        self._attempt_started = started
        self._answered_meanwhile = False
        self._promised = False
        self.state = "attempting"

    def _return_admission(self, admission: Admission) -> None:
        """Give back what the governor reserved for an attempt that will not start."""
        if self._pacing_held or (admission.pacing > 0 and not admission.queue_full):
            slot = self._pacing_slot if self._pacing_held else admission.slot
            self._pacing_held = False
            self.effects.append(ReleasePacing(slot))
        if admission.permit is not None and admission.permit.allowed:
            self.effects.append(ReleaseProbe(admission.permit))

    # -- an attempt's outcome ----------------------------------------------------------

    def attempt_returned(self, plan: AttemptPlan, response: httpx.Response) -> Decision:
        """The attempt under ``plan`` got ``response``: its body read (a success of a
        call that does not stream, see :meth:`AttemptPlan.reads_at_once`; or after a
        :class:`ReadBody`), else only its headers.

        A streamed success settled by its headers reaches the caller unread. When the
        caller gets the answer itself (a drop-in transport), so does an error answer the
        headers settle that the call ends on: the caller reads its body, with its own
        timeouts, as without retrysafe (one the call sends again is closed unread).
        Anything else first needs the body (ReadBody): an error answer (for the error's
        body, or for a verdict the body may change), or a rule's verdict.
        """
        if plan is not self._plan or self.state != "attempting":
            self._out_of_order("attempting", "attempt_returned", plan)
        if self._body_read or response.is_closed:  # (its body read: judged with it)
            verdict = self._classify(response)
        else:
            on_headers = self._verdict_on_headers(response)
            if on_headers is None:
                self._body_read = True
                return ReadBody(plan, self._body_read_at_most(plan, response))
            verdict = on_headers
        permit = self._permit
        # (an attempt's permit is an allowed one: a probe, or a closed period's permit)
        if (
            verdict is SUCCESS
            and (permit is None or permit is CLOSED_PERMIT or not permit.probe)
            and not self._failed_before
        ):
            return self._succeed(plan, response)
        self._record(verdict, status=response.status_code, exception=None)
        self._inform_governor(verdict, response.status_code, response)
        return self._decide(verdict, response=response, cause=None, during_body=False)

    def _succeed(self, plan: AttemptPlan, response: httpx.Response) -> Succeed:
        """The common end of a call, on one short path: a success judged by its status
        alone, with nothing for the breaker but one healthy call (or no breaker at all).

        The general path (:meth:`_inform_governor`, :meth:`_decide`) reaches the same
        decision and effects; a call is made for every request, so the usual case is
        spared its questions, and reads the clock once for its record and report.
        """
        now = self._clock.monotonic()
        if self._permit is not None:
            self.effects.append(HEALTHY_WHILE_CLOSED)
            self._permit = None
        if self._unreported_failure is not None:
            self._unreported_failure = None  # (taken back: the call is healthy)
            self.effects.append(RETRY_SUCCEEDED)
        self._record(SUCCESS, status=response.status_code, exception=None, now=now)
        announced = announced_limit(response)
        if announced is not None:
            self._cooldown_announced(announced, None)
        self.state = "done"
        report = self._report(error=None, now=now)
        response.extensions["retrysafe"] = report
        if self._observed:
            self._emit("success", "success", response.status_code)
        return Succeed(response, report)

    def _verdict_on_headers(self, response: httpx.Response) -> Verdict | None:
        """A success judged on the headers alone, or, when the caller gets the answer
        itself, an error answer the headers settle (final or not: the call either ends
        on it, handing it over unread, or sends again, and its body is of no use to
        either); None when the body must be read first."""
        if response.status_code >= 400:
            return self._settled_by_headers(response) if self._returns_answers else None
        try:
            verdict = self._classify(response)
        except httpx.ResponseNotRead:
            return None  # a rule reads the body
        return verdict if verdict.kind == "success" else None

    def _body_read_at_most(self, plan: AttemptPlan, response: httpx.Response) -> int | None:
        """How much of the body a :class:`ReadBody` reads: at most
        :data:`~retrysafe.decisions.ERROR_BODY_READ_AT_MOST` when it is read only for the
        error a streamed call raises (an error answer its headers settle: asked for only
        when the caller gets the error, not the answer); else all of it (a rule's, or a
        keyed JSON answer's, verdict rests on the whole body; a call that does not stream
        holds its body, as bare httpx does)."""
        if plan.read_body or response.status_code < 400:
            return None
        if not headers_decide(response, self.policy, keyed=self.idempotency_key is not None):
            return None
        return ERROR_BODY_READ_AT_MOST

    def _settled_by_headers(self, response: httpx.Response) -> Verdict | None:
        """The verdict on an error answer (400 and above) when its status and headers
        settle it, whatever its body holds or however it arrives; else None."""
        keyed = self.idempotency_key is not None
        if not headers_decide(response, self.policy, keyed=keyed):
            return None
        return self._classify(response)

    def _classify(self, response: httpx.Response) -> Verdict:
        if response.status_code < 400 and not self.policy.rules:
            return SUCCESS  # what classify_response says too, without reading the wall clock
        return classify_response(
            response,
            self.policy,
            keyed=self.idempotency_key is not None,
            now=self._clock.time(),
            key_may_be_in_use=self._key_may_be_in_use(),
        )

    @property
    def last_attempt_seconds(self) -> float:
        """How long the last attempt took once its request went out (0 before any
        ended): what a healthy call told by :data:`HEALTHY_WHILE_CLOSED` took, for the
        breaker to learn from."""
        return max(0.0, self._history[-1].elapsed - self._queued) if self._history else 0.0

    def attempt_queued(self, seconds: float) -> None:
        """The attempt in flight waited ``seconds`` for a connection before its request
        went out: the client's own queue (more requests at once than its pool's
        connections). The dependency was not given that time, so what the breaker learns
        of the attempt (how long a healthy answer took, how long a timeout waited) leaves
        it out: a burst larger than the pool must not read as a slow dependency."""
        self._queued = seconds

    def attempt_ended_late(self, seconds: float) -> None:
        """The read that timed out and ended the attempt in flight ended ``seconds`` past
        its limit: the event loop (or the process) ran late, and the dependency was not
        given that time. A timeout weighs that much less for the breaker (see
        _tell_breaker): a 0.1 s read timeout that a busy loop got round to 0.4 s in,
        beside answers known to take 0.3 s, read as the dependency's failure, and a short
        call site opened the circuit for every caller under CPU load. (Only that last
        read's lateness: a server that trickled its answer for 2 s before going quiet was
        given the 2 s.)"""
        self._late = seconds

    def _key_may_be_in_use(self) -> bool:
        """Whether an earlier attempt under this call's key may still be running on the
        server: one the server may have acted on, or an earlier run's (a resumed
        journal operation). A keyed 409 then means "in use"."""
        return self._key_sent_before or self._processed == "maybe"

    def attempt_raised(
        self,
        plan: AttemptPlan,
        exc: Exception,
        *,
        during_body: bool,
        answer: httpx.Response | None = None,
    ) -> Decision:
        """The attempt under ``plan`` failed with ``exc``; ``during_body`` if headers had
        come, and ``answer`` the response they made, whose body failed to arrive.

        An error answer (400 and above) is judged on its status and headers, as if its
        body said nothing: a 404 whose body trickled past the attempt's time is still the
        server's final 404, not a timeout to retry; a 503 is still a refusal before any
        work; a keyed 409 whose JSON body never came is judged as one that says nothing
        of its key. Its error then carries no body, and its cause is ``exc``. Under a
        policy's rules, which read the body, and for any other failure, the outcome is
        judged by how far the request got.
        """
        if plan is not self._plan or self.state != "attempting":
            self._out_of_order("attempting", "attempt_raised", plan)
        if answer is not None and answer.status_code >= 400 and not self.policy.rules:
            try:
                return self._answered_without_body(self._classify(answer), answer, exc)
            finally:
                self._late = 0.0
        verdict = classify_exception(exc, during_body=during_body)
        self._record(verdict, status=None, exception=type(exc).__name__)
        self._inform_governor(verdict, None)
        try:
            return self._decide(verdict, response=None, cause=exc, during_body=during_body)
        finally:
            self._late = 0.0  # (this attempt's: a hedged copy's next outcome has its own)

    def _answered_without_body(
        self, verdict: Verdict, answer: httpx.Response, exc: Exception
    ) -> Decision:
        """The attempt ends on ``answer``'s ``verdict``, its body lost to ``exc``."""
        status = answer.status_code
        self._record(verdict, status=status, exception=type(exc).__name__)
        self._inform_governor(verdict, status, answer)
        decision = self._decide(verdict, response=answer, cause=exc, during_body=True)
        if type(decision) is Fail:
            # The shell has no body to hand over: the error, which names the answer, is
            # raised instead (a drop-in transport gives httpx's own exception, exc).
            decision = decision._replace(response=None)
        return decision

    def attempt_abandoned(self, interrupted_by: str | None = None) -> None:
        """The call ended with no outcome: an exception not its own end raised through
        it, during an attempt or a wait (a cancel, a KeyboardInterrupt, in a rule too:
        a rule's ordinary exception is an unreadable answer instead), ``interrupted_by``
        that exception's class name.

        Tells the listeners (an ``interrupted`` event: without it, a cancelled call
        would be missing from every count of calls, and its trace would end without
        saying how).

        Frees what it held, such as the breaker's single half-open probe (so the
        dependency is not blocked until the probe's lease runs out) or a paced slot
        it was waiting for.

        A first failure held back for a retry the call now never sends (cancelled in
        the backoff) is left to another call's retry, as when the budget refuses it
        (DeferFailure): the caller gave up, which says nothing of whether the retry would
        have worked. Counted here, callers whose own timeout ends them during the backoff
        opened the circuit against a dependency whose retries succeed. A retry cut in
        flight is another matter: it went unanswered for as long as the caller waited, as
        a retry that times out does, and the held failure counts (deferred, a dependency
        that answers a quick 503 and then hangs never opened the circuit, however many
        callers gave up on it).
        """
        if self.state == "done":
            return
        in_flight = self._in_flight()
        if self._observed:  # (each attempt cut in flight ends too: its own event first)
            for number in in_flight:
                self._emit("attempt", "interrupted", None, exception=interrupted_by, attempt=number)
        self.effects.append(
            EmitEvent(
                RetryEvent(
                    kind="interrupted",
                    dependency=self.dependency,
                    method=self.method,
                    url=self.url,
                    attempt=len(self._history) + len(in_flight),
                    elapsed=self._clock.monotonic() - self._reported_from,
                    exception=interrupted_by,
                )
            )
        )
        retry_unsent = self.state != "attempting"
        self.state = "done"
        held = self._unreported_failure
        if held is not None and retry_unsent and held.seconds is None:
            self._unreported_failure = None
            self.effects.append(DeferFailure(held))
        self._report_held_failure()  # (a held timeout counts: see _tell_breaker)
        if self._permit is not None:
            self.effects.append(ReleaseProbe(self._permit))
            self._permit = None
        if self._pacing_held:
            self._pacing_held = False
            self.effects.append(ReleasePacing(self._pacing_slot))
        self._refund_unsent_retry()

    def _in_flight(self) -> list[int]:
        """The numbers of the attempts in flight (started, not ended)."""
        plan = self._plan
        return [plan.number] if self.state == "attempting" and plan is not None else []

    def _refund_unsent_retry(self) -> None:
        """A retry the governor granted, spending a budget token, will never be sent:
        the token goes back (the dependency saw no load from it)."""
        if self._spent_unsent:
            self._spent_unsent = False
            self.effects.append(REFUND_ONE_RETRY)

    # -- deciding ------------------------------------------------------------------------

    def _decide(
        self,
        verdict: Verdict,
        *,
        response: httpx.Response | None,
        cause: Exception | None,
        during_body: bool,
    ) -> Decision:
        self._last_response, self._last_cause = response, cause
        self._verdict, self._during_body = verdict, during_body
        if verdict.kind == "success":
            assert response is not None
            self.state = "done"
            report = self._report(error=None)
            response.extensions["retrysafe"] = report
            if self._observed:
                self._emit("success", verdict.reason, response.status_code)
            return Succeed(response, report)
        if may_have_acted(verdict, response):
            self._processed = "maybe"
        if verdict.kind == "permanent":
            later = retryable_later(verdict, response)
            return self._stop("outcome", verdict.reason, retryable=later)
        assert self._plan is not None
        safe = safe_to_repeat(
            verdict,
            method=self.method,
            keyed=self.idempotency_key is not None,
            replayable=self.replayable,
            responded=response is not None,
            policy=self.policy,
        )
        if (
            isinstance(cause, httpx.TimeoutException)
            and self._plan.cut_by_deadline
            and self._too_late_for_another()
        ):
            # Out of time (a shorter phase timeout that fired with time to spare is an
            # attempt's failure like any other); and a write the server may have done is
            # not for blind resending.
            retryable = safe or self._safe_with_the_body_again(verdict, response)
            return self._stop("deadline", "deadline_exceeded", retryable=retryable)
        if not safe:
            return self._stop(
                "outcome",
                "unsafe_to_repeat",
                retryable=self._safe_with_the_body_again(verdict, response),
                spent_body=not self.replayable,
            )
        if self._nested_gave_up:
            return self._stop("outcome", "nested_retry_exhausted")
        if len(self._history) >= self.max_attempts:
            return self._stop("outcome", "attempts_exhausted")
        rand = self._clock.random()
        if verdict.after is not None:
            wait = hinted_wait(verdict.after, self.policy, self.deadline, rand)
            if wait is None:
                return self._stop(
                    "retry_after",
                    "retry_after_too_long",
                    retry_after=verdict.after,
                    detail=self._too_long(verdict.after),
                )
        else:
            wait = backoff_wait(len(self._history) - 1, self.policy, self.deadline, rand)
            if wait is None:
                return self._stop("outcome", "deadline_insufficient")
        self.state = "asking"
        return AskRetry(wait, spends_budget=verdict.reason not in _FREE_RETRY_REASONS)

    def _safe_with_the_body_again(self, verdict: Verdict, response: httpx.Response | None) -> bool:
        """Whether only a spent body keeps this call from repeating its request: then the
        caller's own retry, sending the body again, would be safe (the error's
        ``retryable``)."""
        return not self.replayable and safe_to_repeat(
            verdict,
            method=self.method,
            keyed=self.idempotency_key is not None,
            replayable=True,
            responded=response is not None,
            policy=self.policy,
        )

    def _too_late_for_another(self) -> bool:
        """Whether the deadline leaves no time for a worthwhile attempt (as
        ``start_attempt`` would find)."""
        remaining = self.deadline.remaining()
        return remaining <= 0 or remaining < self.policy.min_attempt_time

    @property
    def attempt_started(self) -> float:
        """When the attempt in flight (or the last one) started, on the clock's
        monotonic seconds."""
        return self._attempt_started

    def answered_during_attempt(self) -> None:
        """Fact: the dependency gave another call a healthy answer after the attempt in
        flight started. A timeout of that attempt is then held for its retry, as a first
        503 is (the dependency answers: one stalled request, or a burst of them, is
        what a retry fixes); without one, the timeout is told at once (a hung dependency
        answers no one, and its retry would take another whole attempt to confirm it)."""
        self._answered_meanwhile = True

    def failure_not_counted(self) -> None:
        """Fact: the breaker did not count this call's failure (a timeout it took for the
        caller's own limit), so the call is not counted as failing: a later outcome of it
        is new evidence, and a later success takes back nothing."""
        self._failed_before = False

    def nested_call_gave_up(self) -> None:
        """Fact: a retrying call nested in this attempt already retried and gave up, so
        this call must not retry the same failure again (retries would multiply)."""
        self._nested_gave_up = True

    def retry_answered(self, ask: AskRetry, answer: RetryAnswer) -> Wait | Fail:
        """The governor's ``answer`` to ``ask``: wait and retry, or give up. The wait is
        the one asked for, or the time until the paced slot the answer holds for the
        retry, when that is further away (the record and the ``retry`` event keep the
        call's own wait: the rest is load protection's)."""
        if self.state != "asking":
            self._out_of_order("asking", "retry_answered")
        if answer.refusal is not None:
            stop: StopKind = "circuit" if answer.refusal == "circuit_open" else "budget"
            return self._stop(
                stop, answer.refusal, retry_after=answer.retry_after, detail=answer.detail
            )
        self._spent_unsent = ask.spends_budget
        if answer.pacing > 0:
            # A paced slot further away than the wait, reserved with the grant: the retry
            # waits for it, holding it, or gives up now (giving it back) if it comes too late.
            if not self.deadline.allows(answer.pacing, self.policy.min_attempt_time):
                self.effects.append(ReleasePacing(answer.slot))
                return self._slot_too_late(answer.pacing, answer.detail)
            self._pacing_held = True
            self._pacing_slot = answer.slot
        # (the record and the event keep the call's own wait; a held slot further away is
        # load protection's, told by the shell as a held event, as at an attempt's start)
        last = self._history[-1] = self._history[-1]._replace(wait=ask.wait)
        verdict = self._verdict
        assert verdict is not None
        status = self._last_response.status_code if self._last_response is not None else None
        self._emit("retry", verdict.reason, status, wait=ask.wait, exception=last.exception)
        self._promised = True
        self.state = "ready"
        return Wait(max(ask.wait, answer.pacing))

    # -- load protection facts out -------------------------------------------------------

    def _inform_governor(
        self, verdict: Verdict, status: int | None, response: httpx.Response | None = None
    ) -> None:
        """Leave the outcome's health for the breaker, and any cooldown, in the outbox.

        A cooldown pauses every caller of the dependency: a 429's wait hint, or the
        reset of a limit the response (any status, a success too) announces used up
        (``RateLimit: ...;r=0;t=10``, ``X-RateLimit-Remaining: 0``...), so the next
        calls wait for the reset instead of collecting 429s.
        """
        permit = self._permit
        if permit is not None:
            self._permit = None
            if verdict is SUCCESS and not permit.probe and not self._failed_before:
                # The common case, made once: a healthy call admitted while closed counts
                # the same whichever closed period admitted it (a failure held back is
                # taken back: the call is healthy, and its retry succeeded).
                self.effects.append(HEALTHY_WHILE_CLOSED)
                if self._unreported_failure is not None:
                    self._unreported_failure = None
                    self.effects.append(RETRY_SUCCEEDED)
            else:
                self._tell_breaker(permit, verdict, status)
        cooldown = verdict.after if status == 429 else None
        if response is not None:
            announced = announced_limit(response)  # one pass over the header names
            if announced is not None:
                self._cooldown_announced(announced, cooldown)
                return
        if cooldown is not None:
            self.effects.append(StartCooldown(cooldown, False))

    def _tell_breaker(self, permit: Permit, verdict: Verdict, status: int | None) -> None:
        """Leave the outcome's health for the breaker in the outbox; or, for a call's first
        failure while it may still retry, hold it back.

        Many calls caught by one blip (a 503 each, at the same moment) must not open the
        circuit, which would then refuse the retries that save them: a call's first
        failure counts when its retry fails too (told then, its retry's failure as the
        repeat), or when the call ends without one for a reason of its own, out of
        attempts or time, or cancelled while its retry is in flight
        (:meth:`_report_held_failure`); a retry's success takes it back; the budget
        refusing the retry, or the caller cancelling the call before the retry is sent,
        leaves it to another call's retry (:class:`~retrysafe.decisions.DeferFailure`).
        A timeout is held as well when the dependency answered other calls while its
        attempt waited (:meth:`answered_during_attempt`): a burst of attempts stalled at
        once (21 of 50 calls in flight, each fixed by one retry) otherwise made "20
        failing calls in a row" and opened the circuit before any retry went. A held
        timeout whose retry is never sent (the budget refused it, the caller gave up in
        the backoff) counts then, not left to another call's retry. Told at once all the
        same: a timeout with no answer to anyone meanwhile (a hung dependency, whose
        retry would take another whole attempt to confirm it); a probe's outcome (the
        half-open breaker waits for it); a connect timeout (nothing reached the server);
        and a failure with the server's wait (a 503's ``Retry-After``), which asks
        every caller to back off now.
        """
        open_for = verdict.after if status == 503 else None
        outcome_health = health(verdict, status)
        seconds: float | None = None
        # A retry of a call that had failed: its outcome also decides the failures the
        # breaker deferred (those whose retry was never sent: see DeferFailure).
        retried = not permit.probe and (self._unreported_failure is not None or self._failed_before)
        if outcome_health == "unhealthy":
            timed_out = verdict.reason in TIMEOUT_REASONS
            if timed_out:
                seconds = max(0.0, self.last_attempt_seconds - self._late)
            if self._unreported_failure is not None:
                self._report_held_failure()  # (its retry failed too: it counts)
            elif not (
                self._failed_before
                or permit.probe
                or (timed_out and not self._answered_meanwhile)
                or verdict.reason == "connect_timeout"
                or verdict.after is not None
            ):
                self._unreported_failure = RecordHealth(
                    permit, "unhealthy", open_for, False, seconds
                )
                return
        elif outcome_health == "healthy":
            seconds = self.last_attempt_seconds
            self._unreported_failure = None  # (taken back: the call is healthy)
        # A repeat: this call already told the breaker of a failure, so another one is
        # not new evidence (a 429 or 4xx before it told it nothing).
        repeat = self._failed_before
        if outcome_health == "unhealthy":
            self._failed_before = True
        self.effects.append(RecordHealth(permit, outcome_health, open_for, repeat, seconds))
        if retried and outcome_health != "neutral":
            self.effects.append(RETRY_FAILED if outcome_health == "unhealthy" else RETRY_SUCCEEDED)

    def _report_held_failure(self) -> None:
        """The call ends without the retry its first failure was held back for: the
        breaker is told of it now (see _inform_governor)."""
        held = self._unreported_failure
        if held is not None:
            self._unreported_failure = None
            self._failed_before = True
            self.effects.append(held)

    def _cooldown_announced(self, announced: RateLimitAnnouncement, hinted: float | None) -> None:
        """Leave a cooldown for the reset of a limit the response announced used up, or
        for the ``hinted`` wait (a 429's) when that is longer."""
        reset = announced.seconds(self._clock.time())
        if reset is not None and reset > 0 and (hinted is None or reset > hinted):
            self.effects.append(StartCooldown(reset, True))
        elif hinted is not None:
            self.effects.append(StartCooldown(hinted, False))

    # -- giving up -----------------------------------------------------------------------

    def _slot_too_late(self, pacing: float, detail: str) -> Fail:
        """Give up on a paced slot ``pacing`` seconds away that leaves less than
        ``min_attempt_time`` before the deadline (the slot given back already)."""
        return self._stop(
            "pacing",
            "pacing",
            retry_after=pacing,
            detail=self._too_long(pacing, detail, capped=False),
        )

    def _too_long(self, wait: float, detail: str = "", *, capped: bool = True) -> str:
        """``detail``, and why a wait of ``wait`` seconds is more than this call may take:
        for the error's message, with the numbers that decided it (``capped``: the
        policy's ``max_retry_after`` applies to this wait)."""
        from retrysafe.failures import explain_wait_too_long

        why = explain_wait_too_long(wait, self.deadline.remaining(), self.policy, capped=capped)
        return f"{detail}; {why}" if detail else why

    def _stop(
        self,
        stop: StopKind,
        reason: str,
        *,
        retryable: bool = True,
        retry_after: float | None = None,
        detail: str = "",
        spent_body: bool = False,
    ) -> Fail:
        """Give up now with the error ``stop`` and ``reason`` call for."""
        # Loaded here, not with the engine: most processes' calls never give up, and
        # `import retrysafe` stays lighter without the error builders.
        from retrysafe.failures import CallSummary, give_up_error

        self.state = "done"
        held = self._unreported_failure
        if held is not None and (stop == "budget" or stop == "circuit"):
            # The governor refused the retry its first failure was held back for. Not
            # told as a failure: many calls the budget refused in one blip would open
            # the circuit, which would then refuse the retries the budget granted. The
            # budget's refusal leaves it to another call's retry (DeferFailure); the
            # circuit's needs nothing (the breaker is not closed).
            if stop == "circuit":
                self._unreported_failure = None
            elif held.seconds is None:  # (a held timeout counts: see _tell_breaker)
                self._unreported_failure = None
                self.effects.append(DeferFailure(held))
        self._report_held_failure()
        self._refund_unsent_retry()
        response, cause, verdict = self._last_response, self._last_cause, self._verdict
        last = self._history[-1] if self._history else None
        outcome = last.outcome if last is not None else reason
        error, excerpt = give_up_error(
            stop,
            reason=reason,
            outcome=outcome,
            retryable=retryable,
            summary=CallSummary(
                method=self.method,
                url=self.url,
                attempts=len(self._history),
                history=tuple(self._history),
                elapsed=self._clock.monotonic() - self._reported_from,
                processed=self._processed,
                idempotency_key=self.idempotency_key,
                earlier_retries=self._earlier_retries,
                earlier_hops_elapsed=self._started - self._reported_from,
            ),
            verdict=verdict,
            response=response,
            cause=cause,
            during_body=self._during_body,
            retry_after=retry_after,
            redactor=Redactor.for_request(self._request),
            detail=detail,
            spent_body=spent_body,
            attempt_timeout=self.policy.attempt_timeout,
        )
        report = self._report(error=error)
        if response is not None:
            response.extensions["retrysafe"] = report
        retried = len(self._history) > 1 or reason in _RETRIED_REASONS
        self.effects.append(
            EmitEvent(
                RetryEvent(
                    kind="failure",
                    dependency=self.dependency,
                    method=self.method,
                    url=self.url,
                    attempt=len(self._history),
                    status=error.status,
                    outcome=last.outcome if last is not None else "",
                    reason=reason,
                    elapsed=error.elapsed,
                    error=type(error).__name__,
                    exception=last.exception if last is not None else None,
                ),
                excerpt,
            )
        )
        return Fail(error, response, cause, report, retried=retryable and retried)

    # -- bookkeeping ---------------------------------------------------------------------

    def _record(
        self,
        verdict: Verdict,
        *,
        status: int | None,
        exception: str | None,
        now: float | None = None,
    ) -> None:
        """Add the attempt in flight to the history (``now``: a clock read the caller
        already made), and its per-attempt event when someone listens."""
        plan = self._plan
        assert plan is not None
        if now is None:
            now = self._clock.monotonic()
        started = self._attempt_started
        self._history.append(
            # (positional: built for every attempt; the fields in AttemptRecord's order)
            AttemptRecord(
                plan.number,  # attempt
                verdict.reason,  # outcome
                status,
                exception,
                started - self._started,  # started
                now - started,  # elapsed
                plan.timeout,  # timeout
            )
        )
        if self._observed:  # the per-attempt event, for tracing
            self._emit("attempt", verdict.reason, status, exception=exception)

    def _report(self, *, error: ApiError | None, now: float | None = None) -> CallReport:
        """What the call did, as of ``now`` (default: the clock, read here)."""
        if now is None:
            now = self._clock.monotonic()
        history = tuple(self._history)
        # (positional: built for every call; the fields in CallReport's order)
        return CallReport(
            len(history),  # attempts
            tuple([record.wait for record in history[:-1]]) if len(history) > 1 else (),  # waits
            now - self._reported_from,  # elapsed
            self.idempotency_key,
            self.dependency,
            history,
            error,
        )

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
        """Leave an event in the outbox; ``attempt`` defaults to the latest attempt's number
        (a hedging call names the copy it is about)."""
        self.effects.append(
            EmitEvent(
                RetryEvent(
                    kind=kind,
                    dependency=self.dependency,
                    method=self.method,
                    url=self.url,
                    attempt=len(self._history) if attempt is None else attempt,
                    status=status,
                    outcome=outcome,
                    reason=reason,
                    wait=wait,
                    elapsed=self._clock.monotonic() - self._reported_from,
                    exception=exception,
                )
            )
        )

    def _out_of_order(self, state: str, action: str, plan: AttemptPlan | None = None) -> None:
        """Raise for a step the state machine cannot take now (a shell's bug)."""
        if self.state != state:
            raise RuntimeError(
                f"Call.{action}() needs state {state!r}, but the call is {self.state!r}"
            )
        if plan is not None and plan is not self._plan:
            raise RuntimeError(f"Call.{action}() got a plan that is not the attempt in flight")

    def __repr__(self) -> str:
        return f"Call({self.method} {self.url}, state={self.state!r}, attempts={self.attempts})"
