"""One process-wide timer thread that starts the sync shell's hedged copies when due.

A sync hedging call sends its first copy on the caller's own thread, as a call
without hedging does, so the common case (the first copy answers in time) pays
no hand-off between threads. Something else must notice that a copy is due
while the caller is blocked reading: this timer. Arming it is a heap push under
a lock (the thread is woken only when the new entry is the earliest), and
disarming is a flag; the thread starts on first use and lives as a daemon.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

__all__ = ["Alarm", "arm"]


class Alarm:
    """A pending call of ``action`` at monotonic time ``at``; :meth:`disarm` to drop it."""

    __slots__ = ("_timer", "action", "armed", "at")

    def __init__(self, at: float, action: Callable[[], None], timer: _Timer) -> None:
        self.at = at
        self.action: Callable[[], None] | None = action
        self.armed = True
        self._timer = timer

    def disarm(self) -> None:
        """Do not run the action (if it has not started yet), and let go of it at once:
        the entry stays in the heap until its time, but holds nothing of the call."""
        if self.armed:
            self.armed = False
            self.action = None
            self._timer.stale += 1


class _Timer:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start empty, with no thread (also in a forked child, where the thread is gone)."""
        self._condition = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Alarm]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        #: Disarmed entries still in the heap (about: counted without the lock).
        self.stale = 0

    def arm(self, at: float, action: Callable[[], None]) -> Alarm:
        alarm = Alarm(at, action, self)
        with self._condition:
            heap = self._heap
            if self.stale > _COMPACT_AT and 2 * self.stale > len(heap):
                # Most entries were disarmed (calls answered before their copy was due):
                # drop them now rather than when their time comes.
                heap[:] = [entry for entry in heap if entry[2].armed]
                heapq.heapify(heap)
                self.stale = 0
            earliest = not heap or at < heap[0][0]
            heapq.heappush(self._heap, (at, next(self._order), alarm))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="retrysafe-hedge-timer", daemon=True
                )
                self._thread.start()
            elif earliest:
                self._condition.notify()
        return alarm

    def _run(self) -> None:
        heap = self._heap
        while True:
            with self._condition:
                while heap and not heap[0][2].armed:
                    heapq.heappop(heap)
                    self.stale = max(0, self.stale - 1)
                if not heap:
                    self._condition.wait()
                    continue
                wait = heap[0][0] - time.monotonic()
                if wait > 0:
                    self._condition.wait(wait)
                    continue
                alarm = heapq.heappop(heap)[2]
            action = alarm.action
            if alarm.armed and action is not None:
                try:
                    action()
                except Exception:  # pragma: no cover - an action reports its own errors
                    logging.getLogger("retrysafe").exception("a hedge timer action failed")


#: Compact the heap once more than this many entries are disarmed (and most are).
_COMPACT_AT = 1024
_TIMER = _Timer()
# A forked child has no timer thread (and maybe a lock held by it): start afresh.
if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_TIMER.reset)


def arm(at: float, action: Callable[[], None]) -> Alarm:
    """Run ``action`` on the timer thread at monotonic time ``at`` unless disarmed first."""
    return _TIMER.arm(at, action)
