"""``outage``: a dependency that goes down for a while, then comes back.

Calls arrive steadily (Poisson) for ``duration`` seconds; the dependency fails
every attempt from ``down_at`` for ``down_for`` seconds, and answers normally
before and after. Per configuration: the load on the dependency over time
(attempts per second in buckets of ``bucket`` seconds), how long after the
outage began calls start failing fast (refused locally, nothing sent), how long
a failing call takes, and how long after the outage ended every call succeeds
again.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Final

from retrysafe.governor import GovernorSettings
from retrysafe.policy import RetryPolicy
from retrysafe.simulate.configs import Config, load_protection_configs
from retrysafe.simulate.dependency import Fault
from retrysafe.simulate.parallel import default_workers, run_jobs
from retrysafe.simulate.traffic import TrafficShape, checked_shape, run_traffic
from retrysafe.validation import check, check_number

__all__ = ["OutageResult", "OutageRow", "OutageWindow", "run_outage"]


#: The most buckets (columns of the timeline) one outage run may report.
MAX_BUCKETS: Final = 1000


@dataclasses.dataclass(frozen=True)
class OutageWindow:
    """When the dependency is down, and how the run is cut into buckets (seconds)."""

    duration: float = 60.0
    down_at: float = 10.0
    down_for: float = 20.0
    bucket: float = 5.0

    @property
    def up_at(self) -> float:
        return self.down_at + self.down_for

    def failing(self, now: float) -> float:
        """The failure probability at ``now``: 1 while down, else 0."""
        return 1.0 if self.down_at <= now < self.up_at else 0.0

    def bucket_widths(self) -> tuple[float, ...]:
        """Each bucket's width (seconds): ``bucket`` each, the last one the rest of the run
        when the run is not a whole number of buckets.

        ``duration / bucket`` is a float quotient: 2.1 / 0.3 is 7.000000000000001, whose
        ceiling would make an eighth bucket 3e-16 s wide, and a rate divided by that width
        (or by a zero one) absurd. A remainder within float rounding of a whole number of
        buckets is that error, not a bucket.
        """
        ratio = self.duration / self.bucket
        whole = max(1, round(ratio))
        if math.isclose(ratio, whole, rel_tol=1e-9):
            return (self.bucket,) * whole
        count = math.ceil(ratio)
        return (self.bucket,) * (count - 1) + (self.duration - (count - 1) * self.bucket,)

    def bucket_starts(self) -> tuple[float, ...]:
        """The start of each bucket (seconds)."""
        return tuple(index * self.bucket for index in range(len(self.bucket_widths())))

    def per_second(self, times: list[float]) -> tuple[float, ...]:
        """How many of ``times`` fall in each bucket, per second of the bucket's width.

        Only times within the run, [0, duration), count; one that rounding puts past the
        last bucket's start still counts in it.
        """
        widths = self.bucket_widths()
        tally = [0] * len(widths)
        for moment in times:
            if 0 <= moment < self.duration:
                tally[min(int(moment // self.bucket), len(widths) - 1)] += 1
        return tuple(number / width for number, width in zip(tally, widths, strict=True))


@dataclasses.dataclass(frozen=True)
class OutageRow:
    """One configuration through the outage."""

    config: str
    #: Calls started within the run (the same for every configuration).
    calls: int
    #: Attempts per second at the dependency, per bucket (the last may be partial).
    load_per_s: tuple[float, ...]
    #: Calls started per second, per bucket.
    offered_per_s: tuple[float, ...]
    #: Attempts that reached the dependency per call started while it was down.
    attempts_per_call_down: float
    #: Seconds from the outage's start to the first call refused without sending
    #: (None: no call ever failed fast).
    fail_fast_after: float | None
    #: Median seconds a call that failed during the outage took to fail.
    failure_p50: float | None
    #: Seconds from the outage's end until every call started later succeeded.
    recover_after: float
    #: Of the calls started, the share that succeeded (None: no call started).
    success_rate: float | None
    breaker_opened: int

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "calls": self.calls,
            "load_per_s": list(self.load_per_s),
            "offered_per_s": list(self.offered_per_s),
            "attempts_per_call_down": self.attempts_per_call_down,
            "fail_fast_after_s": self.fail_fast_after,
            "failure_p50_s": self.failure_p50,
            "recover_after_s": self.recover_after,
            "success_rate": self.success_rate,
            "breaker_opened": self.breaker_opened,
        }


@dataclasses.dataclass(frozen=True)
class OutageResult:
    """Every configuration through the same outage."""

    shape: TrafficShape
    window: OutageWindow
    seed: int
    rows: tuple[OutageRow, ...]
    elapsed: float = dataclasses.field(default=0.0, compare=False)

    def row(self, config: str) -> OutageRow:
        """The row of ``config``."""
        for row in self.rows:
            if row.config == config:
                return row
        raise KeyError(f"no row for {config!r}")

    def bucket_starts(self) -> tuple[float, ...]:
        """The start of each bucket (seconds)."""
        return self.window.bucket_starts()

    def to_json(self) -> dict[str, Any]:
        window = self.window
        return {
            "scenario": "outage",
            "rate_per_s": self.shape.rate,
            "fault": self.shape.fault,
            "latency_s": self.shape.latency,
            "processes": self.shape.processes,
            "duration_s": window.duration,
            "down_at_s": window.down_at,
            "down_for_s": window.down_for,
            "bucket_s": window.bucket,
            "seed": self.seed,
            "results": [row.to_json() for row in self.rows],
        }


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _job(job: tuple[Config, TrafficShape, OutageWindow, int]) -> OutageRow:
    config, shape, window, seed = job
    traffic = run_traffic(config, shape, window.failing, seed=seed, stream=0)
    ends = traffic.ends
    down = [end for end in ends if window.down_at <= end.started < window.up_at]
    arrivals_down = sum(window.down_at <= moment < window.up_at for moment in traffic.arrivals)
    refused = [end.started for end in ends if end.refused_unsent and end.started >= window.down_at]
    failed_later = [end.started for end in ends if not end.ok and end.started >= window.up_at]
    return OutageRow(
        config=config.name,
        calls=traffic.started,
        load_per_s=window.per_second(list(traffic.arrivals)),
        offered_per_s=window.per_second([end.started for end in ends]),
        attempts_per_call_down=arrivals_down / max(1, len(down)),
        fail_fast_after=min(refused) - window.down_at if refused else None,
        failure_p50=_median([end.ended - end.started for end in down if not end.ok]),
        recover_after=max(failed_later) - window.up_at if failed_later else 0.0,
        success_rate=sum(end.ok for end in ends) / traffic.started if traffic.started else None,
        breaker_opened=traffic.breaker_opened,
    )


def run_outage(
    *,
    duration: float = 60.0,
    down_at: float = 10.0,
    down_for: float = 20.0,
    bucket: float = 5.0,
    rate: float = 50.0,
    latency: float = 0.020,
    fault: Fault = "503",
    seed: int = 0,
    policy: RetryPolicy | None = None,
    governor: GovernorSettings | None = None,
    workers: int | None = None,
    processes: int = 1,
) -> OutageResult:
    """Calls at ``rate`` a second for ``duration`` s; the dependency down from ``down_at``
    for ``down_for`` s. Every configuration sees the same arrivals and jitter streams.
    The calls are dealt in turn to ``processes`` client processes, each with a governor
    of its own; the dependency answers in ``latency`` seconds on average.

    Calls arrive as a Poisson process over [0, duration): none starts after the run's end
    (their retries may run past it), so a row's ``calls`` is how many arrived in the run.
    """
    owner = "outage"
    for field, value in (("duration", duration), ("bucket", bucket), ("rate", rate)):
        check_number(owner, field, value, positive=True, infinite_ok=False)
    for field, value in (("down_at", down_at), ("down_for", down_for)):
        check_number(owner, field, value, positive=False, infinite_ok=False)
    check(
        down_at + down_for <= duration,
        owner,
        "down_for",
        f"must end within the run: down_at + down_for ({down_at + down_for!r}) > duration "
        f"({duration!r})",
    )
    check(bucket <= duration, owner, "bucket", f"must be <= duration, got {bucket!r}")
    columns = duration / bucket
    check(
        columns <= MAX_BUCKETS,
        owner,
        "bucket",
        f"is too small for the run: {duration!r} s / {bucket!r} s is {columns:.0f} columns, at "
        f"most {MAX_BUCKETS}; raise bucket to at least {duration / MAX_BUCKETS:g} s",
    )
    # (calls arrive until the run ends, however many that is)
    shape = checked_shape(
        owner,
        calls=None,
        until=duration,
        rate=rate,
        latency=latency,
        fault=fault,
        processes=processes,
    )
    window = OutageWindow(duration=duration, down_at=down_at, down_for=down_for, bucket=bucket)
    configs = load_protection_configs(policy, governor)
    began = time.perf_counter()
    jobs = [(config, shape, window, seed) for config in configs]
    rows = run_jobs(_job, jobs, default_workers() if workers is None else workers)
    return OutageResult(shape, window, seed, tuple(rows), time.perf_counter() - began)
