"""RetryBudget: retries may only be a fraction of the traffic to a dependency."""

from __future__ import annotations

import threading

from retrysafe.clock import Clock
from retrysafe.governor.settings import BudgetSettings

__all__ = ["RetryBudget"]

#: How far below a whole token float sums of ``ratio`` may land (ten 0.1s are not 1.0).
_ROUNDING = 1e-9


class RetryBudget:
    """A token bucket: first attempts earn ``ratio`` tokens, a retry spends one.

    During a full outage every call fails, so retries soon drain the bucket and
    the load on the dependency stays near ``1 + ratio`` times the calls instead
    of ``attempts`` times. Thread-safe; never below zero.
    """

    def __init__(self, settings: BudgetSettings, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = settings.max_tokens
        self._refilled_at = clock.monotonic()

    @property
    def tokens(self) -> float:
        """Tokens available now."""
        with self._lock:
            self._refill()
            return self._tokens

    def record_first_attempt(self) -> None:
        """A new call starts: earn ``ratio`` tokens."""
        if self._tokens >= self.settings.max_tokens:
            return  # full already (the healthy steady state): nothing to earn, no lock
        with self._lock:
            self._refill()
            self._tokens = min(self.settings.max_tokens, self._tokens + self.settings.ratio)

    def try_spend(self) -> bool:
        """Spend one token for a retry; False (and nothing spent) if there is none."""
        with self._lock:
            self._refill()
            # (a token earned in tenths is 0.9999999999999999 of one: counted as one)
            if self._tokens < 1.0 - _ROUNDING:
                return False
            self._tokens = max(0.0, self._tokens - 1.0)
            return True

    def refund(self, tokens: float = 1.0) -> None:
        """Give back ``tokens`` spent for retries that were never sent (their calls were
        cancelled while waiting to send them): no load reached the dependency."""
        with self._lock:
            self._refill()
            self._tokens = min(self.settings.max_tokens, self._tokens + tokens)

    def _refill(self) -> None:
        now = self._clock.monotonic()
        elapsed = max(0.0, now - self._refilled_at)
        self._refilled_at = now
        self._tokens = min(
            self.settings.max_tokens, self._tokens + elapsed * self.settings.min_per_second
        )

    def __repr__(self) -> str:
        return f"RetryBudget(tokens={self.tokens:.2f}, {self.settings!r})"
