"""``brownout``: a dependency failing each attempt independently at rate p, from 0 to 100 %.

For each configuration (a plain retrier, budget only, budget + breaker, and the
user's settings) and each p: the load amplification (attempts that reached the
dependency per call) and the success rate, with every call a retrysafe call
through the real engine and governor, on a virtual clock.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from retrysafe.governor import GovernorSettings
from retrysafe.policy import RetryPolicy
from retrysafe.simulate.configs import Config, load_protection_configs
from retrysafe.simulate.dependency import Fault
from retrysafe.simulate.parallel import default_workers, run_jobs
from retrysafe.simulate.traffic import TrafficShape, checked_shape, run_traffic
from retrysafe.validation import check, check_number

__all__ = ["BrownoutResult", "BrownoutRow", "run_brownout"]

DEFAULT_RATES = tuple(step / 10 for step in range(11))


@dataclasses.dataclass(frozen=True)
class BrownoutRow:
    """One configuration at one failure rate."""

    config: str
    failure_rate: float
    calls: int
    #: Attempts that reached the dependency.
    attempts: int
    succeeded: int
    #: Calls retrysafe failed without sending anything (breaker open).
    refused_unsent: int
    breaker_opened: int

    @property
    def load(self) -> float:
        """Load amplification: attempts at the dependency per call."""
        return self.attempts / self.calls

    @property
    def success_rate(self) -> float:
        """The share of calls that succeeded (0 to 1)."""
        return self.succeeded / self.calls

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "failure_rate": self.failure_rate,
            "calls": self.calls,
            "attempts": self.attempts,
            "load": self.load,
            "success_rate": self.success_rate,
            "refused_unsent": self.refused_unsent,
            "breaker_opened": self.breaker_opened,
        }


@dataclasses.dataclass(frozen=True)
class BrownoutResult:
    """Every configuration at every failure rate."""

    shape: TrafficShape
    seed: int
    failure_rates: tuple[float, ...]
    configs: tuple[str, ...]
    rows: tuple[BrownoutRow, ...]
    elapsed: float = dataclasses.field(default=0.0, compare=False)

    def row(self, config: str, failure_rate: float) -> BrownoutRow:
        """The row of ``config`` at ``failure_rate``."""
        for row in self.rows:
            if row.config == config and row.failure_rate == failure_rate:
                return row
        raise KeyError(f"no row for {config!r} at failure rate {failure_rate!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": "brownout",
            "calls": self.shape.calls,
            "rate_per_s": self.shape.rate,
            "fault": self.shape.fault,
            "latency_s": self.shape.latency,
            "processes": self.shape.processes,
            "seed": self.seed,
            "results": [row.to_json() for row in self.rows],
        }


def _job(job: tuple[Config, TrafficShape, float, int, int]) -> BrownoutRow:
    config, shape, failure_rate, seed, stream = job
    traffic = run_traffic(config, shape, lambda _now: failure_rate, seed=seed, stream=stream)
    return BrownoutRow(
        config=config.name,
        failure_rate=failure_rate,
        calls=traffic.started,
        attempts=len(traffic.arrivals),
        succeeded=sum(end.ok for end in traffic.ends),
        refused_unsent=sum(end.refused_unsent for end in traffic.ends),
        breaker_opened=traffic.breaker_opened,
    )


def run_brownout(
    *,
    failure_rates: Sequence[float] = DEFAULT_RATES,
    calls: int = 2000,
    rate: float = 100.0,
    latency: float = 0.020,
    fault: Fault = "503",
    seed: int = 0,
    policy: RetryPolicy | None = None,
    governor: GovernorSettings | None = None,
    workers: int | None = None,
    processes: int = 1,
) -> BrownoutResult:
    """``calls`` calls at ``rate`` a second (Poisson) per failure rate and configuration,
    dealt in turn to ``processes`` client processes, each with a governor of its own.
    The dependency answers in ``latency`` seconds on average (sd a quarter of it).

    Every configuration sees the same arrivals and jitter streams at a given rate.
    """
    owner = "brownout"
    rates = tuple(failure_rates)
    check(len(rates) > 0, owner, "failure_rates", "must hold at least one rate")
    for index, value in enumerate(rates):
        check_number(owner, "failure_rates", value, positive=False, infinite_ok=False)
        check(
            value <= 1,
            owner,
            "failure_rates",
            f"must be fractions from 0 to 1 (0.5 is 50 %), got {value!r}",
        )
        # A result's row is found by its rate: a second run at one rate could not be shown.
        check(
            value not in rates[:index],
            owner,
            "failure_rates",
            f"must list each rate once, got {value!r} twice (for another draw at the same "
            "rate, run again with another seed)",
        )
    shape = checked_shape(
        owner,
        calls=calls,
        until=None,
        rate=rate,
        latency=latency,
        fault=fault,
        processes=processes,
    )
    configs = load_protection_configs(policy, governor)
    jobs = [
        (config, shape, failure_rate, seed, stream)
        for stream, failure_rate in enumerate(rates)
        for config in configs
    ]
    began = time.perf_counter()
    rows = run_jobs(_job, jobs, default_workers() if workers is None else workers)
    return BrownoutResult(
        shape,
        seed,
        rates,
        tuple(config.name for config in configs),
        tuple(rows),
        time.perf_counter() - began,
    )
