"""Ending async attempts at their time, on asyncio, with one timer per event loop.

A transport without an httpcore pool (``MockTransport``, ``ASGITransport``, a
custom one) has no network reads that :mod:`retrysafe.attempt_deadline` could
bound, so an attempt on it runs under a time limit. ``asyncio.timeout`` would
arm and cancel a timer for every attempt, which costs more than all of
retrysafe's own decisions on a successful call. One :class:`AttemptWatchdog` per
event loop serves every attempt instead:

- an attempt tells it how long it has (:meth:`~AttemptWatchdog.watch`, a set
  insert) and takes its watch back when it ends (:meth:`~Watch.end`);
- one timer, armed for the earliest end, cancels the task of every attempt due by
  then, and re-arms for the next end. While calls end in time it fires about once
  per attempt timeout, finds nothing due, and re-arms. An attempt is cancelled only
  once the time it was due by has come in the loop's own order: a late loop runs a
  caller's timer that was due first before this one, as it would with
  ``asyncio.timeout``. When the loop runs so late that other attempts are due too,
  each of them gets a timer of its own at its end, so the loop's next turn cancels
  them all, in the order they were due (a caller's timer the loop had already taken up
  in this turn runs before them, whenever it was due).

An attempt due while its task runs shielded from cancellation by a scope entered
within the attempt (an anyio cancel scope with ``shield=True``, as httpcore's clean-up of
a finished request runs in) is cancelled once the shield ends: ``Task.cancel()`` reaches
into a shield, and a clean-up cut there leaves a connection busy for ever. A shield the
caller entered around the call does not hold the cut back.

The attempt tells its own timeout from any other cancellation as
``asyncio.timeout`` does: it notes the task's cancel count when it starts, and a
``CancelledError`` it catches is its timeout only if its watch fired and, with
that one cancel taken back (``Task.uncancel``), the count is back where it was.
The cancel is taken back however the attempt ends, even when the transport
swallowed it, so the task is never left looking cancelled.

Ends are on the loop's clock (``loop.time()``). A shell made for one transport keeps
one :class:`AttemptTimer`, which holds the watchdog of the loop its attempts last ran
on; none is shared between transports, so nothing outlives the loop but what the
transport itself keeps.

Python 3.11+ (``Task.uncancel``); elsewhere, and on trio, the shell uses anyio's
cancel scope.
"""

from __future__ import annotations

import asyncio
import math
import sys

__all__ = ["AttemptTimer", "AttemptWatchdog", "Watch"]

#: Whether this Python's asyncio can take a cancel back (``Task.uncancel``, 3.11+).
_CAN_UNCANCEL = hasattr(asyncio.Task, "uncancel")


class AttemptTimer:
    """Ends one transport's async attempts at their time, on whichever asyncio loop they
    run: it holds the watchdog of the loop they last ran on."""

    __slots__ = ("_dog",)

    def __init__(self) -> None:
        self._dog: AttemptWatchdog | None = None

    def start(self, seconds: float) -> Watch | None:
        """Cancel the current task unless the attempt it starts now ends within
        ``seconds``; None if no watchdog can (no asyncio loop runs, as on trio, or it
        cannot take a cancel back, before Python 3.11; or the attempt is no asyncio
        task's, as trio code run beside an asyncio loop is): the shell then bounds the
        attempt itself."""
        loop = asyncio._get_running_loop()
        dog = self._dog
        if dog is None or dog.loop is not loop:
            self._dog = None  # (an earlier loop's: not kept alive by this transport)
            if loop is None or not _CAN_UNCANCEL:
                return None
            dog = self._dog = AttemptWatchdog(loop)
        return dog.watch(seconds)


class Watch:
    """One attempt's end, kept by the watchdog while the attempt runs."""

    __slots__ = (
        "_dog",
        "cancelling",
        "ends_at",
        "fired",
        "outer_scope",
        "overdue",
        "taken_back",
        "task",
    )

    def __init__(
        self,
        dog: AttemptWatchdog,
        task: asyncio.Task[object],
        ends_at: float,
        cancelling: int,
        outer_scope: object,
    ) -> None:
        self._dog = dog
        self.task = task
        #: The task's innermost anyio cancel scope when the attempt started (None: none):
        #: a shield there or further out is the caller's, and does not hold the cut back.
        self.outer_scope = outer_scope
        #: When the attempt must end, on the loop's clock.
        self.ends_at = ends_at
        #: The task's cancel count when the attempt started (see the module's docstring).
        self.cancelling = cancelling
        #: The watchdog cancelled the task because this attempt ran out of time.
        self.fired = False
        #: Its end passed while the loop ran late: a timer of its own cancels it.
        self.overdue = False
        #: That cancel was taken back (by :meth:`caught` or :meth:`end`).
        self.taken_back = False

    def caught(self, exc: BaseException) -> bool:
        """Whether ``exc``, which ended the attempt, is its own timeout (the cancel is
        then taken back); if not (another exception, or the caller's cancel), it must
        propagate."""
        if not self.fired or self.taken_back or not isinstance(exc, asyncio.CancelledError):
            return False
        return self._take_back() <= self.cancelling

    def end(self) -> None:
        """The attempt ended (however): its time no longer matters, and a cancel of its
        own that it did not take back (the transport swallowed it) is taken back now."""
        self._dog._watches.discard(self)
        if self.fired and not self.taken_back:
            self._take_back()

    def _take_back(self) -> int:
        """Take the watchdog's cancel back; the task's cancel count after it."""
        self.taken_back = True
        if sys.version_info >= (3, 11):  # (the shell uses a watchdog on 3.11+ only)
            return self.task.uncancel()
        return 0  # pragma: no cover


class AttemptWatchdog:
    """The attempts in flight on one event loop, and the one timer that ends them."""

    __slots__ = ("_armed_at", "_handle", "_watches", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        #: The loop this watchdog serves.
        self.loop = loop
        self._watches: set[Watch] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def watch(self, seconds: float) -> Watch | None:
        """Cancel the current task unless the attempt it runs ends within ``seconds``
        from now (the watch's :meth:`~Watch.end` says it did); None if no asyncio task
        runs it: trio code run while an asyncio loop runs (trio-asyncio's loop, trio as
        a guest of asyncio) is not the loop's to cancel."""
        loop = self.loop
        task = asyncio.current_task(loop)
        if task is None:
            return None
        # (on the loop's own clock, read now: a test loop may keep virtual time, and a
        # test may patch the clock the loop reads)
        ends_at = loop.time() + seconds
        # (a watchdog is made on 3.11+ only, where tasks count their cancels; a constant,
        # not a version check, on every attempt)
        cancelling: int = task.cancelling()  # type: ignore[attr-defined,unused-ignore]
        entry = Watch(self, task, ends_at, cancelling, _innermost_scope(task))
        self._watches.add(entry)
        if ends_at < self._armed_at:
            self._arm(ends_at)
        return entry

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = when
        self._handle = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        # The attempts due by the time this timer was armed for: the loop runs timers in
        # the order they are due, so a later end waits for its own turn.
        due_by = self._armed_at
        now = self.loop.time()
        self._handle = None
        self._armed_at = math.inf
        earliest = math.inf
        for entry in self._watches:
            if entry.fired or entry.overdue:
                continue
            if entry.ends_at <= due_by:
                self._cancel(entry)
            elif entry.ends_at <= now:
                # Due already: the loop runs late. A timer of its own, at its own end,
                # so that the loop's next turn runs every one due, in the order they
                # were due among the timers it takes up then. (Re-armed for the next
                # end only, the one timer cancelled one attempt per turn: under load
                # each next end came a turn later, and attempts of 0.5 s ran for 1.5 s.)
                entry.overdue = True
                self.loop.call_at(entry.ends_at, self._cancel_overdue, entry)
            elif entry.ends_at < earliest:
                earliest = entry.ends_at
        if earliest != math.inf:
            self._arm(earliest)

    def _cancel_overdue(self, entry: Watch) -> None:
        if not entry.fired and entry in self._watches:  # (not ended meanwhile)
            self._cancel(entry)

    def _cancel(self, entry: Watch) -> None:
        """Cancel the task of ``entry``, due now; or, while the task runs shielded from
        cancellation, a little later (its own timer, as an overdue one)."""
        if _shielded_within(entry.task, entry.outer_scope):
            entry.overdue = True
            self.loop.call_later(_SHIELD_RECHECK, self._cancel_overdue, entry)
            return
        entry.fired = True
        entry.task.cancel()


#: How often a due attempt whose task runs shielded is looked at again (seconds).
_SHIELD_RECHECK = 0.005


def _innermost_scope(task: asyncio.Task[object]) -> object:
    """The innermost anyio cancel scope ``task`` runs in now, or None (none, or anyio not
    loaded). anyio keeps it in a private table; where that is not found, None."""
    backend = sys.modules.get("anyio._backends._asyncio")
    if backend is None:
        return None
    state = getattr(backend, "_task_states", _NO_STATES).get(task)
    return getattr(state, "cancel_scope", None)


_NO_STATES: dict[object, object] = {}


def _shielded_within(task: asyncio.Task[object], outer_scope: object) -> bool:
    """Whether ``task`` runs inside an anyio cancel scope that shields it from
    cancellation and that it entered after ``outer_scope`` (its innermost scope when its
    attempt started): a shield entered within the attempt, as httpcore's clean-up of a
    request that ended runs in (closing its response, handing its connection back).

    A cancel scope shields only from anyio's own cancellations; ``Task.cancel()`` reaches
    into it all the same. A clean-up cut there leaves its connection busy and its request
    in the pool's queue for ever: a load trial (100 tasks, 100 connections, attempts of
    0.5 s) lost a connection for nearly every attempt cut, 3 to 14 in 2,000 calls, until
    no call could get one. So the watchdog waits for such a shield to end. A shield the
    caller entered around the call is not one: inside it, the attempt is cut on time as
    anywhere else (anyio's own time limits still end their scopes inside a shield)."""
    scope = _innermost_scope(task)
    while scope is not None and scope is not outer_scope:
        if getattr(scope, "_shield", False):
            return True
        scope = getattr(scope, "_parent_scope", None)
    return False
