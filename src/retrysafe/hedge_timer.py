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
import threading
import time
from collections.abc import Callable

__all__ = ["Alarm", "arm"]


class Alarm:
    """A pending call of ``action`` at monotonic time ``at``; :meth:`disarm` to drop it."""

    __slots__ = ("action", "armed", "at")

    def __init__(self, at: float, action: Callable[[], None]) -> None:
        self.at = at
        self.action = action
        self.armed = True

    def disarm(self) -> None:
        """Do not run the action (if it has not started yet)."""
        self.armed = False


class _Timer:
    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Alarm]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, at: float, action: Callable[[], None]) -> Alarm:
        alarm = Alarm(at, action)
        with self._condition:
            earliest = not self._heap or at < self._heap[0][0]
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
                if not heap:
                    self._condition.wait()
                    continue
                wait = heap[0][0] - time.monotonic()
                if wait > 0:
                    self._condition.wait(wait)
                    continue
                alarm = heapq.heappop(heap)[2]
            if alarm.armed:
                try:
                    alarm.action()
                except BaseException:  # pragma: no cover - an action reports its own errors
                    import logging

                    logging.getLogger("retrysafe").exception("a hedge timer action failed")


_TIMER = _Timer()


def arm(at: float, action: Callable[[], None]) -> Alarm:
    """Run ``action`` on the timer thread at monotonic time ``at`` unless disarmed first."""
    return _TIMER.arm(at, action)
