"""A token bucket, the rate limiter behind ``/rate-limit/{bucket}``."""

from __future__ import annotations

import math

__all__ = ["TokenBucket"]


class TokenBucket:
    """Holds up to ``burst`` tokens, refilled at ``rate`` tokens per second.

    Each request takes one token; an empty bucket answers how long until the next one,
    which the server turns into an honest Retry-After. Time is passed in (monotonic
    seconds), so the arithmetic needs no clock of its own.
    """

    def __init__(self, *, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.updated = now

    def reconfigure(self, *, rate: float, burst: int) -> None:
        """Change the refill rate and size, keeping the tokens saved so far (capped)."""
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self.tokens = min(self.tokens, float(burst))

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(float(self.burst), self.tokens + elapsed * self.rate)
        self.updated = max(self.updated, now)

    def try_take(self, now: float) -> bool:
        """Take one token if there is one; ``False`` (taking nothing) when empty."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def seconds_until_token(self, now: float) -> float:
        """Seconds until a whole token is available (``0.0`` when one is there now)."""
        self._refill(now)
        return max(0.0, (1.0 - self.tokens) / self.rate)

    def retry_after(self, now: float) -> int:
        """Whole seconds a refused client should wait: the wait for a token, rounded up."""
        return max(1, math.ceil(self.seconds_until_token(now)))
