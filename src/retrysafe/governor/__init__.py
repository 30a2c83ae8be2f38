"""Load protection per dependency: retry budgets, circuit breakers, cooldowns.

A per-request retry limit does not bound load: during an outage every caller
multiplies its traffic by its attempts. The :class:`Governor` keeps, per
dependency (by default the URL's origin), a :class:`RetryBudget`, a
:class:`CircuitBreaker` and a :class:`Limiter`, consulted by the engine before
every attempt and after every outcome.
"""

from retrysafe.governor.breaker import BreakerState, CircuitBreaker, Health, Permit, Transition
from retrysafe.governor.budget import RetryBudget
from retrysafe.governor.governor import Governor
from retrysafe.governor.guard import DependencyGuard
from retrysafe.governor.limiter import Limiter
from retrysafe.governor.settings import (
    BreakerSettings,
    BudgetSettings,
    GovernorSettings,
    LimiterSettings,
)

__all__ = [
    "BreakerSettings",
    "BreakerState",
    "BudgetSettings",
    "CircuitBreaker",
    "DependencyGuard",
    "Governor",
    "GovernorSettings",
    "Health",
    "Limiter",
    "LimiterSettings",
    "Permit",
    "RetryBudget",
    "Transition",
]
