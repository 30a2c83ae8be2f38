"""Virtual time for the simulator: one shared ``now``, a random stream per caller.

The simulator never sleeps: a wait is an event further along the queue, and the
clock reads the time of the event being handled. Each simulated client has its
own seeded random stream (its network delays and its jitter), so what one
client draws does not depend on how its events interleave with the others'.
"""

from __future__ import annotations

import random

__all__ = ["SimClock", "SimulationError", "VirtualTime", "client_random"]

#: The wall-clock time the virtual clock starts at (only HTTP-dates read it).
WALL_START = 1_700_000_000.0


class SimulationError(RuntimeError):
    """The simulator was used in a way it cannot honour (a real sleep, a bad event)."""


class VirtualTime:
    """The one ``now`` of a simulation run, in seconds; only the event loop moves it."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class SimClock:
    """A :class:`retrysafe.Clock` that reads virtual time and draws from its own stream.

    ``sleep`` refuses: inside the simulator a wait must be scheduled, not slept.
    """

    __slots__ = ("_time", "rng")

    def __init__(self, time: VirtualTime, rng: random.Random) -> None:
        self._time = time
        self.rng = rng

    def monotonic(self) -> float:
        return self._time.now

    def time(self) -> float:
        return WALL_START + self._time.now

    def sleep(self, seconds: float) -> None:
        raise SimulationError("the simulator never sleeps: a wait is scheduled as an event")

    async def async_sleep(self, seconds: float) -> None:
        raise SimulationError("the simulator never sleeps: a wait is scheduled as an event")

    def random(self) -> float:
        return self.rng.random()

    def __repr__(self) -> str:
        return f"SimClock(now={self._time.now!r})"


def client_random(seed: int, run: int, client: int) -> random.Random:
    """The random stream of one client in one run, fixed by the seed alone."""
    return random.Random((seed * 1_000_003 + run) * 1_000_003 + client)
