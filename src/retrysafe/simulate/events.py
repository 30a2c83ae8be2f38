"""The discrete-event loop: a heap of timed callbacks on virtual time."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

from retrysafe.simulate.clock import SimulationError, VirtualTime

__all__ = ["EventLoop"]


class EventLoop:
    """Runs callbacks in time order; equal times run in the order they were scheduled.

    Time only moves forward: scheduling an event in the past is a bug and raises.
    """

    __slots__ = ("_heap", "_seq", "time")

    def __init__(self, time: VirtualTime | None = None) -> None:
        self.time = time if time is not None else VirtualTime()
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0

    @property
    def now(self) -> float:
        """Seconds of virtual time since the run began."""
        return self.time.now

    def at(self, when: float, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` at virtual time ``when``."""
        if when < self.time.now or math.isnan(when):
            raise SimulationError(f"an event at {when!r} is before now ({self.time.now!r})")
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, callback, args))

    def after(self, seconds: float, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` ``seconds`` from now."""
        self.at(self.time.now + seconds, callback, *args)

    def run(self, until: float = math.inf) -> None:
        """Handle events in order until none is left or the next is past ``until``."""
        heap = self._heap
        pop = heapq.heappop
        clock = self.time
        while heap and heap[0][0] <= until:
            when, _, callback, args = pop(heap)
            clock.now = when
            callback(*args)

    def __len__(self) -> int:
        return len(self._heap)
