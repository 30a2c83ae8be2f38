"""Watchdog: one background thread that fires alarms, to bound blocking sync attempts.

A sync attempt blocks in ``recv`` where no timeout of ours can reach it: socket
timeouts are per read, so a server trickling one byte per second never trips
them. The sync shell arms an alarm for the attempt's end that shuts the
connection's socket down, which wakes the blocked read at once.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

__all__ = ["Alarm", "Watchdog", "watchdog"]


class Alarm:
    """One armed action; ``cancel()`` guarantees it will not run afterwards."""

    __slots__ = ("_action", "_lock", "fired")

    def __init__(self, action: Callable[[], None], lock: threading.Lock) -> None:
        self._action: Callable[[], None] | None = action
        self._lock = lock
        self.fired = False

    def cancel(self) -> None:
        with self._lock:
            self._action = None

    def _fire(self) -> None:
        with self._lock:
            action, self._action = self._action, None
            if action is None:
                return
            self.fired = True
        action()


class Watchdog:
    """Runs each alarm's action when its time comes, on one lazily started daemon thread."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._alarms: list[tuple[float, int, Alarm]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, delay: float, action: Callable[[], None]) -> Alarm:
        """Run ``action`` in ``delay`` seconds unless the returned alarm is cancelled first."""
        alarm = Alarm(action, threading.Lock())
        with self._condition:
            heapq.heappush(self._alarms, (time.monotonic() + delay, next(self._order), alarm))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="retrysafe-watchdog", daemon=True
                )
                self._thread.start()
            self._condition.notify()
        return alarm

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._alarms:
                    self._condition.wait()
                due, _, alarm = self._alarms[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._condition.wait(wait)
                    continue
                heapq.heappop(self._alarms)
            try:
                alarm._fire()
            except Exception:  # an alarm's action must never kill the watchdog
                continue


#: The process-wide watchdog the sync shell uses.
watchdog = Watchdog()
