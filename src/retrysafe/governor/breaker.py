"""CircuitBreaker: stop sending to a dependency that is clearly down, then probe it.

States: ``closed`` (calls flow; outcomes are counted), ``open`` (calls fail fast
with nothing sent) and ``half_open`` (exactly one probe at a time decides
whether to close again or re-open).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Literal

from retrysafe.clock import Clock
from retrysafe.governor.settings import BreakerSettings

__all__ = ["CLOSED_PERMIT", "BreakerState", "CircuitBreaker", "Health", "Permit", "Transition"]

BreakerState = Literal["closed", "open", "half_open"]
#: What an outcome says about the dependency: 5xx, timeouts, transport errors and
#: unreadable bodies are unhealthy; 4xx and 429 are neutral (the server answered).
Health = Literal["healthy", "unhealthy", "neutral"]


@dataclasses.dataclass(frozen=True)
class Transition:
    """The breaker moved from ``before`` to ``after``."""

    before: BreakerState
    after: BreakerState


@dataclasses.dataclass(frozen=True)
class Permit:
    """The breaker's answer to "may I send?".

    ``allowed`` False means fail fast until ``retry_at`` (monotonic seconds).
    A ``probe`` permit is the single half-open trial; report its outcome with
    :meth:`CircuitBreaker.record`.
    """

    allowed: bool
    probe: bool = False
    retry_at: float | None = None
    probe_token: int = 0
    transition: Transition | None = None


#: The permit of every attempt sent while the breaker is closed (permits are values).
CLOSED_PERMIT = Permit(allowed=True)


class CircuitBreaker:
    """Closed, open, half-open with one probe; thread-safe.

    It trips on ``consecutive_failures`` unhealthy outcomes in a row within
    ``failure_window``, or on a failure ratio over ``ratio_window`` once
    ``ratio_min_calls`` calls were seen. Outcomes of calls that started before
    it opened are ignored.
    """

    def __init__(self, settings: BreakerSettings, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        self._open_until = 0.0
        self._run: collections.deque[float] = collections.deque()
        self._window: collections.deque[tuple[float, bool]] = collections.deque()
        self._probe_token = 0
        self._probe_expires: float | None = None

    @property
    def state(self) -> BreakerState:
        """The state now (an expired open period reads as half-open)."""
        with self._lock:
            if self._state == "open" and self._clock.monotonic() >= self._open_until:
                return "half_open"
            return self._state

    @property
    def closed(self) -> bool:
        """Whether calls flow freely now (read without the lock: one attribute)."""
        return self._state == "closed"

    def open_until(self) -> float | None:
        """When the open period ends (monotonic seconds), or None when not open."""
        with self._lock:
            return self._open_until if self._state == "open" else None

    def acquire(self, probe_lease: float) -> Permit:
        """May one attempt be sent? An unreported probe frees its slot after ``probe_lease``."""
        if self._state == "closed":  # one attribute read: the healthy path takes no lock
            return CLOSED_PERMIT
        with self._lock:
            now = self._clock.monotonic()
            # Looked at again under the lock: another thread may have closed it since.
            if self._state == "closed":  # type: ignore[comparison-overlap]
                return CLOSED_PERMIT
            transition = None
            if self._state == "open":
                if now < self._open_until:
                    return Permit(allowed=False, retry_at=self._open_until)
                self._state = "half_open"
                self._probe_expires = None
                transition = Transition("open", "half_open")
            if self._probe_expires is not None and now < self._probe_expires:
                return Permit(allowed=False, retry_at=self._probe_expires, transition=transition)
            self._probe_token += 1
            self._probe_expires = now + probe_lease
            return Permit(
                allowed=True, probe=True, probe_token=self._probe_token, transition=transition
            )

    def release(self, permit: Permit) -> None:
        """Give back a probe that ended with no outcome, so the next caller may probe."""
        with self._lock:
            if permit.probe and permit.probe_token == self._probe_token:
                self._probe_expires = None

    def record(
        self, permit: Permit, health: Health, *, open_for: float | None = None
    ) -> Transition | None:
        """Count one outcome; ``open_for`` is a 503's Retry-After. Returns any state change."""
        with self._lock:
            now = self._clock.monotonic()
            if permit.probe:
                if permit.probe_token != self._probe_token or self._state != "half_open":
                    return None  # a probe whose lease ran out and was replaced
                self._probe_expires = None
                if health == "unhealthy":
                    return self._open(now, open_for, before="half_open")
                self._close()
                return Transition("half_open", "closed")
            if self._state != "closed" or health == "neutral":
                return None
            failed = health == "unhealthy"
            self._count(now, failed=failed)
            # Only a failure can open the circuit: a success never trips it.
            if failed and self._should_trip(now):
                return self._open(now, open_for, before="closed")
            return None

    def _count(self, now: float, *, failed: bool) -> None:
        if failed:
            self._run.append(now)
        elif self._run:
            self._run.clear()
        window = self._window
        window.append((now, failed))
        # Trim as we go, so a dependency that keeps succeeding keeps a bounded window.
        horizon = now - self.settings.ratio_window
        while window[0][0] < horizon:
            window.popleft()

    def _should_trip(self, now: float) -> bool:
        settings = self.settings
        while self._run and self._run[0] < now - settings.failure_window:
            self._run.popleft()
        if len(self._run) >= settings.consecutive_failures:
            return True
        while self._window and self._window[0][0] < now - settings.ratio_window:
            self._window.popleft()
        calls = len(self._window)
        if calls < settings.ratio_min_calls:
            return False
        failures = sum(1 for _, failed in self._window if failed)
        return failures / calls >= settings.failure_ratio

    def _open(self, now: float, hint: float | None, *, before: BreakerState) -> Transition:
        period = self.settings.open_for
        if hint is not None and self.settings.use_retry_after and hint > 0:
            period = min(hint, self.settings.max_open_for)
        self._state = "open"
        self._open_until = now + period
        self._run.clear()
        self._window.clear()
        return Transition(before, "open")

    def _close(self) -> None:
        self._state = "closed"
        self._run.clear()
        self._window.clear()

    def __repr__(self) -> str:
        return f"CircuitBreaker(state={self.state!r})"
