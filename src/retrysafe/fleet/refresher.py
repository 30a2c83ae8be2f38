"""The background thread that keeps a process's view of the fleet fresh.

It waits on the fleet's pub/sub channel for at most ``refresh_every`` seconds, then reads
the state of every dependency the process knows (one script call, which is also the
process's heartbeat). A change another process announces therefore arrives within a
round trip or two; one whose announcement was lost, within ``refresh_every``. When Redis
fails, it marks the fleet away (calls go local at once) and tries again every
``refresh_every``; its first success marks the fleet back.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from retrysafe.fleet.availability import Availability

if TYPE_CHECKING:
    from redis.client import PubSub

__all__ = ["Refresher"]


class Refresher:
    """Runs ``refresh`` whenever the channel speaks, and at least every ``every`` seconds."""

    def __init__(
        self,
        *,
        refresh: Callable[[], None],
        subscribe: Callable[[], PubSub],
        availability: Availability,
        every: float,
    ) -> None:
        self._refresh = refresh
        self._subscribe = subscribe
        self._availability = availability
        self._every = every
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="retrysafe-fleet-refresher", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop and wait (briefly) for the thread to end."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        pubsub: PubSub | None = None
        while not self._stopping.is_set():
            try:
                if pubsub is None:
                    pubsub = self._subscribe()
                self._refresh()
                self._availability.found()
                self._wait_for_change(pubsub)
            except Exception as error:  # whatever Redis or the network raised: never die
                self._availability.lost(error)
                if pubsub is not None:
                    _close_quietly(pubsub)
                    pubsub = None
                self._stopping.wait(self._every)
        if pubsub is not None:
            _close_quietly(pubsub)

    def _wait_for_change(self, pubsub: PubSub) -> None:
        """Return when a change is announced, or after ``every`` seconds."""
        message: Any = pubsub.get_message(ignore_subscribe_messages=True, timeout=self._every)
        while message is not None:  # take every announcement waiting: one refresh covers all
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.0)


def _close_quietly(pubsub: PubSub) -> None:
    with contextlib.suppress(Exception):
        pubsub.close()
