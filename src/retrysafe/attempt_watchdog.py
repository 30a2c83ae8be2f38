"""Ending async attempts at their time, on asyncio, with one timer per event loop.

A transport without an httpcore pool (``MockTransport``, ``ASGITransport``, a
custom one) has no network reads that :mod:`retrysafe.attempt_deadline` could
bound, so an attempt on it runs under a time limit. ``asyncio.timeout`` would
arm and cancel a timer for every attempt, which costs more than all of
retrysafe's own decisions on a successful call. One :class:`AttemptWatchdog` per
event loop serves every attempt instead:

- an attempt tells it when it must end (:meth:`~AttemptWatchdog.watch`, a set
  insert) and takes its watch back when it ends (:meth:`~AttemptWatchdog.forget`);
- one timer, armed for the earliest end, cancels the task of every attempt still
  running at its end, then re-arms for the next one. While calls end in time it
  fires about once per attempt timeout, finds nothing due, and re-arms.

The attempt tells its own timeout from any other cancellation as
``asyncio.timeout`` does: it notes the task's cancel count when it starts, and a
``CancelledError`` it catches is its timeout only if its watch fired and, with
that one cancel taken back (``Task.uncancel``), the count is back where it was.

Python 3.11+ (``Task.uncancel``); elsewhere, and on trio, the shell uses anyio's
cancel scope.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
import weakref

__all__ = ["AttemptWatchdog", "Watch", "watchdog"]


class Watch:
    """One attempt's end, kept by the watchdog while the attempt runs."""

    __slots__ = ("cancelling", "ends_at", "fired", "task")

    def __init__(self, task: asyncio.Task[object], ends_at: float, cancelling: int) -> None:
        self.task = task
        #: When the attempt must end (``time.monotonic()`` seconds).
        self.ends_at = ends_at
        #: The task's cancel count when the attempt started (see the module's docstring).
        self.cancelling = cancelling
        #: The watchdog cancelled the task because this attempt ran out of time.
        self.fired = False

    def caught(self, exc: BaseException) -> bool:
        """Whether ``exc``, which ended the attempt, is its own timeout (then the cancel
        is taken back); if not (another exception, or the caller's cancel), it must
        propagate."""
        if sys.version_info < (3, 11):  # (never used there: no way to take a cancel back)
            return False
        return (
            self.fired
            and isinstance(exc, asyncio.CancelledError)
            and self.task.uncancel() <= self.cancelling
        )


class AttemptWatchdog:
    """The attempts in flight on one event loop, and the one timer that ends them.

    Ends are ``time.monotonic()`` seconds (what the shell computes an attempt's end
    in); the timer is armed on the loop's own clock, converted when it is armed.
    """

    __slots__ = ("_armed_at", "_handle", "_loop", "_watches", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        #: The loop this watchdog serves.
        self.loop = loop
        self._watches: set[Watch] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def watch(self, ends_at: float) -> Watch:
        """Cancel the current task unless the attempt it runs ends by ``ends_at``
        (``time.monotonic()`` seconds)."""
        task = asyncio.current_task(self.loop)
        if task is None:
            raise RuntimeError("an attempt's time limit needs a running asyncio task")
        cancelling = 0
        if sys.version_info >= (3, 11):  # (the shell uses a watchdog on 3.11+ only)
            cancelling = task.cancelling()
        entry = Watch(task, ends_at, cancelling)
        self._watches.add(entry)
        if ends_at < self._armed_at:
            self._arm(ends_at)
        return entry

    def forget(self, entry: Watch) -> None:
        """The attempt ended (however): its time no longer matters."""
        self._watches.discard(entry)

    def _arm(self, ends_at: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = ends_at
        when = self.loop.time() + (ends_at - time.monotonic())
        self._handle = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_at = math.inf
        now = time.monotonic()
        earliest = math.inf
        for entry in self._watches:
            if entry.fired:
                continue
            if entry.ends_at <= now:
                entry.fired = True
                entry.task.cancel()
            elif entry.ends_at < earliest:
                earliest = entry.ends_at
        if earliest != math.inf:
            self._arm(earliest)


#: The watchdog of each running loop, made on its first attempt.
_watchdogs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AttemptWatchdog] = (
    weakref.WeakKeyDictionary()
)


def watchdog(loop: asyncio.AbstractEventLoop) -> AttemptWatchdog:
    """The watchdog of ``loop`` (the running one)."""
    found = _watchdogs.get(loop)
    if found is None:
        found = _watchdogs[loop] = AttemptWatchdog(loop)
    return found
