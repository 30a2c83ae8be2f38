"""The simulator's shell: drives retrysafe's real engine, through :class:`retrysafe.drive.Drive`,
on the event loop instead of sockets and sleeps.

It is the third shell beside the sync and async transports, and does what they
do: per call one ``Drive`` (the engine, the governor's answers, the effects),
and then only "send" an attempt, hand the engine what came back, and "sleep"
by scheduling the next step. No retry decision is made here.

A simulated dependency is a :data:`SendAttempt`: given the attempt, it arranges
(on the loop) for ``reply`` to be called later with an ``httpx.Response`` or an
exception. An attempt whose reply comes after its timeout ends in a timeout, as
on a real socket.

A policy with ``hedge_after`` hedges here as on the real shells, on the virtual
clock: when the engine says a copy is due (``next_hedge``), the shell wakes then,
asks the governor through ``Drive.hedge`` and, if granted, sends the copy to the
dependency like any attempt; the first usable answer ends the attempt, and the
answers of the copies that lost are ignored when they come (the dependency did
the work all the same).

Each call runs in its own :class:`contextvars.Context`, a copy of the one it was
started from, as an asyncio task would: a call started inside another call's
attempt sees it as its parent (the nesting guard), and a deadline scope entered
around a call reaches every call below it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Callable
from typing import Protocol

import httpx

from retrysafe.call_options import OPTIONS_EXTENSION, CallOptions
from retrysafe.classify import AttemptTimedOut
from retrysafe.decisions import (
    AttemptPlan,
    AwaitOthers,
    CallReport,
    Fail,
    Hedge,
    ReadBody,
    Succeed,
    Wait,
)
from retrysafe.drive import Drive, Step
from retrysafe.governor import Governor
from retrysafe.hedged_call import HedgedCall
from retrysafe.observe import Observer, RetryEvent
from retrysafe.policy import RetryPolicy
from retrysafe.shell_settings import ShellSettings
from retrysafe.simulate.clock import SimClock
from retrysafe.simulate.events import EventLoop

__all__ = ["CallEnd", "EventCount", "Outcome", "Reply", "SendAttempt", "SimCall", "SimShell"]

#: What an attempt came back with: a response, or the exception it raised.
Outcome = httpx.Response | Exception
#: How a simulated dependency hands an attempt's outcome back to the call.
Reply = Callable[[Outcome], None]


class SendAttempt(Protocol):
    """A simulated dependency: take one attempt of ``call`` and, later, ``reply``."""

    def __call__(self, call: SimCall, plan: AttemptPlan, reply: Reply, /) -> None: ...


@dataclasses.dataclass(frozen=True)
class CallEnd:
    """How one simulated call ended, read from the engine's report."""

    ok: bool
    attempts: int
    started: float
    ended: float
    #: The give-up reason (``attempts_exhausted``, ``circuit_open``...), None on success.
    reason: str | None
    #: The error's class name, None on success.
    error: str | None

    @property
    def refused_unsent(self) -> bool:
        """Failed without sending anything: retrysafe's own protection refused it."""
        return not self.ok and self.attempts == 0


class EventCount(Observer):
    """The shell's observer: counts the events instead of logging thousands of them."""

    __slots__ = ("breaker_opened", "failures", "retries")

    def __init__(self) -> None:
        super().__init__(())
        self.retries = 0
        self.failures = 0
        self.breaker_opened = 0

    def emit(self, event: RetryEvent, *, body_excerpt: str = "") -> None:
        if event.kind == "retry":
            self.retries += 1
        elif event.kind == "failure":
            self.failures += 1
        elif event.kind == "circuit" and event.transition.endswith("->open"):
            self.breaker_opened += 1


class SimShell:
    """One simulated client: a policy, a governor, and the dependency it calls."""

    def __init__(
        self,
        loop: EventLoop,
        *,
        policy: RetryPolicy,
        governor: Governor,
        send: SendAttempt,
        dependency: str = "dependency",
    ) -> None:
        self.loop = loop
        self.policy = policy
        self.governor = governor
        self.send = send
        self.dependency = dependency
        self.observer = EventCount()

    def settings_for(self, clock: SimClock) -> ShellSettings:
        """The settings of calls that draw their jitter from ``clock``."""
        return ShellSettings(
            policy=self.policy,
            clock=clock,
            governor=self.governor,
            observer=self.observer,
            dependency=self.dependency,
            raise_errors=True,
        )

    def start(
        self,
        request: httpx.Request,
        settings: ShellSettings,
        on_end: Callable[[CallEnd], None],
        *,
        context: contextvars.Context | None = None,
        within: Callable[[], None] | None = None,
    ) -> SimCall:
        """Start a call of ``request`` now; ``on_end`` hears how it ended.

        ``context``: the context it starts from (a copy is made), by default an empty
        one. ``within``: run first inside the call's own context (e.g. to enter a
        deadline scope that the call and any below it share).
        """
        call = SimCall(self, request, settings, on_end, context, within)
        call.advance()
        return call


class SimCall:
    """One call in flight: the Drive, its context, and the attempt it waits for."""

    __slots__ = (
        "_attempt",
        "_on_end",
        "_sent",
        "_started",
        "children",
        "context",
        "drive",
        "ended",
        "shell",
    )

    def __init__(
        self,
        shell: SimShell,
        request: httpx.Request,
        settings: ShellSettings,
        on_end: Callable[[CallEnd], None],
        context: contextvars.Context | None,
        within: Callable[[], None] | None,
    ) -> None:
        self.shell = shell
        self._on_end = on_end
        if OPTIONS_EXTENSION not in request.extensions:
            request.extensions[OPTIONS_EXTENSION] = _READ_BODY  # as retrysafe.Client does
        self.context = (context if context is not None else _EMPTY).copy()
        if within is not None:
            self.context.run(within)
        self.drive = self.context.run(Drive, settings, request)
        self._started = shell.loop.now
        #: Numbers the attempt in flight; a reply or timeout for an older one is ignored.
        self._attempt = 0
        #: Attempts sent (hedged copies too): what a cancelled call reports as made.
        self._sent = 0
        #: Calls started inside the attempt in flight (cancelled if it times out).
        self.children: list[SimCall] = []
        self.ended = False

    @property
    def request(self) -> httpx.Request:
        return self.drive.request

    def advance(self) -> None:
        """Ask for the next attempt (at the start, and when a wait is over)."""
        if not self.ended:
            self._take(self.context.run(self.drive.next_attempt))

    def _take(self, step: Step) -> None:
        kind = type(step)
        if kind is AttemptPlan:
            assert isinstance(step, AttemptPlan)
            self._attempt += 1  # a new attempt (with a hedging policy: a new round of copies)
            self._send(step)
            self._arm_hedge()
        elif kind is Wait:
            assert isinstance(step, Wait)
            self.shell.loop.after(step.seconds, self.advance)
        elif kind is AwaitOthers:
            self._arm_hedge()  # another copy is in flight: its answer decides
        else:
            assert isinstance(step, (Succeed, Fail))
            self._end(step)

    def _send(self, plan: AttemptPlan) -> None:
        """Send one copy of the attempt in flight (the only one, without hedging)."""
        number = self._attempt
        if plan.timeout != math.inf:
            self.shell.loop.after(plan.timeout, self._timed_out, number, plan)

        def reply(outcome: Outcome) -> None:
            self._replied(number, plan, outcome)

        self._sent += 1
        self.shell.send(self, plan, reply)

    def _arm_hedge(self) -> None:
        """With a hedging policy: wake up on the virtual clock when the next copy is due."""
        call = self.drive.call
        if not isinstance(call, HedgedCall):
            return
        hedge = call.next_hedge()
        if hedge is not None:
            delay = max(0.0, hedge.at - self.drive.settings.clock.monotonic())
            self.shell.loop.after(delay, self._hedge_due, self._attempt, hedge)

    def _hedge_due(self, number: int, hedge: Hedge) -> None:
        """A copy is due: ask the governor through the Drive, send it if granted."""
        call = self.drive.call
        assert isinstance(call, HedgedCall)
        if number != self._attempt or self.ended or call.next_hedge() != hedge:
            return  # the attempt is over, or this copy went already
        plan = self.context.run(self.drive.hedge, hedge)
        if plan is not None:
            self._send(plan)
            self._arm_hedge()

    def _current(self, number: int, plan: AttemptPlan) -> bool:
        """Whether ``plan``'s outcome is still awaited (not timed out, not lost)."""
        if number != self._attempt or self.ended:
            return False
        call = self.drive.call
        return not isinstance(call, HedgedCall) or call.in_flight(plan)

    def _replied(self, number: int, plan: AttemptPlan, outcome: Outcome) -> None:
        if not self._current(number, plan):
            return  # the attempt timed out, lost, or the call was cancelled before this came
        if isinstance(outcome, httpx.Response):
            step = self.context.run(self.drive.returned, plan, outcome)
            if type(step) is ReadBody:  # the simulated body is in memory already
                step = self.context.run(self.drive.returned, plan, outcome)
        else:
            step = self.context.run(self.drive.raised, plan, outcome, during_body=False)
        if type(step) is not AwaitOthers:
            self._attempt += 1  # the attempt is over: late answers of its copies are ignored
            self.children.clear()
        self._take(step)

    def _timed_out(self, number: int, plan: AttemptPlan) -> None:
        if not self._current(number, plan):
            return
        for child in self.children:
            child.cancel()  # work started for this attempt is abandoned with it
        self._replied(number, plan, AttemptTimedOut("the attempt's time ran out"))

    def cancel(self) -> None:
        """Abandon the call (its caller's attempt ended): free what it holds, stop."""
        if self.ended:
            return
        for child in self.children:
            child.cancel()
        # (as an async shell's nested call is: its task cancelled with its caller's attempt)
        self.context.run(self.drive.abandoned, asyncio.CancelledError())
        self.context.run(self.drive.close)
        self.ended = True
        # (the engine counts attempts that ended; the ones in flight were sent too)
        self._on_end(
            CallEnd(False, self._sent, self._started, self.shell.loop.now, "cancelled", None)
        )

    def _end(self, step: Succeed | Fail) -> None:
        self.ended = True
        drive = self.drive
        # finish() tells an enclosing call that this one retried; it then returns the
        # response or raises the error, both of which are read from the step below.
        with contextlib.suppress(Exception):
            self.context.run(drive.finish, step)
        self.context.run(drive.close)
        report: CallReport = step.report
        if type(step) is Succeed:
            end = CallEnd(True, report.attempts, self._started, self.shell.loop.now, None, None)
        else:
            assert isinstance(step, Fail)
            error = step.error
            end = CallEnd(
                False,
                report.attempts,
                self._started,
                self.shell.loop.now,
                error.reason,
                type(error).__name__,
            )
        self._on_end(end)


_READ_BODY = CallOptions()
_EMPTY = contextvars.Context()
