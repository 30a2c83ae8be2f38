"""The background thread that tells Redis what this process learned, so no call waits.

A call that learns something for the fleet (a cooldown, a vote, a probe's outcome)
hands it over here and goes on at once; the writer sends it within a moment, with the
fleet's background timeout (a short slowness of Redis loses nothing). While Redis is
away, writes are dropped: what they said is lost with the rest of the fleet's state.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from retrysafe.fleet.availability import Availability

__all__ = ["Writer"]

Write = Callable[[], object]


class Writer:
    """Runs handed-over writes one after the other on its own thread."""

    def __init__(self, availability: Availability, lost: Callable[[BaseException], None]) -> None:
        self._availability = availability
        self._lost = lost
        #: (write, whether it talks to Redis); None stops the thread.
        self._queue: queue.SimpleQueue[tuple[Write, bool] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._run, name="retrysafe-fleet-writer", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def submit(self, write: Write) -> None:
        """Send ``write`` soon (it must not raise for anything but Redis failing)."""
        self._queue.put((write, True))

    def flush(self, timeout: float) -> bool:
        """Wait until every write handed over so far was sent (or dropped); False on
        timeout."""
        done = threading.Event()
        self._queue.put((done.set, False))
        return done.wait(timeout)

    def stop(self, timeout: float = 2.0) -> None:
        self._queue.put(None)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            write, to_redis = item
            if to_redis and not self._availability.up:
                continue  # Redis is away: the write is dropped with the fleet's state
            try:
                write()
            except Exception as error:  # whatever Redis or the network raised: never die
                self._lost(error)
