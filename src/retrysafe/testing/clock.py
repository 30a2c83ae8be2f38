"""A clock for tests: virtual time that advances instantly, seeded randomness."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable

import anyio.lowlevel

__all__ = ["FakeClock"]

#: 2023-11-14T22:13:20Z, a fixed wall-clock start so HTTP-date tests are reproducible.
DEFAULT_WALL_START = 1_700_000_000.0


class FakeClock:
    """Virtual time for retrysafe: sleeping advances the clock at once.

    Use it to check backoff and deadline arithmetic exactly::

        clock = FakeClock(seed=7)
        client = retrysafe.Client(clock=clock)
        ...
        assert clock.sleeps == [0.1, 0.35]

    ``sleeps`` records every sleep requested, in order (all of them: a long run that
    only needs the latest clears it, ``clock.sleeps.clear()``). ``random()`` draws from a
    ``random.Random(seed)``; pass ``randoms=[...]`` to script exact values instead.
    The clock is thread-safe so it can sit behind concurrent callers.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        start: float = 0.0,
        wall_start: float = DEFAULT_WALL_START,
        randoms: Iterable[float] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._now = start
        self._wall_offset = wall_start - start
        self._random = random.Random(seed)
        self._scripted = list(randoms) if randoms is not None else None
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def time(self) -> float:
        with self._lock:
            return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        """Move virtual time forward without recording a sleep."""
        if seconds < 0:
            raise ValueError(f"FakeClock cannot go backwards (advance({seconds!r}))")
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self._now += max(0.0, seconds)

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)
        # Still a checkpoint: a cancelled task stops here as it would on a real sleep.
        await anyio.lowlevel.checkpoint()

    def random(self) -> float:
        with self._lock:
            if self._scripted is not None:
                if not self._scripted:
                    raise LookupError("FakeClock ran out of scripted random values")
                return self._scripted.pop(0)
            return self._random.random()

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r}, sleeps={len(self.sleeps)})"
