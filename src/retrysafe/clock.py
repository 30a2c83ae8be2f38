"""The one source of time, sleep and randomness for retrysafe.

Every duration the engine measures, every sleep a shell takes and every random
number behind jitter comes through a :class:`Clock`, so tests can swap in
:class:`retrysafe.testing.FakeClock` and check backoff arithmetic exactly,
without sleeping for real.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "checked_clock"]


@runtime_checkable
class Clock(Protocol):
    """Time, sleep and randomness, injected wherever retrysafe needs them."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences mean anything."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch; used only to read HTTP-dates."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""
        ...

    async def async_sleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds`` (asyncio or trio)."""
        ...

    def random(self) -> float:
        """A number in ``[0, 1)`` for jitter."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time``, real sleeps, ``random.random``."""

    # The stdlib functions themselves, not wrappers: a call reads the clock several
    # times, and a Python frame around each read cost more than the read.
    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)

    def __init__(self) -> None:
        self._random = random.Random()
        #: The bound method of this clock's own generator (no wrapper frame either).
        self.random: Callable[[], float] = self._random.random

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    async def async_sleep(self, seconds: float) -> None:
        # anyio works on both asyncio and trio; a zero sleep is still a checkpoint,
        # so cancellation is noticed even between immediate retries. (Imported here:
        # a process with no event loop never loads it.)
        import anyio

        await anyio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


def checked_clock(clock: object) -> Clock:
    """``clock`` if it is a :class:`Clock`, a new :class:`SystemClock` for None.

    Anything else is refused here, with what a clock is: a function such as
    ``time.monotonic`` given as one failed only later, far from the argument, with an
    ``AttributeError`` about a missing ``monotonic``.
    """
    if clock is None:
        return SystemClock()
    if type(clock) is SystemClock or isinstance(clock, Clock):  # (the first: no attribute checks)
        return clock
    hint = (
        " (a function: a clock is an object with those methods, not one of them)"
        if callable(clock)
        else ""
    )
    raise TypeError(
        "clock must be a retrysafe.Clock: an object with monotonic(), time(), sleep(), "
        "async_sleep() and random(), such as retrysafe.testing.FakeClock() in tests; got "
        f"{type(clock).__name__}{hint}"
    )
