"""Open-loop traffic: calls arriving at a steady rate, each a retrysafe call through the
simulator's shell, spread over one or more client processes calling one dependency.

Each process has a governor of its own (its retry budget, its breaker), as processes
that do not share their state through a fleet do; a fleet that shares it
(:mod:`retrysafe.fleet`) is not modelled."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from typing import Final

import httpx

from retrysafe.governor import Governor
from retrysafe.simulate.clock import SimClock, VirtualTime, client_random
from retrysafe.simulate.configs import Config
from retrysafe.simulate.dependency import FAULTS, Fault, FlakyDependency
from retrysafe.simulate.events import EventLoop
from retrysafe.simulate.shell import CallEnd, SimShell
from retrysafe.validation import check, check_number, check_whole

__all__ = ["MAX_PROCESSES", "Traffic", "TrafficShape", "checked_shape", "run_traffic"]

_URL = "http://dependency.sim/items"
#: The most client processes a run deals its calls to (each has its own governor).
MAX_PROCESSES: Final = 1000


@dataclasses.dataclass(frozen=True)
class TrafficShape:
    """How calls arrive and how the dependency answers (seconds, calls per second).

    Calls arrive as a Poisson process at ``rate``, and stop after ``calls`` of them (a
    count of calls, however long they take to arrive: brownout) or at ``until`` seconds
    (a run of that length, however many calls arrive in it: outage). Give one of the two.
    ``processes``: how many client processes the calls are dealt to in turn, each with a
    governor of its own (``rate`` is the total of them all).
    """

    calls: int | None
    rate: float
    latency: float = 0.020
    latency_sd: float = 0.005
    fault: Fault = "503"
    until: float | None = None
    processes: int = 1

    def __post_init__(self) -> None:
        if (self.calls is None) == (self.until is None):
            raise ValueError(
                f"TrafficShape needs calls or until, not both or neither; got calls="
                f"{self.calls!r}, until={self.until!r}"
            )


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What happened in one run: every call's end, and when attempts reached the dependency."""

    ends: tuple[CallEnd, ...]
    arrivals: tuple[float, ...]
    breaker_opened: int
    #: Calls started (each at its arrival).
    started: int
    #: Calls still unfinished when nothing more could happen (an attempt with no timeout
    #: against a dependency that never answers); they count as failed.
    unfinished: int


def checked_shape(
    owner: str,
    *,
    calls: int | None,
    until: float | None,
    rate: float,
    latency: float,
    fault: Fault,
    processes: int,
) -> TrafficShape:
    """The traffic of a run, its settings checked first (``owner`` names the run in a
    refusal). A run of ``until`` seconds is checked for the calls it should see
    (``rate * until``), as a count of calls is, so that one of absurd size is refused
    before it starts. Answers take ``latency`` on average, with a quarter of it as sd."""
    expected = calls if calls is not None else max(1, round(rate * (until or 0.0)))
    _check_traffic(owner, expected, rate, latency, fault, processes)
    return TrafficShape(
        calls=calls,
        until=until,
        rate=rate,
        latency=latency,
        latency_sd=latency / 4,
        fault=fault,
        processes=processes,
    )


def _check_traffic(
    owner: str, calls: int, rate: float, latency: float, fault: str, processes: int
) -> None:
    check_whole(owner, "calls", calls, at_most=10_000_000)
    check_number(owner, "rate", rate, positive=True, infinite_ok=False)
    check_number(owner, "latency", latency, positive=False, infinite_ok=False)
    check(fault in FAULTS, owner, "fault", f"must be one of {', '.join(FAULTS)}; got {fault!r}")
    check_whole(owner, "processes", processes, at_most=MAX_PROCESSES)


def run_traffic(
    config: Config,
    shape: TrafficShape,
    failing: Callable[[float], float],
    *,
    seed: int,
    stream: int,
) -> Traffic:
    """Send calls at ``shape.rate`` a second (Poisson arrivals) under ``config``: ``shape.calls``
    of them, or those that arrive before ``shape.until``.

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
    shells = [
        SimShell(
            loop,
            policy=config.policy,
            governor=Governor(config.governor, clock=SimClock(now, _governor_random(seed, index))),
            send=dependency.send,
        )
        for index in range(shape.processes)
    ]
    ends: list[CallEnd] = []
    arrivals = random.Random(seed * 1_000_003 + stream + 500_009)
    calls = shape.calls if shape.calls is not None else math.inf
    until = shape.until if shape.until is not None else math.inf
    at = arrivals.expovariate(shape.rate)
    started = 0
    while started < calls and at < until:
        shell = shells[started % len(shells)]  # (dealt in turn, as a load balancer would)
        loop.at(at, _start, shell, SimClock(now, client_random(seed, stream, started)), ends)
        started += 1
        at += arrivals.expovariate(shape.rate)
    loop.run()
    return Traffic(
        ends=tuple(ends),
        arrivals=tuple(dependency.arrivals),
        breaker_opened=sum(shell.observer.breaker_opened for shell in shells),
        started=started,
        unfinished=started - len(ends),
    )


def _governor_random(seed: int, process: int) -> random.Random:
    """The random numbers of process ``process``'s governor: the first draws as a lone
    process's always has (a run of one process is the same as before there were more)."""
    return random.Random(seed) if process == 0 else random.Random(f"governor:{seed}:{process}")


def _start(shell: SimShell, clock: SimClock, ends: list[CallEnd]) -> None:
    shell.start(httpx.Request("GET", _URL), shell.settings_for(clock), ends.append)
