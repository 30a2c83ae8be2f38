"""Governor: the load-protection state of every dependency a client calls."""

from __future__ import annotations

import threading

from retrysafe.clock import Clock, checked_clock
from retrysafe.governor.breaker import CircuitBreaker
from retrysafe.governor.budget import RetryBudget
from retrysafe.governor.fleet_link import FleetLink
from retrysafe.governor.guard import DependencyGuard
from retrysafe.governor.limiter import Limiter
from retrysafe.governor.settings import GovernorSettings

# (imported with the package, light as it is, so that typing.get_type_hints resolves the
# property below; the book itself is made only when a hedging call first needs it)
from retrysafe.latency import LatencyBook

__all__ = ["Governor"]


#: A guard nobody has asked for in this long (seconds) may be swept, if at rest.
IDLE_AFTER = 60.0
#: Sweep at least this often (seconds) when new dependencies keep coming.
SWEEP_EVERY = 60.0
#: Sweep when the number of guards reaches this, or twice what the last sweep kept.
SWEEP_AT_LEAST = 1024


class Governor:
    """Holds one :class:`DependencyGuard` per dependency, created on first use.

    Share one Governor between clients to share their budgets and breakers;
    each ``retrysafe.Client`` makes its own by default. Thread-safe and safe
    for asyncio and trio tasks (no state change spans an await).

    Guards of dependencies no longer called are dropped, so calling many hosts
    keeps a bounded number of guards: when a new guard is made and either the
    count has doubled since the last sweep (at least :data:`SWEEP_AT_LEAST`) or
    :data:`SWEEP_EVERY` seconds have passed, every guard no call has asked for in
    :data:`IDLE_AFTER` seconds that is at rest (:meth:`DependencyGuard.at_rest`:
    what it holds equals a fresh guard, and with a breaker, no call ended within
    its ratio window) is dropped; the next call to it makes a fresh one. Each call
    marks its guard asked (a flag, not a clock read), and a sweep turns the mark
    into "seen now", so a guard is dropped only a minute after the sweep following
    its last call: a call in flight on it started at least that long ago. (A call
    in flight longer than that, with no other call to its dependency, reports its
    outcome to the dropped guard, where nobody sees it.) Finding a guard stays one
    dict lookup; sweeps are paid for by new guards, amortised O(1) each.

    ``fleet`` (such as ``retrysafe.fleet.RedisFleet(url)``) shares cooldowns, pacing
    and a quorum breaker with the other processes using it; each guard is then a
    :class:`~retrysafe.governor.fleet_guard.FleetGuard`. Budgets stay per process.
    """

    def __init__(
        self,
        settings: GovernorSettings | None = None,
        *,
        clock: Clock | None = None,
        fleet: FleetLink | None = None,
    ) -> None:
        if settings is not None and not isinstance(settings, GovernorSettings):
            raise TypeError(
                "Governor's settings must be a retrysafe.GovernorSettings, got "
                f"{type(settings).__name__}; e.g. Governor(GovernorSettings.off())"
            )
        self.settings = settings if settings is not None else GovernorSettings()
        self.clock: Clock = checked_clock(clock)
        self._lock = threading.Lock()
        self._guards: dict[str, DependencyGuard] = {}
        self._swept_at = self.clock.monotonic()
        self._sweep_at = SWEEP_AT_LEAST
        pieces = (self.settings.budget, self.settings.breaker, self.settings.limiter)
        #: Whether any piece of load protection is on (else calls need no guard at all).
        self.protects = any(piece is not None for piece in pieces)
        self._latencies: LatencyBook | None = None
        #: The fleet this governor shares its dependencies' state with, if any.
        self.fleet = fleet
        if fleet is not None:
            from retrysafe.governor.fleet_guard import FleetGuard  # (imports this module)

            self._join_fleet = FleetGuard.around

    @property
    def latencies(self) -> LatencyBook:
        """Per-dependency latency for ``hedge_after="p95"`` (only hedging calls use it;
        made on first use)."""
        book = self._latencies
        if book is None:
            with self._lock:
                if self._latencies is None:
                    self._latencies = LatencyBook()
                book = self._latencies
        return book

    def guard(self, dependency: str) -> DependencyGuard:
        """The guard for ``dependency``, made on first use."""
        guard = self._guards.get(dependency)  # a dict read needs no lock; a miss takes it
        if guard is not None:
            guard.asked = True
            return guard
        with self._lock:
            guard = self._guards.get(dependency)
            if guard is None:
                now = self.clock.monotonic()
                if len(self._guards) >= self._sweep_at or now - self._swept_at >= SWEEP_EVERY:
                    self._sweep(now)
                guard = self._new_guard(dependency, now)
                self._guards[dependency] = guard
            return guard

    def _sweep(self, now: float) -> None:
        """Drop the guards that are old enough and at rest (under the lock)."""
        guards = self._guards
        for dependency, guard in list(guards.items()):
            if guard.asked:  # called since the last sweep: in use as of now
                guard.asked = False
                guard.seen = now
            elif now - guard.seen >= IDLE_AFTER and guard.at_rest():
                del guards[dependency]
                if self._latencies is not None:
                    self._latencies.forget(dependency)
        self._swept_at = now
        self._sweep_at = max(SWEEP_AT_LEAST, 2 * len(guards))

    def _new_guard(self, dependency: str, now: float) -> DependencyGuard:
        settings = self.settings
        guard = DependencyGuard(
            dependency=dependency,
            budget=RetryBudget(settings.budget, self.clock) if settings.budget else None,
            breaker=CircuitBreaker(settings.breaker, self.clock) if settings.breaker else None,
            limiter=Limiter(settings.limiter, self.clock) if settings.limiter else None,
            seen=now,
        )
        return guard if self.fleet is None else self._join_fleet(guard, self.fleet)

    def guards(self) -> list[tuple[str, DependencyGuard]]:
        """A snapshot of every dependency's guard, by dependency name, read without making
        any (``guard()`` would make one for a dependency swept since): what a metrics
        collector reads, never changing what the governor holds."""
        return sorted(dict(self._guards).items())

    def dependencies(self) -> list[str]:
        """Every dependency seen so far."""
        with self._lock:
            return sorted(self._guards)

    def __repr__(self) -> str:
        return f"Governor({len(self._guards)} dependencies, {self.settings!r})"
