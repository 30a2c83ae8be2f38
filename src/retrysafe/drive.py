"""The drive loop's shared half: everything between the engine and the world but I/O.

A shell (sync or async) makes one :class:`Drive` per request and only sends,
reads and sleeps; the Drive turns each engine step into the next one by
answering the engine's questions with the governor, applying its effects
(breaker health, cooldowns, events to the log and hooks), and keeping the two
contexts a call lives in:

- nesting: a call made inside another retrying call's attempt (same task or
  thread) is nested; it retries less, and when it gives up after retrying, the
  enclosing call does not retry the same failure again;
- the redirect chain: httpx follows redirects above the transport, one request
  per hop; every hop of one chain shares one deadline and one retry allowance.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import httpx

from retrysafe.attempt_deadline import UNSENT_IN_TIME, RunningCall, SharedStream, current_call
from retrysafe.call_options import (
    DROP_IN_OPTIONS,
    OPTIONS_EXTENSION,
    CallOptions,
    refuse_options,
)
from retrysafe.classify import AttemptTimedOut, h2_protocol_error
from retrysafe.clock import SystemClock
from retrysafe.clock_read import monotonic_of
from retrysafe.deadline_scope import current_deadline
from retrysafe.decisions import (
    OPEN_ADMISSION,
    Admission,
    AskRetry,
    AttemptPlan,
    AwaitOthers,
    CallReport,
    Decision,
    EmitEvent,
    Fail,
    Hedge,
    HedgeAnswer,
    ReadBody,
    RecordHealth,
    RecordLatency,
    RetryAnswer,
    Succeed,
    Wait,
)
from retrysafe.engine import HEALTHY_WHILE_CLOSED, Call
from retrysafe.errors import Refused
from retrysafe.first_attempt import first_plan, first_success, settled_at_once
from retrysafe.governor.breaker import Permit, Transition
from retrysafe.governor.explain import (
    explain_breaker,
    explain_budget,
    explain_cooldown,
    explain_pacing,
)
from retrysafe.governor.guard import GRANTED, DependencyGuard
from retrysafe.kept_body import RawKeepingStream, unread
from retrysafe.observe import HELD_LEVELS, CallTrace, EventKind, Observer, RetryEvent
from retrysafe.observe import logger as _log
from retrysafe.policy import RetryPolicy
from retrysafe.request_facts import default_dependency, replayable_body
from retrysafe.rewound_file import rewound_file_body
from retrysafe.shell_settings import ShellSettings
from retrysafe.testing import switch as testing_mode
from retrysafe.timing import Deadline

if TYPE_CHECKING:  # loaded on a hedging call's first use, not with `import retrysafe`
    from retrysafe.hedged_call import HedgedCall

__all__ = ["Drive", "Step", "hands_over"]

#: Request extension key of the redirect chain a request belongs to.
_CHAIN_EXTENSION: Final = "retrysafe.chain"
#: The clock attempts' ends are read on (``Drive.attempt_ends_at``: ``time.monotonic``).
_MONOTONIC_CLOCK: Final = SystemClock()
#: Each attempt bounds the phase timeouts of the caller's own request, and the body may
#: still be read with them after the call returns, so they stay. A call leaves, beside
#: them, what they were when it ended and the caller's timeouts they came from: a call
#: that sends the same request again, and finds them unchanged, starts from the
#: caller's. (Only an ended call leaves them: a retrysafe layer inside another's
#: attempt finds the outer attempt's bounded timeouts, and they are its caller's.)
_LEFT_TIMEOUTS_EXTENSION: Final = "retrysafe.left_timeouts"
_CALLER_TIMEOUTS_EXTENSION: Final = "retrysafe.caller_timeouts"
#: No attempt of this call was given to a breaker to wait for (see Drive._answer_by).
_NO_ANSWER_EXPECTED: Final = float("-inf")
#: Likewise the deadline header a call's last attempt carried, as (name, value), left by a
#: shell that sends one (``deadline_header``): a call that sends the same request again,
#: and finds the header unchanged, takes it off, since it tells of a time long gone (its
#: own shell, if it shares deadlines too, sets a fresh one on each attempt).
_LEFT_DEADLINE_HEADER_EXTENSION: Final = "retrysafe.left_deadline_header"

#: What a shell is told to do next: send, read the body, sleep, or end the call (or,
#: when hedging, wait for another copy in flight).
Step = AttemptPlan | ReadBody | Wait | Succeed | Fail | AwaitOthers


_HEDGE_GRANTED: Final = HedgeAnswer()


def _hedged_call(
    request: httpx.Request,
    policy: RetryPolicy,
    settings: ShellSettings,
    dependency: str,
    deadline: Deadline,
    retries_used: int,
    max_attempts: int | None,
    stream: bool,
    started: float,
    elapsed_before: float,
) -> HedgedCall:
    """The engine of a call whose policy hedges, with its hedge delay worked out now
    (the fixed delay, or the dependency's learned percentile)."""
    from retrysafe.hedged_call import HedgedCall

    assert policy.hedge_after is not None
    return HedgedCall(
        request,
        hedge_delay=settings.governor.latencies.hedge_delay(dependency, policy.hedge_after),
        policy=policy,
        clock=settings.clock,
        dependency=dependency,
        deadline=deadline,
        retries_used=retries_used,
        max_attempts=max_attempts,
        stream=stream,
        observed=_listening(settings.observer),
        started=started,
        elapsed_before=elapsed_before,
        returns_answers=settings.returns_answers,
    )


class _Chain:
    """The hops of one redirect chain: one deadline, one retry allowance.

    Made only when a hop ends in a redirect; httpx builds the next hop as a new
    request carrying a copy of the same extensions, which is how the next hop finds it.
    """

    __slots__ = ("deadline", "last_request", "retries_used", "started", "timeouts")

    def __init__(
        self,
        deadline: Deadline,
        timeouts: dict[str, Any],
        retries_used: int,
        last_request: httpx.Request,
        started: float,
    ) -> None:
        self.deadline = deadline
        self.timeouts = timeouts
        self.retries_used = retries_used
        self.last_request = last_request
        #: When its first hop started (the clock's monotonic seconds): a call's reported
        #: time is the whole chain's.
        self.started = started


def _named(namer: Callable[[httpx.Request], object], request: httpx.Request) -> str:
    """The dependency name a user's namer gives ``request``, checked to be a ``str``."""
    # Called as returning any object: what a user's namer returns is checked here, not
    # assumed (the compiled build would otherwise fail with its own message).
    name = namer(request)
    if not isinstance(name, str):
        raise TypeError(
            f"the dependency namer {namer!r} returned {type(name).__name__}: "
            "it must return the dependency's name (str)"
        )
    return name


def _take_off_stale(request: httpx.Request, left: object) -> None:
    """Take the deadline header an earlier call left (``left``: its name and value) off
    ``request``, unless the caller has set the header again since."""
    if isinstance(left, tuple) and len(left) == 2:
        name, value = left
        if isinstance(name, str) and request.headers.get(name) == value:
            del request.headers[name]


#: What a context variable's token holds as its old value when it had none.
_MISSING: Final = contextvars.Token.MISSING
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
#: Testing mode's wait: none at all.
_INSTANT: Final = Wait(0.0)


def hands_over(step: Step, response: httpx.Response) -> bool:
    """Whether ``step`` hands ``response`` to the caller: a success, or the answer the
    call ends on. Any other answer the shell closes: one the call sends again may be
    unread (a drop-in's 503, judged on its headers), and would hold its connection."""
    return isinstance(step, (Succeed, Fail)) and step.response is response


def _dropped(response: httpx.Response) -> bool:
    """Whether ``response`` was closed unread: an answer the call sent again whose body
    was not drained (large, or slow: see kept_body.drain_or_close), before a refusal ended
    the call. It has nothing left to hand over (httpx would raise ``StreamClosed``)."""
    if not response.is_closed:
        return False
    try:
        response.content  # noqa: B018 - raises ResponseNotRead for a body never read whole
    except httpx.ResponseNotRead:
        return True
    return False


def _time_read_body(response: httpx.Response, seconds: float) -> None:
    """Set ``response.elapsed`` on a response whose body is read already: ``seconds``,
    the time of the request it answers, from the call's start (or, after a redirect,
    the hop's), as httpx counts a call's through a transport that retries: every
    attempt and wait in it.

    httpx sets it as it closes the stream it wraps the transport's response in; a
    body read within the attempt closed the response before httpx wrapped it, so
    httpx never did, and ``elapsed`` raised ``RuntimeError``."""
    response.elapsed = timedelta(0, seconds)


#: The log's own answers to "is this level enabled?", kept by :mod:`logging` on the
#: logger and cleared in place whenever a level changes (where a Python keeps none, an
#: empty dict: every call then asks ``isEnabledFor``).
_kept_answers = getattr(_log, "_cache", None)
_LOG_LEVEL_ANSWERS: Final[dict[int, bool]] = (
    _kept_answers if isinstance(_kept_answers, dict) else {}
)


def _say_no_retry_was_sent(cause: BaseException, refusal: Refused) -> None:
    """Add to ``cause``'s message (an attempt's httpx exception, which the drop-in transport
    raises) that load protection held the retry back: where only ``str()`` is read (a log
    line, an SDK's wrapper), the error read as a plain timeout or reset, with nothing to
    say why it was not retried. (The whole account stays in its note.)"""
    said = "; no retry was sent:"
    if len(cause.args) == 1 and isinstance(cause.args[0], str) and said not in cause.args[0]:
        # (once: a transport may raise one exception object for many calls)
        cause.args = (
            f"{cause.args[0]}{said} the dependency's {refusal.protection} held "
            "it back (retrysafe's note on this exception says more)",
        )


def _after_sending(exc: httpx.LocalProtocolError, request: httpx.Request) -> Exception:
    """An h2 protocol error httpcore raised as "local" once the attempt's HEADERS had
    gone out: the server may have the request (an answer it garbled, or the connection
    failing under it), so it is told as the remote protocol error it may be, the
    original as its cause. (Taken as local, it read as "never received": a POST the
    server had answered would have been reported unsent. Refused before sending, by h2
    or at the stream limit, it stays local: then nothing was noted as sent, as
    attempt_deadline.HeadersNoted takes its note back. So does one on a transport
    retrysafe cannot watch, whose attempts count as sent from their start: there
    nothing tells the two apart.)"""
    error = httpx.RemoteProtocolError(
        f"the HTTP/2 connection failed after the request was sent: {exc}", request=request
    )
    error.__cause__ = exc
    return error


def _body_sent_again(request: httpx.Request) -> bool:
    """Whether ``request``'s body can be sent again, byte for byte, once an attempt sent
    it (:func:`~retrysafe.request_facts.replayable_body`). A file that can seek is read
    through a :class:`~retrysafe.rewound_file.RewoundFile` from now on, so that each
    attempt sends it from where it began; asked before the first attempt is sent."""
    rewound = rewound_file_body(request.stream)
    if rewound is not None:
        request.stream = rewound
    return replayable_body(request.stream)


def _listening(observer: Observer) -> bool:
    """``observer.listening``: with no hook, whether the log takes DEBUG events (asked
    here, on every call, without the property's frame, and, once the log has answered,
    from its kept answer, as ``isEnabledFor`` reads it, without that method's frame)."""
    if observer.hooked:
        return observer.listening
    if _log.disabled:
        return False
    known = _LOG_LEVEL_ANSWERS.get(logging.DEBUG)
    return known if known is not None else _log.isEnabledFor(logging.DEBUG)


class _FirstAttempt:
    """A fresh call's first attempt, planned and sent without a Call (first_attempt.py).

    (A class, not a named tuple: the compiled build reads its fields directly.)
    """

    __slots__ = ("permit", "plan", "replayable", "started")

    def __init__(
        self, plan: AttemptPlan, permit: Permit | None, replayable: bool, started: float
    ) -> None:
        self.plan = plan
        #: The breaker's permit it went with (None: no breaker).
        self.permit = permit
        #: Whether the request's body could be sent again, read before it was sent
        #: (sending a one-shot stream may leave it held as bytes).
        self.replayable = replayable
        #: When it started (the clock's monotonic seconds).
        self.started = started


class Drive:
    """One request's trip through the engine, minus the sending and the sleeping.

    A fresh call (see :mod:`retrysafe.first_attempt`) starts without an engine: its
    first attempt is planned there, and the :class:`~retrysafe.engine.Call` is made
    only if that attempt does not end the call as a success (it then adopts the
    attempt). :attr:`call` makes it whenever it is first asked for.
    """

    __slots__ = (
        "_answer_by",
        "_call",
        "_deadline",
        "_earned",
        "_elapsed_before",
        "_first",
        "_guard",
        "_outer",
        "_retries_before",
        "_started",
        "_stream",
        "_token",
        "_trace",
        "attempt_ends_at",
        "attempt_sent_at",
        "attempt_started_at",
        "caller_timeouts",
        "dependency",
        "gave_up_inside",
        "late_by",
        "policy",
        "request",
        "sends_noted",
        "settings",
        "shared_stream",
    )

    def __init__(self, settings: ShellSettings, request: httpx.Request) -> None:
        # Made for every request: it sets only what a fresh call needs, and leaves what
        # only a retry asks (nesting, testing mode's attempts) to be worked out then.
        self.settings = settings
        self.request = request
        extensions = request.extensions
        options = extensions.get(OPTIONS_EXTENSION)
        if not isinstance(options, CallOptions):
            if options is not None:
                refuse_options(options)  # (before anything is sent)
            options = DROP_IN_OPTIONS
        #: The policy of this call: the call's own, else the shell's.
        self.policy = policy = options.policy or settings.policy
        dependency = options.dependency or settings.dependency or default_dependency(request.url)
        #: The name this call's load protection is kept under.
        self.dependency: str = (
            dependency if isinstance(dependency, str) else _named(dependency, request)
        )
        self._stream = options.stream
        governor = settings.governor
        # Testing mode (retrysafe.testing.set_testing) leaves load protection out: its
        # cooldowns and paced slots would make a test suite wait.
        guard: DependencyGuard | None = None
        if governor.protects and testing_mode.active is None:
            # governor.guard(), its lock-free half inline (a Python frame on every call):
            # a dependency's guard is made once, and marked in use on each call after.
            guard = governor._guards.get(self.dependency)
            if guard is None:
                guard = governor.guard(self.dependency)
            else:
                guard.asked = True
        self._guard = guard
        #: Set by a call nested in this one's attempt that retried and gave up.
        self.gave_up_inside = False
        #: Whether its first attempt has earned the retry budget its share (see
        #: :meth:`_first_attempt_ended`).
        self._earned = False
        #: When the attempt in flight must end (the shell sets it; reads are bounded by it).
        self.attempt_ends_at: float | None = None
        #: When it started and first wrote its request (``time.monotonic()``: the send
        #: loops set the one, the network stream the other, None until it writes; see
        #: :meth:`_time_queued`). (A hedged copy is timed on its own object, and the
        #: hedged shell hands its times over before telling its outcome.)
        self.attempt_started_at: float | None = None
        self.attempt_sent_at: float | None = None
        #: Whether the attempt in flight's ``attempt_sent_at`` is noted by its network
        #: streams as they send (not taken as its start: a transport retrysafe cannot
        #: watch). Set with it.
        self.sends_noted = False
        #: The HTTP/2 stream its attempts last wrote to (see attempt_deadline.retire).
        self.shared_stream: SharedStream | None = None
        #: How late the read that timed out ended (set by the network stream; see
        #: Call.attempt_ended_late), taken by :meth:`raised`.
        self.late_by = 0.0
        self._started = monotonic_of(settings.clock)
        self._call: Call | None = None
        #: A fresh call's first attempt in flight, planned without a Call.
        self._first: _FirstAttempt | None = None
        #: When the attempt in flight stops waiting for its answer (monotonic seconds), as
        #: its breaker was told (see CircuitBreaker.expect_answer).
        self._answer_by = _NO_ANSWER_EXPECTED
        self._trace: CallTrace | None = None
        self._retries_before = 0
        #: The time a redirect chain's earlier hops took (0 for a call of its own).
        self._elapsed_before = 0.0
        #: The per-phase timeouts the request came with, before any attempt bounded them.
        timeouts = extensions.get("timeout")
        left = extensions.get(_LEFT_TIMEOUTS_EXTENSION)
        if left is not None:
            # A request sent again after an earlier call ended (see close).
            if timeouts == left:
                # these are that call's bounded timeouts, not the caller's
                timeouts = extensions[_CALLER_TIMEOUTS_EXTENSION]
            header = extensions.pop(_LEFT_DEADLINE_HEADER_EXTENSION, None)
            if header is not None:
                _take_off_stale(request, header)
        #: (A dict, whatever mapping the request came with: read on every attempt.)
        self.caller_timeouts: dict[str, Any] = (
            timeouts if isinstance(timeouts, dict) else dict(timeouts or {})
        )
        chain = extensions.get(_CHAIN_EXTENSION)
        scope = current_deadline()
        # (read back through a local: the compiled build takes an attribute just set to
        # None as None until the next statement that is not a method call)
        deadline = (
            None if chain is None and scope is None else self._join_chain_or_scope(chain, scope)
        )
        #: The call's deadline when it is not simply the policy's from now: a redirect
        #: chain's, or one tightened by an enclosing deadline scope.
        self._deadline: Deadline | None = deadline
        # This call is the running one in its context until it closes: a call made in
        # its attempt is nested in it, and reads made for it are bounded by its attempt.
        token = current_call.set(self)
        self._token: contextvars.Token[RunningCall | None] | None = token
        #: What ran in this context when this call started (the call it is nested in, if
        #: any), kept for after close: some shells close before they finish.
        outer = token.old_value
        if outer is _MISSING:  # (nothing ever ran in this context)
            outer = None
        self._outer: object = outer
        if outer is not None and outer.attempt_ends_at is not None:
            # Made inside another call's attempt (a layer under it, or code its transport
            # runs), or a hedged copy's: whatever this call's own policy says, it ends
            # when that attempt must.
            deadline = self._deadline = self._within(outer.attempt_ends_at, deadline)
        try:
            if (
                deadline is not None
                or policy.hedge_after is not None
                or _listening(settings.observer)
            ):
                self.call  # noqa: B018 - not a fresh call: its engine from the start
        except BaseException:
            # (a hook's or an instrument's failure): the call never starts, and the
            # context must not go on holding it as the running call
            self.close()
            raise

    def _within(self, ends_at: float, deadline: Deadline | None) -> Deadline:
        """``deadline`` (None: the policy's from the call's start), or ``ends_at`` (an
        enclosing attempt's end, on ``time.monotonic``) if that comes sooner."""
        if deadline is None:
            deadline = Deadline(self._started + self.policy.deadline, self.settings.clock)
        return deadline.tighter(Deadline(ends_at, _MONOTONIC_CLOCK))

    def _join_chain_or_scope(self, chain: object, scope: Deadline | None) -> Deadline | None:
        """The deadline a redirect chain's earlier hops left (taking their retries too),
        or the enclosing scope's if tighter than the policy's; None if neither applies."""
        if isinstance(chain, _Chain) and chain.last_request is not self.request:
            # The next hop of a redirect chain: what the earlier hops left is this hop's.
            self._retries_before = chain.retries_used
            self._elapsed_before = self._started - chain.started
            self.caller_timeouts = chain.timeouts
            return chain.deadline
        if scope is not None:
            own = Deadline(self._started + self.policy.deadline, self.settings.clock)
            return own.tighter(scope)
        return None

    @property
    def traced(self) -> bool:
        """Whether a call instrument follows this call (it may then write its trace's
        context, such as ``traceparent``, on each attempt's request)."""
        return self._trace is not None

    @property
    def guards_nesting(self) -> bool:
        """Whether this call takes part in the nesting guard (its governor's setting)."""
        return self.settings.governor.settings.nested_attempts is not None

    def _enclosing(self) -> Drive | None:
        """The retrysafe call this one is nested in: the one running in this context
        when it started (or, in a hedged copy's attempt, the call it is a copy of), if
        both take part in the nesting guard."""
        parent = self._outer
        if parent is not None and not isinstance(parent, Drive):
            parent = getattr(parent, "drive", None)  # (hedged_shell's copy)
        if isinstance(parent, Drive) and parent.guards_nesting and self.guards_nesting:
            return parent
        return None

    @property
    def call(self) -> Call:
        """The engine of this call (a HedgedCall when the policy hedges), made when first
        needed; it adopts a first attempt planned without it."""
        call = self._call
        if call is None:
            call = self._call = self._engine()
        return call

    def _engine(self) -> Call:
        settings = self.settings
        request = self.request
        policy = self.policy
        deadline = self._deadline
        if deadline is None:
            # (policy.deadline is validated already: no need for Deadline.after's checks)
            deadline = Deadline(self._started + policy.deadline, settings.clock)
        observer = settings.observer
        observed = _listening(observer)
        # A nested call retries less; testing mode caps every call's attempts.
        max_attempts = (
            None if self._enclosing() is None else settings.governor.settings.nested_attempts
        )
        testing = testing_mode.active
        if testing is not None:
            max_attempts = min(max_attempts or testing.attempts, testing.attempts)
        call: Call
        if policy.hedge_after is not None:
            call = _hedged_call(
                request,
                policy,
                settings,
                self.dependency,
                deadline,
                self._retries_before,
                max_attempts,
                self._stream,
                self._started,
                self._elapsed_before,
            )
        else:
            call = Call(
                request,
                policy=policy,
                clock=settings.clock,
                dependency=self.dependency,
                deadline=deadline,
                retries_used=self._retries_before,
                max_attempts=max_attempts,
                stream=self._stream,
                observed=observed,
                started=self._started,
                replayable=(
                    _body_sent_again(request) if self._first is None else self._first.replayable
                ),
                elapsed_before=self._elapsed_before,
                returns_answers=self.settings.returns_answers,
            )
        first = self._first
        if first is not None:
            self._first = None
            call.adopt_attempt(first.plan, first.permit, first.started)
        elif observer.instrumented and observed:
            #: Follows the call for the instruments among the hooks (spans), if any listens.
            self._trace = observer.start_call(
                request, dependency=self.dependency, url=call.url, stream=self._stream
            )
        return call

    # -- steps -------------------------------------------------------------------------

    def next_attempt(self) -> Step:
        """Ask the governor, then the engine, whether and how the next attempt starts."""
        guard = self._guard
        if self._call is None:
            # A fresh call's first attempt: when nothing holds it back, it needs no engine.
            now = monotonic_of(self.settings.clock)
            remaining = self._started + self.policy.deadline - now
            if remaining > 0:  # (with no time left, the engine says how the call ends)
                plan = first_plan(self.policy, stream=self._stream, remaining=remaining)
                if guard is None:
                    admission: Admission | None = OPEN_ADMISSION
                else:
                    patience = self._patience(plan.timeout)
                    admission = guard.admit_at_once(now + patience, patience)
                    if admission is not None:
                        self._answer_by = now + patience  # (what the breaker was told)
                if admission is not None:
                    stream = self.request.stream  # (bytes, the usual body, asked inline)
                    replayable = isinstance(stream, httpx.ByteStream) or _body_sent_again(
                        self.request
                    )
                    self._first = _FirstAttempt(plan, admission.permit, replayable, now)
                    return plan
        call = self.call
        if guard is None:
            step = call.start_attempt(OPEN_ADMISSION)
        else:
            admission = guard.admit(call)
            permit = admission.permit
            if permit is not None and permit.transition is not None:
                self._emit_transition(permit.transition)  # (open -> half_open, for a probe)
            if (
                admission.cooldown > 0
                or admission.pacing > 0
                or (admission.permit is not None and not admission.permit.allowed)
            ):
                admission = admission._replace(detail=self._explain(guard, admission))
            step = call.start_attempt(admission)
            if type(step) is AttemptPlan:
                patience = self._patience(step.timeout)
                self._answer_by = monotonic_of(self.settings.clock) + patience
                guard.expect_answer(self._answer_by, patience)
            elif type(step) is Wait:
                self._say_held(step, admission)
        self._apply_effects()
        if self._trace is not None and type(step) is AttemptPlan:
            self._trace.attempt_starting(step.number, self.request)
        elif type(step) is Wait and testing_mode.active is not None:
            return self._skipped(step)
        return step

    def _say_held(self, wait: Wait, admission: Admission) -> None:
        """Tell (a ``held`` event) that load protection holds the next attempt back for
        ``wait``: a cooldown is logged at INFO, as a retry's wait is; a paced slot at
        DEBUG (``observe.HELD_LEVELS``). Built only when someone hears it: a hook that
        listens, a trace, or the log at that level (under pacing, every call has one)."""
        if admission.cooldown > 0:
            self._say_held_for("cooldown", wait.seconds)
        elif admission.pacing > 0:
            self._say_held_for("pacing", wait.seconds)

    def _say_held_for(self, reason: str, seconds: float) -> None:
        """Tell (a ``held`` event) that ``reason`` holds the next attempt back ``seconds``
        beyond any wait of the call's own, if someone hears it (see :meth:`_say_held`)."""
        if self._trace is None and not self.settings.observer.hears(HELD_LEVELS[reason]):
            return
        call = self.call
        self._tell(
            self._event(
                "held",
                attempt=call.attempts + 1,
                reason=reason,
                wait=seconds,
                elapsed=call.elapsed_so_far(),
            )
        )

    def _patience(self, attempt_time: float) -> float:
        """How long an attempt given ``attempt_time`` seconds waits for an answer: that,
        or the caller's read timeout when shorter (httpx's, over each read, the first one
        the wait for the response's headers), for the breaker to weigh a short timeout
        against (see ``CircuitBreaker.expect_answer``)."""
        read = self.caller_timeouts.get("read")
        return read if read is not None and read < attempt_time else attempt_time

    def returned(self, plan: AttemptPlan, response: httpx.Response) -> Step:
        """The attempt got a response (body read as the plan asked)."""
        first = self._first
        # A fresh call's first attempt: the engine is needed only if this does not end it.
        if (
            first is not None
            and first.plan is plan
            and self._call is None
            and settled_at_once(self.policy, response)
        ):
            self._first = None
            guard = self._guard
            now = monotonic_of(self.settings.clock)
            if guard is not None:
                guard.first_attempt_ended()  # (the call ends here: no flag to set)
                if first.permit is not None:
                    # (admitted while closed; the time the server was given: see
                    # _time_queued)
                    took = now - first.started
                    if self.attempt_sent_at is not None:
                        took = max(0.0, took - self._time_queued())
                    guard.healthy_call(took, self._answer_by)
                    self._answer_by = _NO_ANSWER_EXPECTED
            return first_success(
                self.request,
                response,
                plan,
                dependency=self.dependency,
                call_started=self._started,
                attempt_started=first.started,
                now=now,
            )
        if self._guard is not None:
            self._guard.answer_ended(self._answer_by)
            self._answer_by = _NO_ANSWER_EXPECTED
            if not self._earned:
                self._first_attempt_ended(self._guard)
        if self.gave_up_inside:
            self._note_nested_give_up()
        if response._request is None:
            # A rule may read where the response came from (``response.url``, its
            # method), as on any response httpx hands back: a transport's own is given
            # its request only as httpx's client returns it, after the rules ran.
            response.request = self.request
        if self.attempt_started_at is not None:  # (a timed attempt: see _time_queued)
            self.call.attempt_queued(self._time_queued())
        step = self.call.attempt_returned(plan, response)
        if type(step) is Succeed:
            # The hot path: nothing to ask, and nothing to apply but, at most, one
            # healthy call for a closed breaker.
            effects = self.call.effects
            if not effects:
                return step
            guard = self._guard
            if len(effects) == 1 and effects[0] is HEALTHY_WHILE_CLOSED and guard is not None:
                effects.clear()
                guard.healthy_call(self.call.last_attempt_seconds)
                return step
        step = self._after(step)
        if (type(step) is Wait or type(step) is AttemptPlan) and "set-cookie" in response.headers:
            # Retried, with cookies set: the next attempt carries them.
            from retrysafe.carried_cookies import carry_cookies

            carry_cookies(self.request, response, self.settings.client_cookies)
        return step

    def raised(
        self,
        plan: AttemptPlan,
        exc: Exception,
        *,
        during_body: bool,
        answer: httpx.Response | None = None,
    ) -> Step:
        """The attempt failed with ``exc``; ``answer``, the response whose body it was
        reading, if its headers had come (see ``Call.attempt_raised``)."""
        guard = self._guard
        if guard is not None:
            guard.answer_ended(self._answer_by)
            self._answer_by = _NO_ANSWER_EXPECTED
            if not self._earned:
                self._first_attempt_ended(guard)
            if guard.answered_since(self.call.attempt_started):
                self.call.answered_during_attempt()  # (a timeout is then held: see Call)
        if self.gave_up_inside:
            self._note_nested_give_up()
        if (
            self.sends_noted  # (see _after_sending)
            and self.attempt_sent_at is not None
            and isinstance(exc, httpx.LocalProtocolError)
            and h2_protocol_error(exc)
        ):
            exc = _after_sending(exc, self.request)
        if self.attempt_started_at is not None:  # (a timed attempt: see _time_queued)
            if self.attempt_sent_at is None and type(exc) is AttemptTimedOut:
                # Cut from outside before it was sent, where the network streams note that
                # (its first write over HTTP/1.1, its HEADERS over HTTP/2: see
                # notes_first_writes; a hedged copy's too): its time went on waiting for a
                # connection or a free stream, and the server never saw it.
                exc = httpx.PoolTimeout(UNSENT_IN_TIME)
            self.call.attempt_queued(self._time_queued())
        # (a timeout weighs the time the dependency had, not how late the loop ended it)
        late, self.late_by = self.late_by, 0.0
        self.call.attempt_ended_late(late)
        return self._after(
            self.call.attempt_raised(plan, exc, during_body=during_body, answer=answer)
        )

    def _first_attempt_ended(self, guard: DependencyGuard) -> None:
        """The call's first attempt got its outcome: it earns the retry budget its share,
        once a call, before any retry asks for a token.

        Earned as the attempt ends, not as it is admitted: calls gathered by the
        thousand are admitted together and then wait for the pool's connections, some
        of them for longer than the budget keeps what they earned (``burst_window``);
        earned as each one's answer comes, their earnings come along with the retries
        they pay for (a user trial: 2,000 calls on 10 connections, 100 ms answers, 10 %
        failures, lost 73 calls to ``BudgetExhausted`` earned at admission, none now).
        """
        self._earned = True
        guard.first_attempt_ended()

    def _time_queued(self) -> float:
        """How long the attempt in flight waited for a connection before its request went
        out: the client's own queue (a full pool), time the dependency was not given,
        which what the breaker learns of its answers and timeouts leaves out."""
        sent_at, started_at = self.attempt_sent_at, self.attempt_started_at
        if sent_at is None or started_at is None:
            return 0.0  # (not timed: another client's shell, or nothing written yet)
        return max(0.0, sent_at - started_at)

    def abandoned(self, interrupted_by: BaseException) -> None:
        """The call ended with no outcome, ``interrupted_by`` an exception that is not its
        own end (its task cancelled, a KeyboardInterrupt): free what it held, and tell the
        listeners (a fresh call's first attempt has none: they make a Call from the
        start)."""
        if self._guard is not None and self._answer_by != _NO_ANSWER_EXPECTED:
            # (an attempt given up in flight, unanswered: it must not hold short timeouts
            # back, and confirms those shorter than its wait; a call ending on its error,
            # or cancelled in a wait, has none in flight)
            now = monotonic_of(self.settings.clock)
            first, call = self._first, self._call
            if first is not None:
                started = first.started
            else:
                started = call.attempt_started if call is not None else now
            waited = now - started
            transition = self._guard.answer_abandoned(self._answer_by, waited)
            self._answer_by = _NO_ANSWER_EXPECTED
            if transition is not None and self._call is not None:
                self._emit_transition(transition)
        if self._call is None:
            # A fresh call's first attempt holds nothing to give back (no probe, no paced
            # slot); and a call that ended on it has nothing left to free.
            self._first = None
            return
        self._call.attempt_abandoned(type(interrupted_by).__name__)
        self._apply_effects()

    def hedge(self, hedge: Hedge, request: httpx.Request | None = None) -> AttemptPlan | None:
        """Ask the governor for the hedged copy ``hedge`` and tell the engine: the copy's
        plan, or None when it is refused (and no more copies go this round). ``request``
        is the copy's own request: the call's trace starts the copy's attempt on it."""
        from retrysafe.hedged_call import HedgedCall

        call = self.call
        assert isinstance(call, HedgedCall)
        guard = self._guard
        answer = _HEDGE_GRANTED if guard is None else guard.answer_hedge()
        plan = call.start_hedge(hedge, answer)
        self._apply_effects()
        if plan is not None and request is not None and self._trace is not None:
            self._trace.attempt_starting(plan.number, request)
        return plan

    def _note_nested_give_up(self) -> None:
        self.gave_up_inside = False
        self.call.nested_call_gave_up()

    def _after(self, step: Decision) -> Step:
        # The outcome's effects (breaker health, a cooldown) first: the governor's answer
        # to a retry must already know about the failure that asks for it.
        self._apply_effects()
        if isinstance(step, AskRetry):
            guard = self._guard
            now = monotonic_of(self.settings.clock)
            answer = GRANTED if guard is None else guard.answer_retry(step, now)
            if answer.refusal is not None and guard is not None:
                answer = self._explain_refusal(guard, answer)
            answered = self.call.retry_answered(step, answer)
            self._apply_effects()
            if type(answered) is Wait and answered.seconds > step.wait:
                # (a paced slot held with the grant, further away than the call's own wait)
                self._say_held_for("pacing", answered.seconds - step.wait)
            if type(answered) is Wait and testing_mode.active is not None:
                return self._skipped(answered)
            return answered
        return step

    def _skipped(self, wait: Wait) -> Wait:
        """Testing mode's wait: none, though the call's own deadline counts it as spent (on
        a copy: a deadline scope's is shared by the calls made in it, maybe at once)."""
        call = self.call
        call.deadline = call.deadline.spent(wait.seconds)
        return _INSTANT

    def _explain(self, guard: DependencyGuard, admission: Admission) -> str:
        """What holds the attempt back, with its setting and numbers (for the error)."""
        if admission.detail:
            return admission.detail  # the guard said it already (a fleet's reason)
        limiter = guard.limiter
        if admission.cooldown > 0 and limiter is not None:
            return explain_cooldown(limiter, admission.cooldown)
        if admission.pacing > 0 and limiter is not None:
            return explain_pacing(limiter, admission.pacing)
        if guard.breaker is not None:
            return explain_breaker(guard.breaker, monotonic_of(self.settings.governor.clock))[0]
        return ""

    def _explain_refusal(self, guard: DependencyGuard, answer: RetryAnswer) -> RetryAnswer:
        """The refusal with the setting and numbers behind it (for the error)."""
        if answer.detail:
            return answer  # the guard said it already (a fleet's reason)
        if answer.refusal == "budget_exhausted" and guard.budget is not None:
            detail, retry_after = explain_budget(guard.budget)
        elif guard.breaker is not None:
            detail, retry_after = explain_breaker(
                guard.breaker, monotonic_of(self.settings.governor.clock)
            )
        else:
            return answer
        return answer._replace(retry_after=retry_after, detail=detail)

    def _apply_effects(self) -> None:
        call = self._call
        if call is None or not call.effects:
            return
        effects = call.take_effects()
        guard = self._guard
        # A held first failure and its retry's are told together (the retry's built as a
        # repeat): if the breaker takes the first for the caller's own limit, the second
        # is the call's first evidence after all.
        uncounted = False
        for effect in effects:
            if type(effect) is EmitEvent:
                self.settings.observer.emit(effect.event, body_excerpt=effect.body_excerpt)
                if self._trace is not None:
                    self._trace.event(effect.event)
            elif type(effect) is RecordLatency:
                if isinstance(self.policy.hedge_after, str):  # (only a percentile reads it)
                    self.settings.governor.latencies.record(self.call.dependency, effect.seconds)
            elif effect is HEALTHY_WHILE_CLOSED:
                if guard is not None:  # (with the time it took, for the breaker to learn)
                    guard.healthy_call(self.call.last_attempt_seconds)
            elif guard is not None:
                if type(effect) is RecordHealth:
                    if effect.repeat and uncounted:
                        # (the failure it repeats was the caller's limit: it counts anew)
                        effect = effect._replace(repeat=False)
                    transition, evidence = guard.record_health(effect)
                    if evidence == "callers_limit" and not effect.repeat:
                        self.call.failure_not_counted()  # (the caller's own limit)
                        uncounted = True
                else:
                    transition = guard.apply(effect)
                if transition is not None:
                    self._emit_transition(transition)

    def _emit_transition(self, transition: Transition) -> None:
        self._tell(
            self._event(
                "circuit",
                attempt=self.call.attempts,
                transition=f"{transition.before}->{transition.after}",
            )
        )

    def _event(self, kind: EventKind, **fields: Any) -> RetryEvent:
        """An event of ``kind`` about this call (its dependency, method and redacted URL),
        for what the drive learns itself (the governor's answers), not the engine."""
        call = self.call
        return RetryEvent(
            kind=kind, dependency=call.dependency, method=call.method, url=call.url, **fields
        )

    def _tell(self, event: RetryEvent) -> None:
        """Hand ``event`` to the log and the hooks, and to the call's trace if followed."""
        self.settings.observer.emit(event)
        if self._trace is not None:
            self._trace.event(event)

    # -- the end -----------------------------------------------------------------------

    def finish(self, step: Step) -> httpx.Response:
        """Hand the call's end (a Succeed or a Fail) back the way the shell's caller expects."""
        if type(step) is Succeed:
            response = step.response
            if response.status_code in _REDIRECT_STATUSES:
                self._continue_chain()
            if not self._stream:
                if response.is_closed:  # (its body read in the attempt)
                    _time_read_body(response, step.report.elapsed - self._elapsed_before)
            else:
                if type(response.stream) is RawKeepingStream:  # (read for a rule)
                    _time_read_body(response, step.report.elapsed - self._elapsed_before)
                    unread(response)  # (the caller may stream it: see kept_body)
                self.hand_over_body(self.request)
                if self._trace is not None or _listening(self.settings.observer):
                    self._watch_body(response, step.report)
            return response
        assert isinstance(step, Fail)
        if step.retried:
            parent = self._enclosing()
            if parent is not None:
                parent.gave_up_inside = True
        if step.response is not None and not _dropped(step.response):
            # The report (with its error) rides on the response; httpx's auth and redirect
            # handling sees the response as usual, and retrysafe.Client raises afterwards.
            if step.response.is_closed:  # (a failure's body read in the attempt)
                _time_read_body(step.response, step.report.elapsed - self._elapsed_before)
                if self._stream:
                    unread(step.response)  # (the caller streams it: see kept_body)
            else:  # an answer its headers settled, unread: the caller reads its body
                self.hand_over_body(self.request)
            return step.response
        if step.cause is not None and not self.settings.raise_errors:
            # httpx's own exception, as a drop-in transport promises; with what the call
            # did as a note (PEP 678), which a traceback prints under it.
            add_note = getattr(step.cause, "add_note", None)
            if add_note is not None:
                add_note(f"retrysafe: {step.error}")
            if isinstance(step.error, Refused):
                _say_no_retry_was_sent(step.cause, step.error)
            raise step.cause
        error = step.error
        if step.cause is None and not self.settings.raise_errors:
            # Nothing came back and nothing failed (a refusal, no time for an attempt):
            # the drop-in transport's error is also httpx's own (see transport_errors).
            from retrysafe.transport_errors import as_httpx_error

            error = as_httpx_error(error, self.request)
        # (`raise error from cause`, spelled out: the compiled build drops a `from` cause)
        error.__cause__ = step.cause
        raise error

    def _watch_body(self, response: httpx.Response, report: CallReport) -> None:
        """Hand a streamed success's body over through a watch that tells the listeners
        how it ended (a ``body`` event; see :mod:`retrysafe.body_watch`). The call's
        trace goes with it, to end when the body does: closed then, not with the call."""
        from retrysafe.body_watch import BodyEnd, BodyWatch, drainable, sent_as_made

        if not isinstance(
            self.request.extensions.get(OPTIONS_EXTENSION), CallOptions
        ) and not sent_as_made(response):
            # A drop-in transport's call: httpx reads its body or streams it, which the
            # transport cannot tell; only a body sent as it is made is taken for a stream
            # (the trace, kept, ends as the call closes).
            return
        observer = self.settings.observer
        clock = self.settings.clock
        trace, self._trace = self._trace, None
        handed_at = monotonic_of(clock)
        dependency, method, url = self.dependency, self.request.method, self.call.url

        def ended(how: BodyEnd, exc: Exception | None) -> None:
            event = RetryEvent(
                kind="body",
                dependency=dependency,
                method=method,
                url=url,
                attempt=report.attempts,
                status=response.status_code,
                outcome=how,
                elapsed=report.elapsed + (monotonic_of(clock) - handed_at),
                exception=None if exc is None else type(exc).__name__,
            )
            try:
                observer.emit(event)
            finally:
                if trace is not None:
                    trace.event(event)
                    trace.close()

        response.stream = BodyWatch(response.stream, ended, drains=drainable(response))

    def hand_over_body(self, request: httpx.Request) -> None:
        """The caller reads the body of the answer to ``request`` (the one sent) itself
        now: its reads get the caller's own timeouts, httpx's, not the attempt's.

        httpcore reads the request's timeouts as the body's first read starts. The
        attempt's bounded ones hold what the deadline had left when the attempt started,
        which after a retry may be less than a gap between two chunks of a healthy body.
        """
        given = self.caller_timeouts
        if given:
            request.extensions["timeout"] = dict(given)

    def _continue_chain(self) -> None:
        """Leave this hop's deadline and retries for the redirect's next hop to find."""
        call = self._call
        if call is None:  # a fresh call, ended by its first attempt
            deadline = Deadline(self._started + self.policy.deadline, self.settings.clock)
            retries_used = self._retries_before
        else:
            deadline = call.deadline
            retries_used = self._retries_before + call.attempts - 1
        self.request.extensions[_CHAIN_EXTENSION] = _Chain(
            deadline,
            self.caller_timeouts,
            retries_used,
            self.request,
            self._started - self._elapsed_before,
        )

    def close(self) -> None:
        """Leave the call's nesting context (always, however the call ended), and leave on
        the request the marks a later call sending it again reads (see
        ``_LEFT_TIMEOUTS_EXTENSION``)."""
        if self._trace is not None:
            trace, self._trace = self._trace, None
            trace.close()  # (the observer's trace logs and swallows an instrument's failure)
        if self._token is not None:
            current_call.reset(self._token)
            self._token = None
            extensions = self.request.extensions
            left = extensions.get("timeout")
            # (every request httpx builds carries its timeouts, so every one gets the marks)
            if left is not None:
                extensions[_LEFT_TIMEOUTS_EXTENSION] = dict(left)
                extensions[_CALLER_TIMEOUTS_EXTENSION] = self.caller_timeouts
                header = self.settings.deadline_header
                if header is not None:
                    value = self.request.headers.get(header)
                    if value is not None:
                        extensions[_LEFT_DEADLINE_HEADER_EXTENSION] = (header, value)
