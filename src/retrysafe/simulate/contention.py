"""``contention``: the AWS "Exponential Backoff and Jitter" set-up, on retrysafe's engine.

N clients start together. Each reads the version of one row and writes it back
conditionally (optimistic concurrency): the write succeeds only if no other write
succeeded since its read. Losers back off and redo both. Every message takes
``|Normal(latency, latency_sd)|``. A client is done when it hears its write won.

``calls`` counts conditional writes (as the article does), ``completion_ms`` the
time until the last client is done, both averaged over ``runs`` runs.

The ``full`` strategy is retrysafe itself: each client is one call driven through
the real :class:`~retrysafe.engine.Call` (via :class:`retrysafe.drive.Drive`), with
``RetryPolicy(backoff_base=base, backoff_cap=cap)``, no attempt limit, no deadline,
and a rule that says a lost write (412) may be retried; the governor is off, as
the article's clients have none. The others are the comparison formulas of
:mod:`retrysafe.simulate.formulas`, each client a loop around the formula.
With ``policy`` or ``governor`` given, a sixth strategy ``yours`` runs through the
engine with them (the lost-write rule added to the policy's rules; a call that
gives up is done too, and counted in ``gave_up``).

Every message is one event on a virtual clock; nothing sleeps. Each client has
its own random stream (network delays and jitter), seeded by (seed, run, client).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Collection, Sequence
from heapq import heapify, heappop, heappush
from typing import Any

import httpx

from retrysafe.classify import Verdict
from retrysafe.decisions import AttemptPlan
from retrysafe.governor import Governor, GovernorSettings
from retrysafe.policy import RetryPolicy
from retrysafe.simulate.clock import SimClock, VirtualTime, client_random
from retrysafe.simulate.configs import YOURS
from retrysafe.simulate.events import EventLoop
from retrysafe.simulate.formulas import STRATEGIES, Strategy, formula_wait
from retrysafe.simulate.parallel import default_workers, run_jobs
from retrysafe.simulate.shell import CallEnd, Reply, SimCall, SimShell
from retrysafe.validation import check, check_number

__all__ = [
    "ContentionResult",
    "ContentionRow",
    "ContentionSettings",
    "lost_write_is_retryable",
    "run_contention",
]

#: The status of a conditional write that lost the race.
LOST_WRITE = 412
_ROW_URL = "http://occ.sim/row"


def lost_write_is_retryable(response: httpx.Response) -> Verdict | None:
    """The contention rule: a lost conditional write (412) may be redone, nothing was
    written; anything else is judged by the defaults."""
    if response.status_code == LOST_WRITE:
        return _LOST_WRITE_VERDICT
    return None


#: Verdicts are frozen values: one serves every lost write.
_LOST_WRITE_VERDICT = Verdict.retry("write_conflict", processed="no")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContentionSettings:
    """The contention scenario's parameters (seconds for times). Frozen and validated."""

    clients: Collection[int] = tuple(range(10, 200, 20))
    runs: int = 100
    seed: int = 0
    latency: float = 0.010
    latency_sd: float = 0.002
    backoff_base: float = 0.005
    backoff_cap: float = 2.0
    strategies: Collection[Strategy] = STRATEGIES
    #: The ``yours`` strategy's policy and governor settings (None: not run, unless the
    #: other is given; then the missing one is the default).
    policy: RetryPolicy | None = None
    governor: GovernorSettings | None = None

    def __post_init__(self) -> None:
        owner = "ContentionSettings"
        clients = tuple(self.clients)
        check(len(clients) > 0, owner, "clients", "must name at least one number of clients")
        for count in clients:
            check(
                isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= 100_000,
                owner,
                "clients",
                f"must hold whole numbers from 1 to 100000, got {count!r}",
            )
        object.__setattr__(self, "clients", clients)
        check(
            isinstance(self.runs, int) and 1 <= self.runs <= 1_000_000,
            owner,
            "runs",
            f"must be a whole number from 1 to 1000000, got {self.runs!r}",
        )
        check(isinstance(self.seed, int), owner, "seed", f"must be an integer, got {self.seed!r}")
        for field in ("latency", "latency_sd", "backoff_base", "backoff_cap"):
            check_number(owner, field, getattr(self, field), positive=False, infinite_ok=False)
        check(
            self.backoff_base <= self.backoff_cap,
            owner,
            "backoff_base",
            f"must be <= backoff_cap ({self.backoff_base!r} > {self.backoff_cap!r})",
        )
        strategies = tuple(self.strategies)
        for strategy in strategies:
            check(
                strategy in STRATEGIES,
                owner,
                "strategies",
                f"must be among {', '.join(STRATEGIES)}; got {strategy!r}",
            )
        object.__setattr__(self, "strategies", strategies)

    @property
    def runs_yours(self) -> bool:
        """Whether the ``yours`` strategy runs (a policy or governor was given)."""
        return self.policy is not None or self.governor is not None

    def engine_policy(self) -> RetryPolicy:
        """The policy of the ``full`` strategy: retrysafe's backoff with the article's numbers."""
        return RetryPolicy(
            attempts=2**31 - 1,
            attempt_timeout=math.inf,
            deadline=math.inf,
            min_attempt_time=0.0,
            backoff_base=self.backoff_base,
            backoff_cap=self.backoff_cap,
            rules=(lost_write_is_retryable,),
        )

    def yours_policy(self) -> RetryPolicy:
        """The user's policy, with the lost-write rule first among its rules."""
        policy = self.policy if self.policy is not None else RetryPolicy()
        return dataclasses.replace(policy, rules=(lost_write_is_retryable, *policy.rules))


@dataclasses.dataclass(frozen=True)
class ContentionRow:
    """Means over the runs for one number of clients and one strategy."""

    clients: int
    strategy: str
    calls: float
    completion_ms: float
    #: Clients that gave up instead of writing (only the ``yours`` strategy can).
    gave_up: float = 0.0

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "clients": self.clients,
            "strategy": self.strategy,
            "calls": self.calls,
            "completion_ms": self.completion_ms,
        }
        if self.strategy == YOURS:
            row["gave_up"] = self.gave_up
        return row


@dataclasses.dataclass(frozen=True)
class ContentionResult:
    """The contention table: one row per (clients, strategy)."""

    settings: ContentionSettings
    rows: tuple[ContentionRow, ...]
    #: Wall-clock seconds the sweep took (not part of the result's value).
    elapsed: float = dataclasses.field(default=0.0, compare=False)

    def row(self, clients: int, strategy: str) -> ContentionRow:
        """The row for ``clients`` and ``strategy``."""
        for row in self.rows:
            if row.clients == clients and row.strategy == strategy:
                return row
        raise KeyError(f"no row for {clients} clients and strategy {strategy!r}")

    def to_json(self) -> dict[str, Any]:
        """``{"scenario": "contention", "results": [{"clients", "strategy", "calls",
        "completion_ms"}, ...]}`` (``yours`` rows add ``gave_up``)."""
        return {"scenario": "contention", "results": [row.to_json() for row in self.rows]}


# -- one run ----------------------------------------------------------------------------


def formula_run(
    settings: ContentionSettings, strategy: Strategy, clients: int, run: int
) -> tuple[int, float]:
    """One run of a comparison formula: (conditional writes, seconds until all are done).

    Each client's transaction is one heap entry keyed by when its write reaches the
    row; the read's time rides along (the write wins if no write won after it).
    """
    mean, sd = settings.latency, settings.latency_sd
    base, cap = settings.backoff_base, settings.backoff_cap
    streams = [client_random(settings.seed, run, client) for client in range(clients)]
    heap: list[tuple[float, int, float, int, float]] = []
    for client, rng in enumerate(streams):
        gauss = rng.gauss
        read_at = abs(gauss(mean, sd))
        write_at = read_at + abs(gauss(mean, sd)) + abs(gauss(mean, sd))
        heap.append((write_at, client, read_at, 0, base))
    heapify(heap)
    last_won = -1.0
    writes = 0
    done = 0.0
    while heap:
        write_at, client, read_at, retries, previous = heappop(heap)
        writes += 1
        rng = streams[client]
        gauss = rng.gauss
        heard_at = write_at + abs(gauss(mean, sd))
        if last_won < read_at:
            last_won = write_at
            if heard_at > done:
                done = heard_at
            continue
        wait = formula_wait(strategy, retries, previous, base, cap, rng)
        start = heard_at + wait
        read_at = start + abs(gauss(mean, sd))
        write_at = read_at + abs(gauss(mean, sd)) + abs(gauss(mean, sd))
        heappush(heap, (write_at, client, read_at, retries + 1, wait))
    return writes, done


class _Row:
    """The one row under optimistic concurrency, as the engine-driven clients see it."""

    def __init__(self, loop: EventLoop, mean: float, sd: float) -> None:
        self.loop = loop
        self.mean = mean
        self.sd = sd
        self.last_won = -1.0
        self.writes = 0
        #: One lost-write response per call, handed back for each write it loses (the
        #: engine reads only its status; building a response per attempt cost a quarter
        #: of the run time).
        self._lost: dict[SimCall, httpx.Response] = {}

    def send(self, call: SimCall, plan: AttemptPlan, reply: Reply) -> None:
        """One attempt is a read, then a conditional write; the reply says which it was."""
        clock = call.drive.settings.clock
        assert isinstance(clock, SimClock)
        gauss = clock.rng.gauss
        read_at = self.loop.now + abs(gauss(self.mean, self.sd))
        write_at = read_at + abs(gauss(self.mean, self.sd)) + abs(gauss(self.mean, self.sd))
        self.loop.at(write_at, self._write, call, read_at, clock.rng, reply)

    def _write(self, call: SimCall, read_at: float, rng: random.Random, reply: Reply) -> None:
        self.writes += 1
        won = self.last_won < read_at
        if won:
            self.last_won = self.loop.now
        if won:
            response = httpx.Response(200, request=call.request)
        else:
            response = self._lost.get(call) or self._lost.setdefault(
                call, httpx.Response(LOST_WRITE, request=call.request)
            )
        self.loop.after(abs(rng.gauss(self.mean, self.sd)), reply, response)


def engine_run(
    settings: ContentionSettings,
    policy: RetryPolicy,
    governor: GovernorSettings,
    clients: int,
    run: int,
) -> tuple[int, float, int]:
    """One run with every client a retrysafe call: (writes, seconds until all are done,
    clients that gave up)."""
    time_now = VirtualTime()
    loop = EventLoop(time_now)
    row = _Row(loop, settings.latency, settings.latency_sd)
    shared = Governor(governor, clock=SimClock(time_now, random.Random(settings.seed)))
    shell = SimShell(loop, policy=policy, governor=shared, send=row.send, dependency="occ-row")
    ends: list[CallEnd] = []
    # Every client sends the same PUT; nothing in a call changes its request, so one
    # request serves them all (building one per client was a fifth of the run time).
    request = httpx.Request("PUT", _ROW_URL)
    for client in range(clients):
        clock = SimClock(time_now, client_random(settings.seed, run, client))
        shell.start(request, shell.settings_for(clock), ends.append)
    loop.run()
    done = max(end.ended for end in ends)
    return row.writes, done, sum(not end.ok for end in ends)


# -- the sweep --------------------------------------------------------------------------


def _job(job: tuple[ContentionSettings, str, int]) -> ContentionRow:
    """Every run of one (strategy, clients): their means."""
    settings, strategy, clients = job
    writes = 0
    seconds = 0.0
    gave_up = 0
    if strategy == "full" or strategy == YOURS:
        if strategy == "full":
            policy, governor = settings.engine_policy(), GovernorSettings.off()
        else:
            policy = settings.yours_policy()
            governor = settings.governor if settings.governor is not None else GovernorSettings()
        for run in range(settings.runs):
            run_writes, run_seconds, run_gave_up = engine_run(
                settings, policy, governor, clients, run
            )
            writes += run_writes
            seconds += run_seconds
            gave_up += run_gave_up
    else:
        assert strategy in STRATEGIES
        for run in range(settings.runs):
            run_writes, run_seconds = formula_run(settings, strategy, clients, run)
            writes += run_writes
            seconds += run_seconds
    runs = settings.runs
    return ContentionRow(clients, strategy, writes / runs, 1000.0 * seconds / runs, gave_up / runs)


def run_contention(
    *,
    clients: Sequence[int] = tuple(range(10, 200, 20)),
    runs: int = 100,
    seed: int = 0,
    strategies: Sequence[Strategy] = STRATEGIES,
    policy: RetryPolicy | None = None,
    governor: GovernorSettings | None = None,
    workers: int | None = None,
    settings: ContentionSettings | None = None,
) -> ContentionResult:
    """Run the contention sweep; the same arguments always give the same result.

    ``workers``: processes to spread the (strategy, clients) jobs over (default one
    per CPU); the answer does not depend on it. ``settings`` replaces every other
    argument but ``workers`` (for latency and backoff numbers other than the article's).
    """
    if settings is None:
        settings = ContentionSettings(
            clients=tuple(clients),
            runs=runs,
            seed=seed,
            strategies=tuple(strategies),
            policy=policy,
            governor=governor,
        )
    names: list[str] = list(settings.strategies)
    if settings.runs_yours:
        names.append(YOURS)
    jobs = [(settings, name, count) for count in settings.clients for name in names]
    # The costliest jobs first, so the last worker is not left with a big one.
    costly = {"none": 4, "exponential": 3, "full": 2, YOURS: 2}
    order = sorted(jobs, key=lambda job: -costly.get(job[1], 1) * job[2] ** 2)
    began = time.perf_counter()
    done = run_jobs(_job, order, default_workers() if workers is None else workers)
    by_key = {(row.clients, row.strategy): row for row in done}
    rows = tuple(by_key[(count, name)] for count in settings.clients for name in names)
    return ContentionResult(settings, rows, time.perf_counter() - began)
