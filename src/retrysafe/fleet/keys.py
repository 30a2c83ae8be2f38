"""The Redis key names of one namespace (see :mod:`retrysafe.fleet.scripts`)."""

from __future__ import annotations

__all__ = ["FleetKeys"]


class FleetKeys:
    """Key names under ``namespace``; a dependency's names are made once and kept."""

    __slots__ = ("_made", "alive", "changed", "namespace")

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        #: The sorted set of processes by their last heartbeat.
        self.alive = f"{namespace}:alive"
        #: The pub/sub channel every change of state is announced on.
        self.changed = f"{namespace}:changed"
        self._made: dict[str, tuple[str, str, str, str, str, str]] = {}

    def of(self, dependency: str) -> tuple[str, str, str, str, str, str]:
        """``(pace, cool, open, probe, votes, gaps)`` of ``dependency`` (gaps: the paced
        slots given back with others reserved behind them)."""
        names = self._made.get(dependency)
        if names is None:
            ns = self.namespace
            names = (
                f"{ns}:pace:{dependency}",
                f"{ns}:cool:{dependency}",
                f"{ns}:open:{dependency}",
                f"{ns}:probe:{dependency}",
                f"{ns}:votes:{dependency}",
                f"{ns}:gaps:{dependency}",
            )
            self._made[dependency] = names
        return names
