"""Open-loop traffic: calls arriving at a steady rate, each a retrysafe call through the
simulator's shell, all sharing one governor (one client process calling one dependency)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import httpx

from retrysafe.governor import Governor
from retrysafe.simulate.clock import SimClock, VirtualTime, client_random
from retrysafe.simulate.configs import Config
from retrysafe.simulate.dependency import Fault, FlakyDependency
from retrysafe.simulate.events import EventLoop
from retrysafe.simulate.shell import CallEnd, SimShell

__all__ = ["Traffic", "TrafficShape", "run_traffic"]

_URL = "http://dependency.sim/items"


@dataclasses.dataclass(frozen=True)
class TrafficShape:
    """How calls arrive and how the dependency answers (seconds, calls per second)."""

    calls: int
    rate: float
    latency: float = 0.020
    latency_sd: float = 0.005
    fault: Fault = "503"


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What happened in one run: every call's end, and when attempts reached the dependency."""

    ends: tuple[CallEnd, ...]
    arrivals: tuple[float, ...]
    breaker_opened: int
    #: Calls still unfinished when nothing more could happen (an attempt with no timeout
    #: against a dependency that never answers); they count as failed.
    unfinished: int


def run_traffic(
    config: Config,
    shape: TrafficShape,
    failing: Callable[[float], float],
    *,
    seed: int,
    stream: int,
) -> Traffic:
    """Send ``shape.calls`` calls at ``shape.rate`` a second (Poisson arrivals) under ``config``.

    ``stream`` separates runs that must not share random numbers (one per failure rate,
    say); the same (seed, stream) gives the same arrivals and jitter to every config.
    """
    now = VirtualTime()
    loop = EventLoop(now)
    dependency = FlakyDependency(
        loop,
        random.Random(seed * 1_000_003 + stream),
        failing=failing,
        latency=shape.latency,
        latency_sd=shape.latency_sd,
        fault=shape.fault,
    )
    governor = Governor(config.governor, clock=SimClock(now, random.Random(seed)))
    shell = SimShell(loop, policy=config.policy, governor=governor, send=dependency.send)
    ends: list[CallEnd] = []
    arrivals = random.Random(seed * 1_000_003 + stream + 500_009)
    at = 0.0
    for number in range(shape.calls):
        at += arrivals.expovariate(shape.rate)
        loop.at(at, _start, shell, SimClock(now, client_random(seed, stream, number)), ends)
    loop.run()
    unfinished = shape.calls - len(ends)
    return Traffic(
        tuple(ends), tuple(dependency.arrivals), shell.observer.breaker_opened, unfinished
    )


def _start(shell: SimShell, clock: SimClock, ends: list[CallEnd]) -> None:
    shell.start(httpx.Request("GET", _URL), shell.settings_for(clock), ends.append)
