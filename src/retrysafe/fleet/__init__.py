"""The fleet: load protection shared by every process (and host) using one Redis.

``Governor(settings, fleet=RedisFleet("redis://host:6379/0"))`` makes a governor's
cooldowns, pacing and circuit breaker fleet-wide: see :class:`RedisFleet` and
``docs/fleet.md``. Budgets stay per process.

Names are imported on first use (PEP 562): ``import retrysafe.fleet`` loads neither
redis-py nor the fleet's modules until one is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retrysafe.lazy_names import lazy_module_functions

if TYPE_CHECKING:
    from retrysafe.fleet.redis_fleet import RedisFleet
    from retrysafe.fleet.settings import FleetSettings

_LAZY: dict[str, str] = {
    "RedisFleet": "retrysafe.fleet.redis_fleet",
    "FleetSettings": "retrysafe.fleet.settings",
}

__all__ = ["FleetSettings", "RedisFleet"]

# Hidden from type checkers, which see the names through the TYPE_CHECKING imports above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_module_functions(__name__, _LAZY, globals(), __all__)
