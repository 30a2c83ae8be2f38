"""How much load retrysafe's governor (retry budget + circuit breaker) lets reach a sick server.

Starts a :class:`retrysafe.chaos.ChaosServer` on 127.0.0.1 (in this process, on a
background thread) and drives it from 20 worker threads sharing one client. Attempts are
counted from the chaos server's own request log, never from the client.

1. Full outage (``/status/503``): attempts at the server per logical call with the default
   ``Client()``, with the retry budget alone (breaker off) and with a plain 4-attempt loop
   (governor off); plus the latency of calls that fail fast with ``CircuitOpen``.
2. 10 % independent failures (``/flaky?rate=0.1``, one key per call): success rate and load.
3. An outage of 3 s that then ends (``/outage/{key}?down_ms=3000``) under a steady stream
   of calls: a timeline in 0.5 s buckets and how long after the outage success is back.

The ``retrysafe`` logger's records are counted, not written (the library logs a WARNING
per failed call, fast-failed ones included); ``--library-logging`` leaves logging alone.

    .venv/bin/python benchmarks/load_protection.py [--quick] [--json] [--seed N]
        [--library-logging]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import json
import logging
import math
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

import retrysafe
from retrysafe import Client, RetryPolicy
from retrysafe.chaos import ChaosRecord, ChaosServer
from retrysafe.errors import ApiError, CircuitOpen
from retrysafe.governor import BreakerSettings, Governor, GovernorSettings
from retrysafe.request_facts import default_dependency

WORKERS = 20
BUCKET = 0.5  # seconds per timeline bucket
OUTAGE_MS = 3000
OPEN_FOR = 2.0
CALL_EVERY = 0.020  # seconds between the calls of one stream thread
WARMUP_CALLS = 50  # unmeasured calls before a one-thread latency measurement
# The plain retry loop's backoff: small so that 4 attempts x N calls finish quickly.
PLAIN_POLICY = RetryPolicy(backoff_base=0.001, backoff_cap=0.004)

# Targets (DESIGN.md §5 and the benchmark brief).
OUTAGE_LOAD_TARGET = 1.2
OUTAGE_LOAD_AIM = 1.1
FAST_FAIL_P99_TARGET_MS = 1.0
FLAKY_SUCCESS_TARGET = 0.995
FLAKY_LOAD_TARGET = 1.15
RECOVERED_SUCCESS = 0.95


# ---------------------------------------------------------------------------------------
# Driving calls
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CallResult:
    """One logical call as the caller saw it (times are ``time.monotonic()``)."""

    started: float
    latency: float  # seconds, from time.perf_counter() around client.get
    cpu: float  # seconds of this thread's CPU time (time.thread_time()) for the call
    outcome: str  # "ok", "CircuitOpen", or "<ErrorClass>:<reason>"


def classify(exc: BaseException) -> str:
    if isinstance(exc, CircuitOpen):
        return "CircuitOpen"
    if isinstance(exc, ApiError):
        return f"{type(exc).__name__}:{exc.reason}"
    return f"{type(exc).__name__}"


def timed_get(client: Client, url: str) -> CallResult:
    started = time.monotonic()
    cpu0 = time.thread_time()
    t0 = time.perf_counter()
    try:
        response = client.get(url)
    except Exception as exc:  # every failure is a data point here
        latency = time.perf_counter() - t0
        return CallResult(started, latency, time.thread_time() - cpu0, classify(exc))
    latency = time.perf_counter() - t0
    cpu = time.thread_time() - cpu0
    outcome = "ok" if response.status_code == 200 else f"status:{response.status_code}"
    return CallResult(started, latency, cpu, outcome)


@dataclasses.dataclass
class Batch:
    """The results of a batch of calls and how long it took."""

    results: list[CallResult]
    wall: float
    unfinished_threads: int


def run_batch(client: Client, urls: Sequence[str], *, workers: int, time_limit: float) -> Batch:
    """Send every URL once, ``workers`` at a time, from threads sharing ``client``.

    Workers stop taking new calls after ``time_limit`` seconds; calls not started by then
    are missing from the results (and reported by the caller).
    """
    counter = itertools.count()
    results: list[CallResult] = []
    lock = threading.Lock()
    started = time.monotonic()
    stop_at = started + time_limit

    def worker() -> None:
        while time.monotonic() < stop_at:
            index = next(counter)  # itertools.count is atomic under the GIL
            if index >= len(urls):
                return
            result = timed_get(client, urls[index])
            with lock:
                results.append(result)

    threads = [
        threading.Thread(target=worker, name=f"bench-{n}", daemon=True) for n in range(workers)
    ]
    for thread in threads:
        thread.start()
    join_by = stop_at + 35.0  # a call can take at most the policy deadline (30 s) more
    for thread in threads:
        thread.join(max(0.0, join_by - time.monotonic()))
    unfinished = sum(thread.is_alive() for thread in threads)
    with lock:
        return Batch(list(results), time.monotonic() - started, unfinished)


def run_stream(
    client: Client, url: str, *, workers: int, every: float, duration: float
) -> tuple[list[CallResult], int]:
    """``workers`` threads each calling ``url`` every ``every`` s for ``duration`` s."""
    results: list[CallResult] = []
    lock = threading.Lock()
    begin = time.monotonic() + 0.05
    stop_at = begin + duration

    def worker(offset: float) -> None:
        next_call = begin + offset
        while True:
            now = time.monotonic()
            if next_call > now:
                time.sleep(next_call - now)
            if time.monotonic() >= stop_at:
                return
            result = timed_get(client, url)
            with lock:
                results.append(result)
            # Fixed rate, but never a burst to catch up after a slow call.
            next_call = max(next_call + every, time.monotonic())

    threads = [
        threading.Thread(target=worker, args=(n * every / workers,), name=f"stream-{n}")
        for n in range(workers)
    ]
    for thread in threads:
        thread.daemon = True
        thread.start()
    join_by = stop_at + 35.0
    for thread in threads:
        thread.join(max(0.0, join_by - time.monotonic()))
    unfinished = sum(thread.is_alive() for thread in threads)
    with lock:
        return list(results), unfinished


class CountingHandler(logging.Handler):
    """Counts the ``retrysafe`` logger's records by level instead of writing them."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] += 1


def log_counts(handler: CountingHandler | None, before: dict[str, int]) -> dict[str, int] | None:
    """Records logged since ``before`` (None when the library's logging was left alone)."""
    if handler is None:
        return None
    return {level: count - before.get(level, 0) for level, count in handler.counts.items()}


# ---------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in [0, 1]); NaN for no samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def latency_ms(samples: Sequence[float]) -> dict[str, float | int]:
    return {
        "count": len(samples),
        "p50_ms": percentile(samples, 0.50) * 1000,
        "p99_ms": percentile(samples, 0.99) * 1000,
        "max_ms": max(samples) * 1000 if samples else math.nan,
    }


def outcome_counts(results: Sequence[CallResult]) -> dict[str, int]:
    return dict(collections.Counter(result.outcome for result in results).most_common())


def records(server: ChaosServer, keep: Callable[[ChaosRecord], bool]) -> list[ChaosRecord]:
    return [record for record in server.log() if keep(record)]


def breaker_state(client: Client, url: str) -> str:
    guard = client.governor.guard(default_dependency(httpx.URL(url)))
    return guard.breaker.state if guard.breaker is not None else "off"


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------


def outage_load(
    server: ChaosServer, name: str, client: Client, calls: int, time_limit: float
) -> dict[str, Any]:
    """``calls`` GETs of an always-503 URL; attempts counted from the server's log."""
    key = f"s1-{name}"
    url = f"{server.url}/status/503?key={key}"
    batch = run_batch(client, [url] * calls, workers=WORKERS, time_limit=time_limit)
    attempts = len(server.log(key))
    budget = client.governor.settings.budget
    # A budget allows at most max_tokens + ratio x calls + min_per_second x wall retries.
    bound = (
        None
        if budget is None
        else 1
        + (budget.max_tokens + budget.ratio * calls + budget.min_per_second * batch.wall) / calls
    )
    fast = [result for result in batch.results if result.outcome == "CircuitOpen"]
    return {
        "calls": calls,
        "completed": len(batch.results),
        "attempts_at_server": attempts,
        "load": attempts / calls,
        "budget_load_bound": bound,
        "wall_s": batch.wall,
        "unfinished_threads": batch.unfinished_threads,
        "outcomes": outcome_counts(batch.results),
        "circuit_open_latency": latency_ms([result.latency for result in fast]),
        "circuit_open_cpu": latency_ms([result.cpu for result in fast]),
        "breaker_after": breaker_state(client, url),
    }


def sequential_fast_fail(
    server: ChaosServer, client: Client, calls: int, *, quiet_logger: bool
) -> dict[str, Any]:
    """One thread, the breaker already open: the cost of a CircuitOpen call on its own.

    With ``quiet_logger`` the ``retrysafe`` logger is set to ERROR for the measurement,
    so the WARNING record each failed call logs is not even created.
    """
    key = "s1-default"
    url = f"{server.url}/status/503?key={key}"
    before = len(server.log(key))
    latencies: list[float] = []
    cpu: list[float] = []
    others: collections.Counter[str] = collections.Counter()
    library_logger = logging.getLogger("retrysafe")
    old_level = library_logger.level
    if quiet_logger:
        library_logger.setLevel(logging.ERROR)
    try:
        for _ in range(WARMUP_CALLS):  # not measured
            timed_get(client, url)
        for _ in range(calls):
            result = timed_get(client, url)
            if result.outcome == "CircuitOpen":
                latencies.append(result.latency)
                cpu.append(result.cpu)
            else:
                others[result.outcome] += 1
    finally:
        library_logger.setLevel(old_level)
    return {
        "calls": calls,
        "latency": latency_ms(latencies),
        "cpu": latency_ms(cpu),
        "other_outcomes": dict(others),
        "attempts_at_server": len(server.log(key)) - before,
    }


def burn_cpu(seconds: float) -> None:
    """Spin in pure Python for ``seconds`` of this thread's CPU time."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def gil_reference(cpu_per_call: float, calls: int) -> dict[str, Any]:
    """What WORKERS threads see calling a pure-Python function of the same CPU cost.

    No retrysafe, no I/O: the wall-time tail here comes from threads queueing for the
    GIL alone, the yardstick for the fail-fast latencies measured with WORKERS threads.
    """
    counter = itertools.count()
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + 10.0

    def worker() -> None:
        while next(counter) < calls and time.monotonic() < stop_at:
            t0 = time.perf_counter()
            burn_cpu(cpu_per_call)
            latency = time.perf_counter() - t0
            with lock:
                latencies.append(latency)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, stop_at + 1.0 - time.monotonic()))
    with lock:
        return {"cpu_per_call_ms": cpu_per_call * 1000, "latency": latency_ms(list(latencies))}


def scenario_outage(server: ChaosServer, calls: int, fast_calls: int) -> dict[str, Any]:
    result: dict[str, Any] = {"url": "/status/503 (always 503, no Retry-After)"}
    with Client() as client:
        result["default"] = outage_load(server, "default", client, calls, time_limit=20.0)
        result["default_sequential"] = sequential_fast_fail(
            server, client, fast_calls, quiet_logger=False
        )
        result["default_sequential_quiet"] = sequential_fast_fail(
            server, client, fast_calls, quiet_logger=True
        )
    cpu_per_call = result["default_sequential"]["cpu"]["p50_ms"] / 1000
    result["gil_reference"] = gil_reference(cpu_per_call, fast_calls)
    budget_only = Governor(GovernorSettings(breaker=None))
    with Client(governor=budget_only) as client:
        result["budget_only"] = outage_load(server, "budget", client, calls, time_limit=20.0)
    with Client(governor=Governor(GovernorSettings.off()), policy=PLAIN_POLICY) as client:
        result["plain_loop"] = outage_load(server, "plain", client, calls, time_limit=20.0)
    result["plain_policy"] = {
        "attempts": PLAIN_POLICY.attempts,
        "backoff_base": PLAIN_POLICY.backoff_base,
        "backoff_cap": PLAIN_POLICY.backoff_cap,
    }
    return result


def scenario_flaky(server: ChaosServer, calls: int, seed: int) -> dict[str, Any]:
    urls = [f"{server.url}/flaky?rate=0.1&seed={seed}&key=s2-call-{n}" for n in range(calls)]
    with Client() as client:
        batch = run_batch(client, urls, workers=WORKERS, time_limit=30.0)
    seen = records(server, lambda record: record.key.startswith("s2-call-"))
    successes = sum(result.outcome == "ok" for result in batch.results)
    budget = client.governor.settings.budget
    ceiling = (
        None
        if budget is None
        else budget.max_tokens + budget.ratio * calls + budget.min_per_second * batch.wall
    )
    return {
        "url": f"/flaky?rate=0.1&seed={seed}&key=s2-call-<n>",
        "calls": calls,
        "completed": len(batch.results),
        "successes": successes,
        "success_rate": successes / calls,
        "attempts_at_server": len(seen),
        "failed_attempts_at_server": sum(record.action != "status:200" for record in seen),
        "load": len(seen) / calls,
        # What a plain 4-attempt loop expects at this failure rate: 1 + r + r^2 + r^3.
        "unbudgeted_expected_load": 1 + 0.1 + 0.1**2 + 0.1**3,
        "retries_made": len(seen) - len(batch.results),
        "budget_retry_ceiling": ceiling,
        "wall_s": batch.wall,
        "unfinished_threads": batch.unfinished_threads,
        "outcomes": outcome_counts(batch.results),
    }


def scenario_recovery(server: ChaosServer, duration: float) -> dict[str, Any]:
    key = "s3-outage"
    url = f"{server.url}/outage/{key}?down_ms={OUTAGE_MS}"
    settings = GovernorSettings(breaker=BreakerSettings(open_for=OPEN_FOR))
    transitions: list[tuple[float, str]] = []

    def hook(event: retrysafe.RetryEvent) -> None:
        if event.kind == "circuit":
            transitions.append((time.monotonic(), event.reason))

    with Client(governor=Governor(settings), hooks=[hook]) as client:
        results, unfinished = run_stream(
            client, url, workers=WORKERS, every=CALL_EVERY, duration=duration
        )
    seen = server.log(key)
    if not seen:
        raise RuntimeError("scenario 3: no request reached the chaos server")
    t0 = seen[0].time  # the outage starts at the key's first request (server clock)
    outage_end = OUTAGE_MS / 1000

    buckets = max(1, math.ceil(duration / BUCKET) + 1)
    rows = [collections.Counter[str]() for _ in range(buckets)]
    for result in results:
        index = min(buckets - 1, max(0, math.floor((result.started - t0) / BUCKET)))
        row = rows[index]
        row["calls"] += 1
        if result.outcome == "ok":
            row["ok"] += 1
        elif result.outcome == "CircuitOpen":
            row["circuit_open"] += 1
        else:
            row["other"] += 1
    for record in seen:
        index = min(buckets - 1, max(0, math.floor((record.time - t0) / BUCKET)))
        rows[index]["attempts"] += 1
        if record.action == "status:200":
            rows[index]["attempts_ok"] += 1
    timeline = [
        {
            "start_s": n * BUCKET,
            "calls": row["calls"],
            "ok": row["ok"],
            "circuit_open": row["circuit_open"],
            "other_errors": row["other"],
            "success_rate": row["ok"] / row["calls"] if row["calls"] else math.nan,
            "attempts_at_server": row["attempts"],
            "attempts_answered_200": row["attempts_ok"],
        }
        for n, row in enumerate(rows)
    ]
    while timeline and timeline[-1]["calls"] == 0 and timeline[-1]["attempts_at_server"] == 0:
        timeline.pop()

    def recovered(entry: dict[str, Any]) -> bool:
        return bool(entry["calls"] > 0 and entry["success_rate"] >= RECOVERED_SUCCESS)

    after_end = [entry for entry in timeline if entry["start_s"] >= outage_end - 1e-9]
    first_good = next((entry for entry in after_end if recovered(entry)), None)
    stays_good = None
    for position, entry in enumerate(after_end):
        if recovered(entry) and all(
            recovered(later) for later in after_end[position:] if later["calls"]
        ):
            stays_good = entry
            break
    first_200 = next((r.time - t0 for r in seen if r.action == "status:200"), None)
    # The last call that did not succeed, by start time; every later call succeeded.
    failed_starts = [r.started - t0 for r in results if r.outcome != "ok"]
    last_failure = max(failed_starts) if failed_starts else None
    probe_rtts = [r.latency for r in results if r.outcome == "ok"]
    return {
        "url": f"/outage/{key}?down_ms={OUTAGE_MS}",
        "settings": repr(settings),
        "stream": {"threads": WORKERS, "every_s": CALL_EVERY, "duration_s": duration},
        "calls": len(results),
        "unfinished_threads": unfinished,
        "attempts_at_server": len(seen),
        "outcomes": outcome_counts(results),
        "outage_end_s": outage_end,
        "timeline": timeline,
        "bucket_s": BUCKET,
        "first_bucket_back_s": None if first_good is None else first_good["start_s"],
        "stays_back_from_s": None if stays_good is None else stays_good["start_s"],
        "recovery_after_end_s": (
            None if first_good is None else first_good["start_s"] - outage_end
        ),
        "first_200_at_server_s": first_200,
        "first_200_after_end_s": None if first_200 is None else first_200 - outage_end,
        "last_failed_call_start_s": last_failure,
        "bound_after_end_s": OPEN_FOR + percentile(probe_rtts, 0.5) if probe_rtts else OPEN_FOR,
        "open_for_s": OPEN_FOR,
        "breaker_transitions": [(round(at - t0, 3), what) for at, what in transitions],
    }


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------


def machine_facts() -> dict[str, Any]:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cores": os.cpu_count(),
        "usable_cores": affinity,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "httpx": httpx.__version__,
        "retrysafe": getattr(retrysafe, "__version__", "?"),
        "platform": platform.platform(),
        "gil": "enabled" if getattr(sys, "_is_gil_enabled", lambda: True)() else "disabled",
    }


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def fmt_outcomes(outcomes: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in outcomes.items()) or "-"


def fmt_latency(lat: dict[str, float | int]) -> str:
    return f"p50 {lat['p50_ms']:7.3f} ms  p99 {lat['p99_ms']:7.3f} ms  max {lat['max_ms']:7.3f} ms"


def fmt_logs(counts: dict[str, int] | None) -> str:
    if counts is None:
        return "not counted (--library-logging)"
    return ", ".join(f"{level} {count}" for level, count in sorted(counts.items())) or "none"


def print_report(report: dict[str, Any]) -> None:
    facts = report["machine"]
    print("retrysafe load protection benchmark" + (" (--quick)" if report["quick"] else ""))
    print(
        f"machine: {facts['cores']} cores ({facts['usable_cores']} usable), "
        f"{facts['python']}, httpx {facts['httpx']}, retrysafe {facts['retrysafe']}, "
        f"GIL {facts['gil']}"
    )
    print(f"         {facts['platform']}")
    print(
        f"setup: chaos server in this process on 127.0.0.1; {WORKERS} worker threads share "
        "one client; attempts counted from the server's log;"
    )
    print(f"       'retrysafe' log records: {report['logging']}")

    s1 = report["outage"]
    default, budget, plain = s1["default"], s1["budget_only"], s1["plain_loop"]
    print()
    print(f"1. Full outage: {default['calls']} GETs, {WORKERS} at a time, {s1['url']}")
    print(f"   {'client':<44} {'attempts':>8} {'load':>7} {'wall s':>7}  outcomes")
    rows = [
        ("Client() - all defaults", default),
        ("Client(governor: budget only, breaker off)", budget),
        ("plain 4-attempt loop (governor off)*", plain),
    ]
    for label, row in rows:
        print(
            f"   {label:<44} {row['attempts_at_server']:>8} {row['load']:>6.3f}x "
            f"{row['wall_s']:>7.2f}  {fmt_outcomes(row['outcomes'])}"
        )
    policy = s1["plain_policy"]
    print(
        f"   * RetryPolicy(attempts={policy['attempts']}, backoff_base={policy['backoff_base']}, "
        f"backoff_cap={policy['backoff_cap']}) so that it finishes; every other client "
        "here uses the default RetryPolicy()"
    )
    print(
        f"   load, default Client: {default['load']:.3f}x  target <= {OUTAGE_LOAD_TARGET} "
        f"(aim {OUTAGE_LOAD_AIM}): {verdict(default['load'] <= OUTAGE_LOAD_TARGET)}"
        "  (the breaker opened after the first failures)"
    )
    print(
        f"   load, budget alone:   {budget['load']:.3f}x  target <= {OUTAGE_LOAD_TARGET}: "
        f"{verdict(budget['load'] <= OUTAGE_LOAD_TARGET)}  (budget allows at most "
        f"{budget['budget_load_bound']:.3f}x = 1 + (max_tokens + ratio*calls + "
        "min_per_second*wall)/calls)"
    )
    print("   CircuitOpen (fail-fast) calls: wall time (perf_counter around client.get) and CPU")
    print("   time of the calling thread (time.thread_time()):")
    sequential = s1["default_sequential"]
    quiet = s1["default_sequential_quiet"]
    lines = [
        (f"{WORKERS} threads, wall", default["circuit_open_latency"]),
        (f"{WORKERS} threads, CPU", default["circuit_open_cpu"]),
        ("1 thread, wall", sequential["latency"]),
        ("1 thread, CPU", sequential["cpu"]),
        ("1 thread, logger at ERROR, wall", quiet["latency"]),
    ]
    reference = s1["gil_reference"]
    for label, lat in lines:
        print(
            f"     {label:<33} n={lat['count']:<5} {fmt_latency(lat)}  "
            f"p99 < {FAST_FAIL_P99_TARGET_MS} ms: "
            f"{verdict(lat['p99_ms'] < FAST_FAIL_P99_TARGET_MS)}"
        )
    print(
        f"     reference: {WORKERS} threads running a pure-Python function that burns "
        f"{reference['cpu_per_call_ms']:.3f} ms CPU (no retrysafe, no I/O):"
    )
    print(
        f"     {'':<33} n={reference['latency']['count']:<5} {fmt_latency(reference['latency'])}"
        "  <- the GIL queueing alone"
    )
    print(
        f"     (one-thread figures after {WARMUP_CALLS} unmeasured warm-up calls; the "
        f"{WORKERS}-thread wall tail is queueing for the GIL, see the reference)"
    )
    extra = sequential["attempts_at_server"] + quiet["attempts_at_server"]
    print(f"     attempts reaching the server during the one-thread fail-fast calls: {extra}")
    print(f"   'retrysafe' log records in this scenario: {fmt_logs(s1['log_records'])}")

    s2 = report["flaky"]
    print()
    print(f"2. 10% independent failures: {s2['calls']} GETs, {WORKERS} at a time, {s2['url']}")
    print("   client: Client() - all defaults")
    print(
        f"   success {s2['successes']}/{s2['calls']} = {s2['success_rate'] * 100:.2f} %  "
        f"target >= {FLAKY_SUCCESS_TARGET * 100:.1f} %: "
        f"{verdict(s2['success_rate'] >= FLAKY_SUCCESS_TARGET)}"
    )
    print(
        f"   load {s2['attempts_at_server']}/{s2['calls']} = {s2['load']:.3f}x  target <= "
        f"{FLAKY_LOAD_TARGET}: {verdict(s2['load'] <= FLAKY_LOAD_TARGET)}  "
        f"(failed attempts at the server: {s2['failed_attempts_at_server']}; an ungoverned "
        f"4-attempt loop expects {s2['unbudgeted_expected_load']:.3f}x)"
    )
    print(f"   outcomes: {fmt_outcomes(s2['outcomes'])};  wall {s2['wall_s']:.2f} s")
    if s2["budget_retry_ceiling"] is not None:
        print(
            f"   retries made {s2['retries_made']}; the retry budget grants at most "
            f"max_tokens + ratio*calls + min_per_second*wall = "
            f"{s2['budget_retry_ceiling']:.1f} (a 10% failure rate wants ~0.111 retries per call)"
        )
    print(f"   'retrysafe' log records in this scenario: {fmt_logs(s2['log_records'])}")

    s3 = report["recovery"]
    stream = s3["stream"]
    print()
    print(
        f"3. Outage that ends: {s3['url']}, {stream['threads']} threads each calling every "
        f"{stream['every_s'] * 1000:.0f} ms for {stream['duration_s']:.1f} s "
        f"(offered {stream['threads'] / stream['every_s']:.0f} calls/s)"
    )
    print(f"   governor: {s3['settings']}")
    print("   (RetryPolicy: defaults)")
    print(
        f"   t=0 is the outage's first request at the server; it answers 503 until "
        f"t={s3['outage_end_s']:.1f} s, then 200. Calls are bucketed by start time, "
        "attempts by arrival at the server."
    )
    print(
        f"   {'t (s)':>11} {'calls':>6} {'ok':>5} {'CircOpen':>8} {'other':>6} "
        f"{'success':>8} {'attempts':>8} {'of them 200':>11}"
    )
    for entry in s3["timeline"]:
        rate = entry["success_rate"]
        rate_text = "-" if math.isnan(rate) else f"{rate * 100:.1f}%"
        marker = " <- outage ends" if abs(entry["start_s"] - s3["outage_end_s"]) < 1e-9 else ""
        print(
            f"   {entry['start_s']:>4.1f}-{entry['start_s'] + s3['bucket_s']:<4.1f}  "
            f"{entry['calls']:>6} {entry['ok']:>5} {entry['circuit_open']:>8} "
            f"{entry['other_errors']:>6} {rate_text:>8} {entry['attempts_at_server']:>8} "
            f"{entry['attempts_answered_200']:>11}{marker}"
        )
    print(
        f"   outcomes: {fmt_outcomes(s3['outcomes'])}; attempts at the server "
        f"{s3['attempts_at_server']}"
    )
    print(f"   breaker transitions (s after t=0): {s3['breaker_transitions']}")
    print(f"   'retrysafe' log records in this scenario: {fmt_logs(s3['log_records'])}")
    after = s3["recovery_after_end_s"]
    if after is None:
        print(f"   success never back >= {RECOVERED_SUCCESS * 100:.0f}% in a bucket: MISS")
    else:
        bound = s3["bound_after_end_s"]
        print(
            f"   success back >= {RECOVERED_SUCCESS * 100:.0f}% from the bucket starting at "
            f"t={s3['first_bucket_back_s']:.1f} s, {after:.1f} s after the outage ended "
            f"(0.5 s buckets; >= {RECOVERED_SUCCESS * 100:.0f}% in every later bucket "
            f"from t={s3['stays_back_from_s']} s)"
        )
        first = s3["first_200_after_end_s"]
        first_text = "none" if first is None else f"{first:.3f} s after the end"
        last = s3["last_failed_call_start_s"]
        last_text = "none" if last is None else f"t={last:.3f} s"
        print(
            f"   first 200 at the server (the probe): {first_text}; "
            f"last call that failed started at {last_text}"
        )
        print(
            f"   expected at most: open period + one probe = {s3['open_for_s']:.1f} s + "
            f"{(bound - s3['open_for_s']) * 1000:.1f} ms (median call) = {bound:.3f} s after "
            f"the end: first 200 {verdict(first is not None and first <= bound)}, "
            f"bucket {verdict(after <= bound)}"
        )
    print()
    print(f"total wall time {report['wall_s']:.1f} s")


def json_safe(value: Any) -> Any:
    """``value`` with NaN as null and tuples as lists, for strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls, shorter stream")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--seed", type=int, default=1, help="seed of the /flaky draws")
    parser.add_argument(
        "--library-logging",
        action="store_true",
        help="leave the 'retrysafe' logger alone (with no logging configured, Python then "
        "writes its WARNING per failed call to stderr); by default they are only counted",
    )
    args = parser.parse_args(argv)

    calls = 400 if args.quick else 1000
    fast_calls = 300 if args.quick else 1000
    duration = 5.5 if args.quick else 8.0

    handler: CountingHandler | None = None
    library_logger = logging.getLogger("retrysafe")
    if not args.library_logging:
        handler = CountingHandler()
        library_logger.addHandler(handler)
        library_logger.propagate = False

    began = time.monotonic()
    server = ChaosServer("127.0.0.1").start()
    try:
        report: dict[str, Any] = {
            "machine": machine_facts(),
            "quick": args.quick,
            "workers": WORKERS,
            "logging": "stderr (Python's default)" if handler is None else "counted, not written",
        }
        scenarios: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("outage", lambda: scenario_outage(server, calls, fast_calls)),
            ("flaky", lambda: scenario_flaky(server, calls, args.seed)),
            ("recovery", lambda: scenario_recovery(server, duration)),
        ]
        for name, scenario in scenarios:
            server.reset()
            before = dict(handler.counts) if handler is not None else {}
            report[name] = scenario()
            report[name]["log_records"] = log_counts(handler, before)
    finally:
        server.stop()
        if handler is not None:
            library_logger.removeHandler(handler)
            library_logger.propagate = True
    report["wall_s"] = time.monotonic() - began
    if args.json:
        print(json.dumps(json_safe(report), indent=2, allow_nan=False))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
