"""RetryBudget: retries may only be a fraction of the traffic to a dependency."""

from __future__ import annotations

import threading
from typing import Final

from retrysafe.clock import Clock
from retrysafe.clock_read import monotonic_of
from retrysafe.governor.settings import BudgetSettings

__all__ = ["RetryBudget"]

#: How far below a whole token float sums of ``ratio`` may land (ten 0.1s are not 1.0).
_ROUNDING = 1e-9

#: How many slots ``burst_window`` is kept in: earnings expire a tenth of it at a time.
_SLOTS: Final = 10


class RetryBudget:
    """A token bucket: each call's first attempt earns ``ratio`` tokens as it ends (before
    the call may ask for a retry), a retry spends one.

    During a full outage every call fails, so retries soon drain the bucket and
    the load on the dependency stays near ``1 + ratio`` times the calls instead
    of ``attempts`` times. Thread-safe; never below zero.

    The bucket holds ``max_tokens``. With a ``burst_window`` (0 by default: none),
    what its calls earn while it is full is kept apart for that many seconds (the
    *overflow*, in ten slots: an earning lasts between nine and ten tenths of the
    window), and a retry spends that first: for a burst whose failures end long after
    its successes (attempts that time out), whose earnings a full bucket would have
    turned away by then. Earnings older than the window are lost, as a full bucket's
    are: what a long healthy run earned does not pile up for the next outage beyond
    ``max_tokens`` plus one window's earnings. (A refund past a full bucket counts as
    earned when it is made.)
    """

    def __init__(self, settings: BudgetSettings, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = settings.max_tokens
        self._refilled_at = clock.monotonic()
        #: The overflow, per slot of ``burst_window / _SLOTS`` seconds (slot ``n`` at
        #: index ``n % _SLOTS``), and the newest slot's number; [] with no window.
        self._overflow: list[float] = [0.0] * _SLOTS if settings.burst_window > 0 else []
        self._newest_slot = 0
        self._slots_per_second = _SLOTS / settings.burst_window if self._overflow else 0.0

    @property
    def tokens(self) -> float:
        """Tokens available now: the bucket's and the overflow's."""
        with self._lock:
            now = self._refill()
            return self._tokens + self._overflow_now(now)

    def at_rest(self) -> bool:
        """Whether a fresh budget would be the same: the bucket full, no overflow."""
        with self._lock:
            now = self._refill()
            return self._tokens >= self.settings.max_tokens and self._overflow_now(now) == 0.0

    def record_first_attempt(self) -> None:
        """A call's first attempt ended: earn ``ratio`` tokens."""
        settings = self.settings
        overflow = self._overflow
        if self._tokens >= settings.max_tokens:
            # Full (the healthy steady state): the earnings go to the overflow, if kept.
            if overflow:
                now = monotonic_of(self._clock)
                slot = int(now * self._slots_per_second)
                # (acquire and release, not `with`: the compiled build calls the two
                # methods directly, where `with` costs it as much as the rest together)
                lock = self._lock
                lock.acquire()
                try:
                    if slot > self._newest_slot:
                        self._advance(now)
                    overflow[slot % _SLOTS] += settings.ratio
                finally:
                    lock.release()
            return
        with self._lock:
            now = self._refill()
            tokens = self._tokens + settings.ratio
            self._tokens = min(tokens, settings.max_tokens)
            # (a hundred 0.01s overfill 1 by 1e-15: no overflow worth keeping)
            if tokens - settings.max_tokens > _ROUNDING and overflow:
                self._keep(now, tokens - settings.max_tokens)

    def try_spend(self) -> bool:
        """Spend one token for a retry; False (and nothing spent) if there is none.

        The overflow is spent first, its oldest slot first: it is what expires soonest.
        """
        with self._lock:
            now = self._refill()
            overflow = self._overflow_now(now)
            # (a token earned in tenths is 0.9999999999999999 of one: counted as one)
            if self._tokens + overflow < 1.0 - _ROUNDING:
                return False
            owed = 1.0
            if overflow > 0.0:
                owed = self._take_overflow(owed)
            self._tokens = max(0.0, self._tokens - owed)
            return True

    def refund(self, tokens: float = 1.0) -> None:
        """Give back ``tokens`` spent for retries that were never sent (their calls were
        cancelled while waiting to send them): no load reached the dependency."""
        with self._lock:
            now = self._refill()
            total = self._tokens + tokens
            self._tokens = min(self.settings.max_tokens, total)
            if total > self._tokens and self._overflow:
                self._keep(now, total - self._tokens)

    def _refill(self) -> float:
        """Add what ``min_per_second`` earned since the last refill; the time now."""
        now = self._clock.monotonic()
        elapsed = max(0.0, now - self._refilled_at)
        self._refilled_at = now
        self._tokens = min(
            self.settings.max_tokens, self._tokens + elapsed * self.settings.min_per_second
        )
        return now

    def _advance(self, now: float) -> int:
        """Expire the slots older than ``burst_window`` at ``now``; the newest slot's
        number (the one ``now`` falls in, or a later one if the clock went back)."""
        slot = int(now * self._slots_per_second)
        newest = self._newest_slot
        if slot > newest:
            overflow = self._overflow
            for number in range(newest + 1, min(slot, newest + _SLOTS) + 1):
                overflow[number % _SLOTS] = 0.0
            self._newest_slot = newest = slot
        return newest

    def _keep(self, now: float, tokens: float) -> None:
        """Add ``tokens`` to the overflow, in the slot of ``now`` (under the lock)."""
        self._overflow[self._advance(now) % _SLOTS] += tokens

    def _overflow_now(self, now: float) -> float:
        """The overflow not yet expired at ``now`` (under the lock)."""
        if not self._overflow:
            return 0.0
        self._advance(now)
        return sum(self._overflow)

    def _take_overflow(self, owed: float) -> float:
        """Take up to ``owed`` tokens from the overflow, oldest slot first; what is still
        owed (under the lock, the slots just advanced)."""
        overflow = self._overflow
        newest = self._newest_slot
        for number in range(newest - _SLOTS + 1, newest + 1):
            index = number % _SLOTS
            held = overflow[index]
            if held <= 0.0:
                continue
            taken = min(held, owed)
            overflow[index] = held - taken
            owed -= taken
            if owed <= _ROUNDING:
                return 0.0
        return owed

    def __repr__(self) -> str:
        return f"RetryBudget(tokens={self.tokens:.2f}, {self.settings!r})"
