"""Telling the outside world what happened: events, hooks, call instruments and logging.

The engine leaves each thing that happens to a call in its outbox as a
:class:`RetryEvent` value; the drive loop hands it to the log and to every hook.
A hook that also has ``start_call`` (a :class:`CallInstrument`, such as
``retrysafe.telemetry.otel.OpenTelemetry``) additionally follows each call from
start to end (:class:`CallTrace`): that is how a tracer opens a span per call and
per attempt and puts the attempt's trace context on the request it sends.

Logger ``retrysafe`` gets one record per event, each carrying the event's fields
as ``record.retrysafe`` (:func:`event_fields`, one documented shape): an attempt
and a success at DEBUG, a retry at INFO, a wait load protection adds (``held``) at
INFO for a cooldown and DEBUG for a paced slot, a final failure at WARNING (a 4xx the
caller must fix at :attr:`LogSettings.client_error_level`, a ``CircuitOpen``
at DEBUG, since the breaker opening was already a WARNING).
Every URL here is already redacted, and control characters in a message are escaped.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, runtime_checkable

from retrysafe.frozen_value import frozen_value
from retrysafe.lazy_names import lazy_module_functions
from retrysafe.redact import printable

if TYPE_CHECKING:
    import httpx

    from retrysafe.log_settings import LogSettings, configure_logging, log_settings

__all__ = [
    "CallInstrument",
    "CallTrace",
    "EventHook",
    "EventKind",
    "FIRST_COPY",
    "HELD_LEVELS",
    "LogSettings",
    "Observer",
    "RetryEvent",
    "configure_logging",
    "event_fields",
    "event_level",
    "log_settings",
    "logger",
]

logger = logging.getLogger("retrysafe")
# A library never decides where its records go: without this, Python's last-resort
# handler would print every final-failure WARNING to stderr of apps that log nothing.
logger.addHandler(logging.NullHandler())

#: The ``reason`` of a ``hedge`` event ``"won"`` or ``"lost"`` about a hedged round's own
#: attempt, the copy the hedges raced: it is no hedge, and the metrics of hedged copies
#: leave it out (their ``won`` over ``sent`` is then how often a hedge beat it).
FIRST_COPY: Final = "first_copy"

#: What a :class:`RetryEvent` is about.
EventKind = Literal[
    "attempt", "retry", "held", "success", "failure", "interrupted", "circuit", "hedge", "body"
]


@frozen_value
class RetryEvent:
    """One thing that happened to a call; each field means one thing for every kind.

    ``kind``:

    - ``"attempt"``: attempt number ``attempt`` ended (for tracing; built only when
      someone listens: a hook, or the log at DEBUG);
    - ``"retry"``: that attempt failed and another follows after ``wait`` seconds;
    - ``"held"``: the dependency's load protection holds attempt number ``attempt``
      back for ``wait`` seconds, on top of any wait of the call's own: ``reason`` is
      ``"cooldown"`` (another call's answer paused every caller: a 429, a rate limit
      announced used up, or, in a fleet sharing them, a 503's Retry-After) or
      ``"pacing"`` (the attempt waits for its paced slot);
    - ``"success"`` / ``"failure"``: the call is over;
    - ``"interrupted"``: the call is over with no outcome of its own: an exception that is
      not its end raised through it (its task was cancelled, a ``KeyboardInterrupt``):
      ``exception`` names it, ``attempt`` counts the attempts started (no retrysafe error
      is raised); an attempt it cut in flight ends first (its ``attempt`` event, outcome
      ``"interrupted"``);
    - ``"circuit"``: the dependency's breaker changed state (``transition``);
    - ``"hedge"``: a hedged copy (number ``attempt``) was ``outcome`` ``"sent"``,
      ``"won"`` (its answer, a success or a final one, decided the call), ``"lost"``
      (cancelled: another copy won) or ``"refused"`` (then ``reason`` says why:
      ``"circuit_not_closed"``, ``"budget_exhausted"``...); the hedged round's own
      attempt, which the copies raced, wins or loses too, with ``reason``
      :data:`FIRST_COPY`;
    - ``"body"``: a streamed call's body, handed to the caller after its ``success``,
      ended: ``outcome`` ``"complete"`` (read to its end), ``"broken"`` (a read raised:
      ``exception`` names it) or ``"abandoned"`` (closed before its end); ``elapsed``
      then runs to the body's end (built only when someone listens).

    Fields:

    - ``attempt``: the number (1-based) of the attempt the event is about; for
      ``failure``, ``success``, ``interrupted`` and ``circuit``, the attempts made so
      far.
    - ``status``: that attempt's HTTP status, None when it got no response.
    - ``outcome``: what that attempt got, a stable code (``"success"``,
      ``"service_unavailable"``, ``"read_timeout"``...); ``""`` when no attempt was
      made (a call refused before sending), for ``circuit`` and for ``interrupted``.
    - ``reason``: why the call stopped (``failure``: ``"attempts_exhausted"``,
      ``"circuit_open"``, ``"unsafe_to_repeat"``...), or why a hedged copy was
      refused, or what holds an attempt back (``held``); ``""`` for every other kind.
    - ``wait``: seconds until the next attempt (``retry`` and ``held``, else 0).
    - ``elapsed``: seconds since the call started.
    - ``error``: the class name of the error a ``failure`` raises (``"ServerError"``).
    - ``exception``: the class name of the exception that attempt ended with
      (``"ReadTimeout"``), None when it got a response; for ``interrupted``, of the one
      that ended the call (``"CancelledError"``).
    - ``transition``: ``circuit`` only: ``"closed->open"`` and the like.

    ``dependency``, ``method`` and ``url`` (secrets redacted) name the call.
    """

    kind: EventKind
    dependency: str
    method: str
    url: str
    attempt: int
    status: int | None = None
    outcome: str = ""
    reason: str = ""
    wait: float = 0.0
    elapsed: float = 0.0
    error: str | None = None
    exception: str | None = None
    transition: str = ""


def event_fields(event: RetryEvent) -> dict[str, Any]:
    """The event as a flat dict: the one shape every log record (``record.retrysafe``)
    and every structlog entry carries, with exactly :class:`RetryEvent`'s field names."""
    return {
        "kind": event.kind,
        "dependency": event.dependency,
        "method": event.method,
        "url": event.url,
        "attempt": event.attempt,
        "status": event.status,
        "outcome": event.outcome,
        "reason": event.reason,
        "wait": event.wait,
        "elapsed": event.elapsed,
        "error": event.error,
        "exception": event.exception,
        "transition": event.transition,
    }


class EventHook(Protocol):
    """Anything called with each :class:`RetryEvent`: a metrics counter, a log sink...

    A hook may also have a ``listening`` attribute (a bool, or a property read once
    per call): while it is False the hook does not need a successful call's routine
    events (``attempt``, ``success``), which are then not even built, and a call
    instrument is not asked to follow the call. Retries, failures and breaker
    changes still reach it. Without the attribute a hook always listens.
    """

    def __call__(self, event: RetryEvent, /) -> None: ...


class CallTrace(Protocol):
    """Follows one call for a :class:`CallInstrument` (a span per call and per attempt).

    The drive loop calls :meth:`attempt_starting` just before each attempt is sent
    (the request may be given headers, such as the attempt's trace context, and
    the attempt's context may be entered), :meth:`event` with each of the call's
    events in order (an ``attempt`` event ends the attempt it names), and
    :meth:`close` exactly once when the call is over, however it ended (cancelled too).

    A hedging call (``RetryPolicy(hedge_after=...)``) has several attempts in flight:
    :meth:`attempt_starting` is called for each hedged copy, with the copy's number
    and its own request, before the earlier copies have ended; each copy ends with
    its own ``attempt`` event (a copy that lost: outcome ``"hedge_lost"``). Every
    call is made on the thread (and task) that made the HTTP call, and each copy is
    sent in a copy of the context current just after its :meth:`attempt_starting`.

    A streamed call (``client.stream(...)``) whose headers succeed hands its body to the
    caller: its ``body`` event, then :meth:`close`, come when the caller's reading stops,
    from the code that reads it. A trace may have a ``body_follows()`` method, called
    before the call's first attempt when the call streams, to know that a ``success``
    is not its end.
    """

    def attempt_starting(self, number: int, request: httpx.Request) -> None: ...

    def event(self, event: RetryEvent) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class CallInstrument(Protocol):
    """A hook that also follows every call: ``start_call`` is asked once per call."""

    def __call__(self, event: RetryEvent, /) -> None: ...

    def start_call(self, request: httpx.Request, *, dependency: str, url: str) -> CallTrace | None:
        """Start following a call of ``request`` (``url`` is its URL, secrets redacted);
        None: this call is not followed (say, a tracer that records nothing)."""
        ...


#: The level of a final failure the caller must fix (see
#: :attr:`LogSettings.client_error_level`); set by :func:`configure_logging`.
_client_error_level = logging.WARNING

#: Names this module hands out from :mod:`retrysafe.log_settings`, loaded when first read.
_LAZY = {
    name: "retrysafe.log_settings" for name in ("LogSettings", "configure_logging", "log_settings")
}
__getattr__, __dir__ = lazy_module_functions(__name__, _LAZY, globals(), __all__)


class _Traces:
    """One call's traces, from one instrument or several, followed as one; a trace
    that raises is logged and the call goes on (telemetry never fails a call)."""

    __slots__ = ("_traces",)

    def __init__(self, traces: Sequence[CallTrace]) -> None:
        self._traces = tuple(traces)

    def attempt_starting(self, number: int, request: httpx.Request) -> None:
        for trace in self._traces:
            try:
                trace.attempt_starting(number, request)
            except Exception:
                logger.exception("retrysafe call trace %r failed; the call goes on", trace)

    def event(self, event: RetryEvent) -> None:
        # In reverse, as close: an attempt's end leaves the context its start entered, and
        # the trace that entered last must leave first (or it restores another's attempt).
        for trace in reversed(self._traces):
            try:
                trace.event(event)
            except Exception:
                logger.exception("retrysafe call trace %r failed; the call goes on", trace)

    def body_follows(self) -> None:
        """The call streams (see :class:`CallTrace`): told to the traces that ask."""
        for trace in self._traces:
            follows = getattr(trace, "body_follows", None)
            if follows is not None:
                try:
                    follows()
                except Exception:
                    logger.exception("retrysafe call trace %r failed; the call goes on", trace)

    def close(self) -> None:
        # Closed in reverse: each trace leaves the context it entered, innermost first.
        for trace in reversed(self._traces):
            try:
                trace.close()
            except Exception:
                logger.exception("retrysafe call trace %r failed; the call goes on", trace)


class Observer:
    """Sends each event to the log and to every hook; a failing hook never fails the call."""

    __slots__ = (
        "_always",
        "_failed",
        "_hooks",
        "_instruments",
        "_sometimes",
        "hooked",
        "instrumented",
    )

    def __init__(self, hooks: Sequence[EventHook] = ()) -> None:
        self._hooks = tuple(hooks)
        #: The hooks (by id: they are held in ``_hooks``) that have raised once already.
        self._failed: set[int] = set()
        self._instruments = tuple(hook for hook in self._hooks if isinstance(hook, CallInstrument))
        #: Whether some hook follows every call (a :class:`CallInstrument`): a plain
        #: attribute, read once per call.
        self.instrumented = bool(self._instruments)
        #: Whether there is any hook at all: with none, only the log can listen (see
        #: :func:`debug_logged`), which the drive asks without this property's frame.
        self.hooked = bool(self._hooks)
        #: Hooks that say when they listen (``listening``), and whether any other hook is.
        self._sometimes = tuple(hook for hook in self._hooks if hasattr(hook, "listening"))
        self._always = len(self._sometimes) < len(self._hooks)

    @property
    def listening(self) -> bool:  # (drive.py asks the same, in short, when not hooked)
        """Whether anyone hears routine events (a hook, or the log at DEBUG): if not,
        a successful call need not build its event at all."""
        return self.hears(logging.DEBUG)

    def hears(self, level: int) -> bool:
        """Whether anyone hears an event logged at ``level``: a hook that listens, or the
        log at that level (an event nobody hears need not be built)."""
        if self._always or logger.isEnabledFor(level):
            return True
        for hook in self._sometimes:  # noqa: SIM110 - a loop, not any(): no generator per call
            if hook.listening:
                return True
        return False

    def start_call(
        self, request: httpx.Request, *, dependency: str, url: str, stream: bool = False
    ) -> CallTrace | None:
        """Let every call instrument start following this call; None if none would.
        ``stream``: the caller streams the body (see :class:`CallTrace`)."""
        traces: list[CallTrace] = []
        for instrument in self._instruments:
            if not getattr(instrument, "listening", True):
                continue
            try:
                trace = instrument.start_call(request, dependency=dependency, url=url)
            except Exception:
                logger.exception("retrysafe instrument %r failed; the call goes on", instrument)
                continue
            if trace is not None:
                traces.append(trace)
        if not traces:
            return None
        followed = _Traces(traces)
        if stream:
            followed.body_follows()
        return followed

    def emit(self, event: RetryEvent, *, body_excerpt: str = "") -> None:
        """Log ``event`` and hand it to the hooks. A hook that raises is logged at ERROR
        with its traceback the first time, and at DEBUG after that: every event of every
        call would otherwise log one (four for a call retried once), a storm at
        production rates."""
        _log(event, body_excerpt)
        for hook in self._hooks:
            try:
                result: object = hook(event)  # type: ignore[func-returns-value]
                if result is not None and inspect.isawaitable(result):
                    # (an async hook the shell could not tell, a lambda around one: its
                    # coroutine is never awaited, so it never runs; said, not hidden)
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()
                    raise TypeError(
                        "the hook returned an awaitable, which retrysafe does not await: "
                        "it never ran; give a plain function"
                    )
            except Exception:
                if id(hook) in self._failed:
                    logger.debug("retrysafe event hook %r failed again", hook, exc_info=True)
                else:
                    self._failed.add(id(hook))
                    logger.exception(
                        "retrysafe event hook %r failed; the call goes on (later failures "
                        "of this hook are logged at DEBUG)",
                        hook,
                    )

    def __repr__(self) -> str:
        return f"Observer({len(self._hooks)} hooks)"


def event_level(event: RetryEvent) -> int:
    """The level of the record for ``event``. Attempts, successes and interrupted calls
    are DEBUG, retries INFO; a final failure is a WARNING, except a CircuitOpen (refused
    before an attempt, or a retry refused after one), which is DEBUG (the breaker
    opening is already one WARNING, and an outage must not turn every cheap
    fail-fast call into a log line), and a ClientError, which is
    at the configured :attr:`LogSettings.client_error_level`."""
    kind = event.kind
    if kind == "failure":
        if event.error == "CircuitOpen":
            return logging.DEBUG
        if event.error == "ClientError":
            return _client_error_level
        return logging.WARNING
    if kind == "retry":
        return logging.INFO
    if kind == "held":
        return HELD_LEVELS.get(event.reason, logging.DEBUG)
    if kind == "circuit":
        return logging.WARNING if event.transition.endswith("->open") else logging.INFO
    if kind == "body" and event.outcome == "broken":
        return logging.INFO  # (the caller got the exception itself: not a WARNING again)
    # (and ``interrupted``: most often the caller's own doing, a cancelled task, and
    # the caller gets the exception)
    return logging.DEBUG


#: The level of a ``held`` event, by its reason: a cooldown makes the call that much
#: longer for another call's 429, with no retry of its own to show for it (INFO, as a
#: retry); under pacing, waiting for a slot is how every call goes (DEBUG).
HELD_LEVELS: Final[dict[str, int]] = {"cooldown": logging.INFO, "pacing": logging.DEBUG}
#: What holds an attempt back, by a ``held`` event's reason, as its log line says it.
_HELD_FOR = {
    "cooldown": (
        "the dependency's cooldown (another call's answer paused every caller: a 429, a "
        "used-up rate limit, or a shared 503's Retry-After)"
    ),
    "pacing": "a paced slot of the dependency",
}


#: How a ``body`` event's outcome reads in its log line.
_BODY_ENDS = {
    "complete": "was read to its end",
    "broken": "broke off",
    "abandoned": "was closed before its end",
}


def _log(event: RetryEvent, body_excerpt: str) -> None:
    level = event_level(event)
    if not logger.isEnabledFor(level):
        return
    fields = {"retrysafe": event_fields(event)}
    # The message is one line whatever a server or a rule put in these texts: control
    # characters are escaped (the structured fields keep the values as they are).
    method, url, dependency = (
        printable(event.method),
        printable(event.url),
        printable(event.dependency),
    )
    outcome = printable(event.outcome)
    status = f"HTTP {event.status} " if event.status is not None else ""
    kind = event.kind
    if kind == "retry":
        logger.log(
            level,
            "retrying %s %s [%s]: attempt %d got %s%s, waiting %.3fs",
            method,
            url,
            dependency,
            event.attempt,
            status,
            outcome,
            event.wait,
            extra=fields,
        )
    elif kind == "held":
        logger.log(
            level,
            "%s %s [%s] waits %.2f s for %s before attempt %d",
            method,
            url,
            dependency,
            event.wait,
            _HELD_FOR.get(event.reason) or printable(event.reason),
            event.attempt,
            extra=fields,
        )
    elif kind == "failure":
        # (as the error's message: the reason only when it says more than the outcome)
        gave_up = "" if event.reason == event.outcome else f", gave up: {printable(event.reason)}"
        logger.log(
            level,
            "%s %s [%s] failed after %d attempt(s): %s%s%s (%s)%s",
            method,
            url,
            dependency,
            event.attempt,
            status,
            outcome or "nothing sent",
            gave_up,
            event.error,
            f" body: {printable(body_excerpt)}" if body_excerpt else "",
            extra=fields,
        )
    elif kind == "interrupted":
        logger.log(
            level,
            "%s %s [%s] was interrupted after %d attempt(s) by %s",
            method,
            url,
            dependency,
            event.attempt,
            printable(event.exception or "an exception"),
            extra=fields,
        )
    elif kind == "attempt":
        logger.log(
            level,
            "%s %s [%s]: attempt %d got %s%s",
            method,
            url,
            dependency,
            event.attempt,
            status,
            outcome,
            extra=fields,
        )
    elif kind == "circuit":
        logger.log(level, "circuit %s [%s]", printable(event.transition), dependency, extra=fields)
    elif kind == "hedge":
        logger.log(
            level,
            "%s %s [%s]: hedged copy %d %s%s",
            method,
            url,
            dependency,
            event.attempt,
            event.outcome,
            f" ({printable(event.reason)})" if event.reason else "",
            extra=fields,
        )
    elif kind == "body":
        logger.log(
            level,
            "%s %s [%s]: the streamed body of attempt %d (%s) %s after %.3fs",
            method,
            url,
            dependency,
            event.attempt,
            status.strip(),
            _BODY_ENDS.get(event.outcome, outcome)
            + (f" ({printable(event.exception)})" if event.exception else ""),
            event.elapsed,
            extra=fields,
        )
    else:
        logger.log(
            level,
            "%s %s [%s] succeeded after %d attempts",
            method,
            url,
            dependency,
            event.attempt,
            extra=fields,
        )
