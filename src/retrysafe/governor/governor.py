"""Governor: the load-protection state of every dependency a client calls."""

from __future__ import annotations

import dataclasses
import threading

from retrysafe.clock import Clock, SystemClock
from retrysafe.governor.breaker import CircuitBreaker
from retrysafe.governor.budget import RetryBudget
from retrysafe.governor.limiter import Limiter
from retrysafe.governor.settings import GovernorSettings

__all__ = ["DependencyGuard", "Governor"]


@dataclasses.dataclass(frozen=True)
class DependencyGuard:
    """The budget, breaker and limiter of one dependency (None where switched off)."""

    dependency: str
    budget: RetryBudget | None
    breaker: CircuitBreaker | None
    limiter: Limiter | None


class Governor:
    """Holds one :class:`DependencyGuard` per dependency, created on first use.

    Share one Governor between clients to share their budgets and breakers;
    each ``retrysafe.Client`` makes its own by default. Thread-safe and safe
    for asyncio and trio tasks (no state change spans an await).
    """

    def __init__(
        self, settings: GovernorSettings | None = None, *, clock: Clock | None = None
    ) -> None:
        self.settings = settings if settings is not None else GovernorSettings()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._guards: dict[str, DependencyGuard] = {}

    def guard(self, dependency: str) -> DependencyGuard:
        """The guard for ``dependency``, made on first use."""
        with self._lock:
            guard = self._guards.get(dependency)
            if guard is None:
                guard = self._new_guard(dependency)
                self._guards[dependency] = guard
            return guard

    def _new_guard(self, dependency: str) -> DependencyGuard:
        settings = self.settings
        return DependencyGuard(
            dependency=dependency,
            budget=RetryBudget(settings.budget, self.clock) if settings.budget else None,
            breaker=CircuitBreaker(settings.breaker, self.clock) if settings.breaker else None,
            limiter=Limiter(settings.limiter, self.clock) if settings.limiter else None,
        )

    def dependencies(self) -> list[str]:
        """Every dependency seen so far."""
        with self._lock:
            return sorted(self._guards)

    def __repr__(self) -> str:
        return f"Governor({len(self._guards)} dependencies, {self.settings!r})"
