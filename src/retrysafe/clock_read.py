"""Reading a clock's monotonic seconds on the path every call takes.

Time comes through a :class:`~retrysafe.clock.Clock` so that a test can swap in a fake
one. On the real clock, :class:`~retrysafe.clock.SystemClock`, ``monotonic`` is
``time.monotonic`` itself; yet the compiled build (``docs/cost.md``) reaches it
through a generic attribute lookup and call, which cost more than the read, and a
successful call reads the clock four times. :func:`monotonic_of` reads the system
clock straight from ``time.monotonic``, and any other clock as it always is.
"""

from __future__ import annotations

from time import monotonic as _system_monotonic

from retrysafe.clock import Clock, SystemClock

__all__ = ["monotonic_of"]


def monotonic_of(clock: Clock) -> float:
    """``clock.monotonic()``: the same reading, taken without the method lookup when
    ``clock`` is the system clock (exactly :class:`~retrysafe.clock.SystemClock`, whose
    ``monotonic`` is ``time.monotonic``)."""
    if type(clock) is SystemClock:
        return _system_monotonic()
    return clock.monotonic()
