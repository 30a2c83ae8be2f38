"""``layers``: retrying layers stacked on one another, e.g. 3 x 3 x 4.

A user request calls layer 1, whose handler calls layer 2, ... whose last layer
calls the dependency, which fails (every attempt by default). Each layer is a
retrysafe call with ``RetryPolicy(attempts=n)`` for its ``n``; a layer whose own
call failed answers its caller 502. The layers run in one process, in the manner
of an async service (each call in its own context, a call below runs inside the
attempt above it), so:

- the **nesting guard** (``GovernorSettings(nested_attempts=2)``) sees a call made
  inside another retrysafe call's attempt, as it does in a real process;
- with **deadline propagation**, the user request runs inside
  ``retrysafe.deadline(user_deadline)`` and each layer's handler inside
  ``retrysafe.deadline(<the attempt's time>)``, as ``DeadlineMiddleware`` does with
  the ``Request-Timeout`` header a ``Client(deadline_header=...)`` sends;
- an attempt that times out abandons the calls below it (a cancel scope).

The figure: calls reaching the dependency per user request. Budget and breaker
are off in every configuration, so only the guard and the deadline differ (the
``yours`` configuration uses the governor settings given, with propagation).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

import retrysafe
from retrysafe.decisions import AttemptPlan
from retrysafe.governor import Governor, GovernorSettings
from retrysafe.policy import RetryPolicy
from retrysafe.simulate.clock import SimClock, VirtualTime, client_random
from retrysafe.simulate.configs import YOURS
from retrysafe.simulate.dependency import FAULTS, Fault, FlakyDependency
from retrysafe.simulate.events import EventLoop
from retrysafe.simulate.parallel import default_workers, run_jobs
from retrysafe.simulate.shell import CallEnd, Reply, SimCall, SimShell
from retrysafe.validation import check, check_number, check_whole

__all__ = ["LayerConfig", "LayersResult", "LayersRow", "run_layers"]

#: Seconds a hop between two layers takes, each way.
HOP = 0.001
_NO_PROTECTION = GovernorSettings(budget=None, breaker=None, limiter=None, nested_attempts=None)


@dataclasses.dataclass(frozen=True)
class LayerConfig:
    """A way of stacking the layers: governor settings and whether deadlines propagate."""

    name: str
    policy: RetryPolicy
    governor: GovernorSettings
    propagate_deadline: bool


def layer_configs(
    policy: RetryPolicy | None = None, governor: GovernorSettings | None = None
) -> tuple[LayerConfig, ...]:
    """The four combinations of nesting guard and deadline propagation, and ``yours``."""
    default = RetryPolicy()
    guarded = dataclasses.replace(_NO_PROTECTION, nested_attempts=2)
    configs = [
        LayerConfig("no guard, no deadline", default, _NO_PROTECTION, False),
        LayerConfig("deadline only", default, _NO_PROTECTION, True),
        LayerConfig("guard only", default, guarded, False),
        LayerConfig("guard + deadline", default, guarded, True),
    ]
    if policy is not None or governor is not None:
        configs.append(
            LayerConfig(
                YOURS,
                policy if policy is not None else default,
                governor if governor is not None else GovernorSettings(),
                True,
            )
        )
    return tuple(configs)


@dataclasses.dataclass(frozen=True)
class LayersRow:
    """One configuration: what the user requests cost the dependency, and what they got."""

    config: str
    requests: int
    bottom_calls: int
    succeeded: int
    #: Mean and slowest seconds a user request took.
    mean_seconds: float
    max_seconds: float

    @property
    def calls_per_request(self) -> float:
        """Calls reaching the dependency per user request."""
        return self.bottom_calls / self.requests

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.requests

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "requests": self.requests,
            "bottom_calls": self.bottom_calls,
            "calls_per_request": self.calls_per_request,
            "success_rate": self.success_rate,
            "mean_s": self.mean_seconds,
            "max_s": self.max_seconds,
        }


@dataclasses.dataclass(frozen=True)
class LayersResult:
    """Every configuration of the same stack."""

    attempts: tuple[int, ...]
    failure_rate: float
    fault: Fault
    user_deadline: float
    seed: int
    rows: tuple[LayersRow, ...]
    elapsed: float = dataclasses.field(default=0.0, compare=False)

    def row(self, config: str) -> LayersRow:
        """The row of ``config``."""
        for row in self.rows:
            if row.config == config:
                return row
        raise KeyError(f"no row for {config!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": "layers",
            "layers": list(self.attempts),
            "failure_rate": self.failure_rate,
            "fault": self.fault,
            "user_deadline_s": self.user_deadline,
            "seed": self.seed,
            "results": [row.to_json() for row in self.rows],
        }


class _Stack:
    """The layers of one configuration, each a shell whose dependency is the next layer."""

    def __init__(
        self,
        config: LayerConfig,
        attempts: tuple[int, ...],
        bottom: FlakyDependency,
        loop: EventLoop,
        time_now: VirtualTime,
        seed: int,
    ) -> None:
        self.config = config
        self.loop = loop
        self.time_now = time_now
        self.seed = seed
        self.calls_started = 0
        self.shells: list[SimShell] = []
        for depth, count in enumerate(attempts):
            policy = dataclasses.replace(config.policy, attempts=count)
            governor = Governor(config.governor, clock=SimClock(time_now, random.Random(seed)))
            last = depth == len(attempts) - 1
            send = bottom.send if last else self._handler(depth + 1)
            self.shells.append(
                SimShell(
                    loop, policy=policy, governor=governor, send=send, dependency=f"layer{depth}"
                )
            )

    def clock(self) -> SimClock:
        """A fresh jitter stream for the next call (numbered in the order calls start)."""
        self.calls_started += 1
        return SimClock(self.time_now, client_random(self.seed, 1, self.calls_started))

    def _handler(self, depth: int) -> Callable[[SimCall, AttemptPlan, Reply], None]:
        """Layer ``depth``'s handler: after a hop, make its own retrying call."""
        shell_below = depth

        def handle(parent: SimCall, plan: AttemptPlan, reply: Reply) -> None:
            self.loop.after(HOP, self._serve, shell_below, parent, plan, reply)

        return handle

    def _serve(self, depth: int, parent: SimCall, plan: AttemptPlan, reply: Reply) -> None:
        if parent.ended:
            return
        shell = self.shells[depth]
        clock = self.clock()
        within = None
        if self.config.propagate_deadline:
            # What DeadlineMiddleware does with the attempt's Request-Timeout header.
            seconds = max(0.0, plan.timeout - HOP)

            def within() -> None:
                retrysafe.deadline(seconds, clock=clock).__enter__()

        request = httpx.Request("GET", f"http://layer{depth}.sim/work")

        def ended(end: CallEnd) -> None:
            if end.reason == "cancelled":
                return
            status = 200 if end.ok else 502
            self.loop.after(HOP, reply, httpx.Response(status, request=parent.request))

        child = shell.start(
            request, shell.settings_for(clock), ended, context=parent.context, within=within
        )
        if not child.ended:
            parent.children.append(child)

    def user_request(self, user_deadline: float, ends: list[CallEnd]) -> None:
        shell = self.shells[0]
        clock = self.clock()
        within = None
        if self.config.propagate_deadline:

            def within() -> None:
                retrysafe.deadline(user_deadline, clock=clock).__enter__()

        shell.start(
            httpx.Request("GET", "http://layer0.sim/work"),
            shell.settings_for(clock),
            ends.append,
            within=within,
        )


def _job(
    job: tuple[LayerConfig, tuple[int, ...], float, Fault, float, int, float, int],
) -> LayersRow:
    config, attempts, failure_rate, fault, user_deadline, requests, rate, seed = job
    time_now = VirtualTime()
    loop = EventLoop(time_now)
    bottom = FlakyDependency(
        loop,
        random.Random(seed * 1_000_003 + 7),
        failing=lambda _now: failure_rate,
        latency=0.020,
        latency_sd=0.005,
        fault=fault,
    )
    stack = _Stack(config, attempts, bottom, loop, time_now, seed)
    ends: list[CallEnd] = []
    arrivals = random.Random(seed * 1_000_003 + 11)
    at = 0.0
    for _ in range(requests):
        at += arrivals.expovariate(rate)
        loop.at(at, stack.user_request, user_deadline, ends)
    loop.run()
    durations = [end.ended - end.started for end in ends]
    return LayersRow(
        config=config.name,
        requests=requests,
        bottom_calls=bottom.attempts,
        succeeded=sum(end.ok for end in ends),
        mean_seconds=sum(durations) / len(durations) if durations else 0.0,
        max_seconds=max(durations, default=0.0),
    )


def run_layers(
    *,
    attempts: Sequence[int] = (3, 3, 4),
    failure_rate: float = 1.0,
    fault: Fault = "503",
    user_deadline: float = 5.0,
    requests: int = 200,
    rate: float = 5.0,
    seed: int = 0,
    policy: RetryPolicy | None = None,
    governor: GovernorSettings | None = None,
    workers: int | None = None,
) -> LayersResult:
    """``requests`` user requests at ``rate`` a second through layers making ``attempts``
    attempts each (top first), against a dependency failing at ``failure_rate``."""
    owner = "layers"
    stack = tuple(attempts)
    check(1 <= len(stack) <= 8, owner, "attempts", f"must name 1 to 8 layers, got {len(stack)}")
    for count in stack:
        check(
            isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= 100,
            owner,
            "attempts",
            f"must hold whole numbers from 1 to 100, got {count!r}",
        )
    check_number(owner, "failure_rate", failure_rate, positive=False, infinite_ok=False)
    check(
        failure_rate <= 1,
        owner,
        "failure_rate",
        f"must be a fraction from 0 to 1 (0.5 is 50 %), got {failure_rate!r}",
    )
    check(fault in FAULTS, owner, "fault", f"must be one of {', '.join(FAULTS)}; got {fault!r}")
    check_number(owner, "user_deadline", user_deadline, positive=True, infinite_ok=True)
    check_whole(owner, "requests", requests, at_most=1_000_000)
    check_number(owner, "rate", rate, positive=True, infinite_ok=False)
    configs = layer_configs(policy, governor)
    jobs = [
        (config, stack, failure_rate, fault, user_deadline, requests, rate, seed)
        for config in configs
    ]
    began = time.perf_counter()
    rows = run_jobs(_job, jobs, default_workers() if workers is None else workers)
    return LayersResult(
        stack, failure_rate, fault, user_deadline, seed, tuple(rows), time.perf_counter() - began
    )
