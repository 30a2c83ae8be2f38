"""Limiter: a shared cooldown after a 429, and optional steady pacing."""

from __future__ import annotations

import bisect
import math
import threading
from typing import Final

from retrysafe.clock import Clock
from retrysafe.governor.settings import LimiterSettings

__all__ = ["QUEUE_FULL", "Limiter"]

#: How close (seconds) two slot times must be to be the same slot (float arithmetic).
_SAME_SLOT: Final = 1e-6

#: What :meth:`Limiter.reserve` answers when the queue already reaches ``max_cooldown``
#: ahead: no slot was reserved, there is none to wait for, and the attempt must not go.
QUEUE_FULL: Final = math.inf


class Limiter:
    """When callers of one dependency may send next.

    A 429's Retry-After sets a cooldown that every caller waits out, so one
    client learns the limit for all. With ``requests_per_second`` each attempt
    also reserves a slot in a token bucket of ``burst`` tokens. Thread-safe.

    The bucket may go negative: each token below zero is a reservation in the
    queue, a caller sleeping until its slot comes up. A caller whose slot is too
    far away for its deadline gives its slot back (:meth:`release`) at once, so
    the queue holds only callers that wait. The queue is bounded: no slot is ever
    placed more than ``max_cooldown`` seconds ahead, and a caller who finds it
    full gets no slot (:data:`QUEUE_FULL`) and must not send. So the queue is at
    most ``requests_per_second * max_cooldown`` slots, and however many
    reservations are never returned (a caller that vanished), a lost slot is
    repaid by time within ``max_cooldown``.
    """

    def __init__(self, settings: LimiterSettings, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._cooldown_until = 0.0
        #: Whether the cooldown in force (the latest to end) is a limit the server
        #: announced used up, rather than a 429's wait: what an error explains it as.
        self.cooldown_announced = False
        #: Whether attempts are paced at all (``requests_per_second`` is set).
        self.paced = settings.requests_per_second is not None
        self._tokens = float(settings.burst)
        self._refilled_at = clock.monotonic()
        #: The slots given back with others queued behind them (when each comes up, in
        #: order): each goes back too once every slot behind it has (see :meth:`release`).
        self._gaps: list[float] = []
        rate = settings.requests_per_second
        #: The fewest tokens the bucket may hold: the longest queue, as a debt.
        self._floor = -rate * settings.max_cooldown if rate is not None else 0.0

    def cooldown_remaining(self) -> float:
        """Seconds until the current cooldown ends (0.0 when none)."""
        until = self._cooldown_until  # one float read: no lock needed to look
        if until == 0.0:
            return 0.0
        return max(0.0, until - self._clock.monotonic())

    def start_cooldown(self, seconds: float, *, announced: bool = False) -> None:
        """Pause every caller for ``seconds`` (capped) from now; only ever extends a cooldown.

        ``announced``: the wait is the reset of a limit the server announced used up,
        switched by ``pace_on_rate_limit_headers``; otherwise a 429's, switched by
        ``cooldown_on_429``."""
        enabled = (
            self.settings.pace_on_rate_limit_headers if announced else self.settings.cooldown_on_429
        )
        if not enabled or seconds <= 0:
            return
        seconds = min(seconds, self.settings.max_cooldown)
        with self._lock:
            until = self._clock.monotonic() + seconds
            if until > self._cooldown_until:
                self._cooldown_until = until
                self.cooldown_announced = announced

    def reserve(self) -> float:
        """Reserve a paced slot; returns how long to wait for it (0.0 without pacing).

        Never more than ``max_cooldown``: a slot further away would overrun the
        queue, so none is reserved and the answer is :data:`QUEUE_FULL` (nothing
        to give back). Room comes within ``1 / requests_per_second`` seconds.
        """
        return self.reserve_slot()[0]

    def reserve_slot(self) -> tuple[float, float]:
        """As :meth:`reserve`, and when the slot comes up (the clock's monotonic
        seconds): what :meth:`release` is given back, to tell which slot it was."""
        rate = self.settings.requests_per_second
        if rate is None:
            return 0.0, 0.0
        with self._lock:
            tokens = self._refill(rate) - 1.0  # below zero: a reservation in the queue
            if tokens < self._floor:
                return QUEUE_FULL, 0.0
            self._tokens = tokens
            wait = 0.0 if tokens >= 0 else -tokens / rate
            return wait, self._refilled_at + wait

    def reserve_slot_beyond(self, wait: float) -> tuple[float, float] | None:
        """As :meth:`reserve_slot`, but only a slot further than ``wait`` seconds away;
        None, with nothing reserved, for one sooner (or a full queue). Looked at and
        reserved under one lock: reserved and given back, a slot another caller queued
        behind meanwhile would stay a gap (see :meth:`release`)."""
        rate = self.settings.requests_per_second
        if rate is None:
            return None
        with self._lock:
            tokens = self._refill(rate) - 1.0
            if tokens < self._floor or tokens >= 0 or -tokens / rate <= wait:
                return None
            self._tokens = tokens
            slot_wait = -tokens / rate
            return slot_wait, self._refilled_at + slot_wait

    def release(self, slot: float | None = None) -> None:
        """Give back a reserved slot that will not be used (its caller gave up).

        ``slot`` (from :meth:`reserve_slot`) says which. The last slot of the queue
        is given back: the queue then ends one interval sooner. A slot with others
        queued behind it is kept as a gap, since giving it back would put the next
        caller on the last one's slot, both sending at once; it goes back once every
        slot behind it has (callers cancelled together, first to last, give back
        the whole queue), or time closes it. Without ``slot``, the last one is given
        back.
        """
        rate = self.settings.requests_per_second
        if rate is None:
            return
        with self._lock:
            tokens = self._refill(rate)
            # (the last slot comes up when the bucket is back at zero: -tokens/rate away)
            last = self._refilled_at - tokens / rate
            gaps = self._gaps
            # (a gap whose time has come was closed by time: only those ahead are kept, at
            # most the queue's length)
            if gaps and gaps[0] <= self._refilled_at:
                del gaps[: bisect.bisect_right(gaps, self._refilled_at)]
            if slot is not None and tokens < 0 and slot < last - _SAME_SLOT:
                bisect.insort(gaps, slot)
                return
            tokens += 1.0
            # Gaps left earlier that are now the queue's last go back with it.
            while tokens < 0 and gaps:
                last = self._refilled_at - tokens / rate
                index = bisect.bisect_left(gaps, last - _SAME_SLOT)
                if index == len(gaps) or gaps[index] > last + _SAME_SLOT:
                    break
                del gaps[index]
                tokens += 1.0
            self._tokens = min(float(self.settings.burst), tokens)

    def queued(self) -> float:
        """Slots reserved ahead of now (0.0 when the bucket holds tokens)."""
        rate = self.settings.requests_per_second
        if rate is None:
            return 0.0
        with self._lock:
            return max(0.0, -self._refill(rate))

    def at_rest(self) -> bool:
        """Nothing here outlives a fresh limiter: no cooldown, no slot reserved ahead."""
        if self.cooldown_remaining() > 0:
            return False
        rate = self.settings.requests_per_second
        if rate is None:
            return True
        with self._lock:
            return self._refill(rate) >= float(self.settings.burst)

    def _refill(self, rate: float) -> float:
        """Bring the bucket up to now (under the lock); returns the tokens."""
        now = self._clock.monotonic()
        elapsed = now - self._refilled_at
        if elapsed > 0:
            self._tokens = min(float(self.settings.burst), self._tokens + elapsed * rate)
            self._refilled_at = now
        return self._tokens

    def __repr__(self) -> str:
        return f"Limiter(cooldown={self.cooldown_remaining():.3f}s, {self.settings!r})"
