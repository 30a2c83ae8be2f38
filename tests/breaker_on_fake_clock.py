"""A circuit breaker on a fake clock that opens on five failing calls in a row (and stays
open 5 s), for the tests of its arithmetic: few calls show whether it would open."""

from __future__ import annotations

from retrysafe.governor import BreakerSettings, CircuitBreaker, Permit
from retrysafe.testing import FakeClock

__all__ = ["CLOSED", "SETTINGS", "breaker_on_fake_clock"]

#: The permit of every attempt sent while the breaker is closed.
CLOSED = Permit(allowed=True)
SETTINGS = BreakerSettings(
    consecutive_failures=5, open_for=5.0, first_open_for=5.0, ratio_window=30.0
)


def breaker_on_fake_clock() -> tuple[CircuitBreaker, FakeClock]:
    """A fresh breaker with :data:`SETTINGS`, and its clock."""
    clock = FakeClock(seed=1)
    return CircuitBreaker(SETTINGS, clock), clock
