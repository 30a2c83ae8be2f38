"""The threads that send a sync hedging call's copies, kept a little while for reuse.

A sync hedging call sends each copy from a thread of its own while the caller's
thread waits for their answers (it alone tells the engine, so hooks and tracers
see the whole call on the caller's thread). Starting a thread costs far more than
handing a task to one already waiting, and hedging calls come in streams: so a
thread that finished its copy waits up to :data:`_IDLE_FOR` seconds for the next
one before it ends. There is never a queue of copies waiting for a thread: a copy
that finds no idle thread starts a new one, so a slow copy never delays another.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

__all__ = ["run_on_a_thread"]

#: Seconds an idle thread waits for another copy before it ends.
_IDLE_FOR = 10.0


class _Threads:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start with no idle thread (also in a forked child, where the threads are gone)."""
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        #: Threads waiting on ``_tasks`` that no task has been promised to yet.
        self._idle = 0

    def run(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._tasks.put(task)
                return
        threading.Thread(
            target=self._work, args=(task,), name="retrysafe-hedge", daemon=True
        ).start()

    def _work(self, task: Callable[[], None]) -> None:
        tasks = self._tasks
        while True:
            try:
                task()
            except BaseException:  # pragma: no cover - a task hands its own errors over
                logging.getLogger("retrysafe").exception("a hedged copy's thread failed")
            with self._lock:
                self._idle += 1
            try:
                task = tasks.get(timeout=_IDLE_FOR)
            except queue.Empty:
                with self._lock:
                    try:  # a task handed over just as the wait ended is still this one's
                        task = tasks.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return


_THREADS = _Threads()
if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_THREADS.reset)


def run_on_a_thread(task: Callable[[], None]) -> None:
    """Run ``task`` on an idle copy thread, or on a new one if none is idle."""
    _THREADS.run(task)
