"""The background thread that keeps a process's view of the fleet fresh.

It reads the state of every dependency the process knows every ``refresh_every``
seconds (one script call, which is also the process's heartbeat), and listens on the
fleet's pub/sub channel in between. A cooldown's announcement carries the cooldown,
which is applied at once; any other announcement (a breaker opened or closed) makes it
read the state at once. So a change reaches every process within a round trip or two,
and one whose announcement was lost within ``refresh_every``. When Redis
fails, it marks the fleet away (calls go local at once) and tries again every
``refresh_every``; its first success marks the fleet back.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from retrysafe.fleet.availability import Availability

if TYPE_CHECKING:
    from redis.client import PubSub

__all__ = ["Refresher"]


class Refresher:
    """Runs ``refresh`` at least every ``every`` seconds, and at once when an announcement
    asks for it; ``on_message`` applies an announcement that carries its own news (a
    cooldown) and says whether a refresh is still needed."""

    def __init__(
        self,
        *,
        refresh: Callable[[], None],
        subscribe: Callable[[], PubSub],
        on_message: Callable[[str], bool],
        availability: Availability,
        lost: Callable[[BaseException], None],
        every: float,
    ) -> None:
        self._refresh = refresh
        self._subscribe = subscribe
        self._on_message = on_message
        self._availability = availability
        self._lost = lost
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
        due = 0.0
        while not self._stopping.is_set():
            try:
                if pubsub is None:
                    pubsub = self._subscribe()
                    due = 0.0
                if time.monotonic() >= due:
                    self._refresh()
                    self._availability.found()
                    due = time.monotonic() + self._every
                if self._wait_for_change(pubsub, max(0.0, due - time.monotonic())):
                    due = 0.0
            except Exception as error:  # whatever Redis or the network raised: never die
                self._lost(error)
                if pubsub is not None:
                    _close_quietly(pubsub)
                    pubsub = None
                self._stopping.wait(self._every)
        if pubsub is not None:
            _close_quietly(pubsub)

    def _wait_for_change(self, pubsub: PubSub, timeout: float) -> bool:
        """Take the announcements that come within ``timeout`` seconds (returning at the
        first batch); True if one of them needs a full refresh."""
        message: Any = pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout)
        needs_refresh = False
        while message is not None:  # every announcement waiting: one refresh covers all
            data = message.get("data")
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
            if self._on_message(text):
                needs_refresh = True
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.0)
        return needs_refresh


def _close_quietly(pubsub: PubSub) -> None:
    with contextlib.suppress(Exception):
        pubsub.close()
