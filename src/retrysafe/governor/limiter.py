"""Limiter: a shared cooldown after a 429, and optional steady pacing."""

from __future__ import annotations

import threading

from retrysafe.clock import Clock
from retrysafe.governor.settings import LimiterSettings

__all__ = ["Limiter"]


class Limiter:
    """When callers of one dependency may send next.

    A 429's Retry-After sets a cooldown that every caller waits out, so one
    client learns the limit for all. With ``requests_per_second`` each attempt
    also reserves a slot in a token bucket of ``burst`` tokens. Thread-safe.
    """

    def __init__(self, settings: LimiterSettings, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._cooldown_until = 0.0
        #: Whether attempts are paced at all (``requests_per_second`` is set).
        self.paced = settings.requests_per_second is not None
        self._tokens = float(settings.burst)
        self._refilled_at = clock.monotonic()

    def cooldown_remaining(self) -> float:
        """Seconds until the current cooldown ends (0.0 when none)."""
        until = self._cooldown_until  # one float read: no lock needed to look
        if until == 0.0:
            return 0.0
        return max(0.0, until - self._clock.monotonic())

    def start_cooldown(self, seconds: float) -> None:
        """Pause every caller for ``seconds`` (capped) from now; only ever extends a cooldown."""
        if not self.settings.cooldown_on_429 or seconds <= 0:
            return
        seconds = min(seconds, self.settings.max_cooldown)
        with self._lock:
            self._cooldown_until = max(self._cooldown_until, self._clock.monotonic() + seconds)

    def reserve(self) -> float:
        """Reserve a paced slot; returns how long to wait for it (0.0 without pacing)."""
        rate = self.settings.requests_per_second
        if rate is None:
            return 0.0
        with self._lock:
            now = self._clock.monotonic()
            self._tokens = min(
                float(self.settings.burst), self._tokens + (now - self._refilled_at) * rate
            )
            self._refilled_at = now
            self._tokens -= 1.0  # may go negative: a reservation in the queue
            return 0.0 if self._tokens >= 0 else -self._tokens / rate

    def release(self) -> None:
        """Give back a reserved slot that will not be used (its caller gave up)."""
        if self.settings.requests_per_second is None:
            return
        with self._lock:
            self._tokens = min(float(self.settings.burst), self._tokens + 1.0)

    def __repr__(self) -> str:
        return f"Limiter(cooldown={self.cooldown_remaining():.3f}s, {self.settings!r})"
