"""What retrysafe's load protection costs a healthy caller and saves a failing server.

Starts a :class:`retrysafe.chaos.ChaosServer` on 127.0.0.1 (in this process, on a
background thread) and drives it from a pool of worker threads sharing one client per
run (200 concurrent calls by default). Attempts are counted from the chaos server's own
request log, never from the client. Every configuration uses the default ``RetryPolicy()``
(4 attempts, full-jitter backoff from 0.25 s); only the governor differs:

- ``Client()``: the defaults of ``GovernorSettings()``;
- ``plain retrier``: ``Governor(GovernorSettings.off())``, a plain 4-attempt retry loop;
- ``budget only``: the default retry budget, breaker off;
- ``old defaults``: the settings before issue 9 (ratio 0.1, 20 tokens; breaker on 5
  failures in a row or a 50 % ratio over 60 s / 20 calls, open 20 s);
- ``finagle 20%``: a 20 % budget (Finagle's / Envoy's ratio, 100 tokens) with the
  default breaker;
- ``0.28, 20 tokens``: a larger ratio but the old bucket, with the default breaker (the
  bucket, not only the ratio, must cover many concurrent calls failing at once).

Scenarios, each with a fresh client (fresh budget and breaker):

1. Independent failures (``/flaky?rate=R&seed=S``, one key per call, so every
   configuration sees the same draws): success rate and attempts per call.
2. Full outage (``/status/503``): attempts per call reaching the server, and the time a
   call refused locally (nothing sent) takes to fail (p50 / p99).
3. An outage that ends (``/outage/{key}?down_ms=``) under a steady stream of calls: the
   time from the end of the outage until every later call succeeds.

Targets (issue 9): success within 0.3 points of the plain retrier up to 20 % failures;
full-outage attempts <= 0.2x the plain retrier's; budget-only outage load <= 1.3x.

    .venv/bin/python benchmarks/load_protection.py [--quick] [--json] [--seed N]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import json
import logging
import math
import platform
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx

import retrysafe
from retrysafe import Client
from retrysafe.chaos import ChaosServer
from retrysafe.errors import ApiError, Refused
from retrysafe.governor import BreakerSettings, BudgetSettings, Governor, GovernorSettings

CONCURRENCY = 200
RATES = (0.0, 0.05, 0.10, 0.20, 0.30, 0.50)
SUCCESS_GAP_TARGET = 0.3  # percentage points behind the plain retrier, up to 20 %
OUTAGE_VS_PLAIN_TARGET = 0.2
BUDGET_ONLY_LOAD_TARGET = 1.3
LIMITS = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)

OLD_DEFAULTS = GovernorSettings(
    budget=BudgetSettings(ratio=0.1, max_tokens=20.0, min_per_second=0.5),
    breaker=BreakerSettings(
        consecutive_failures=5,
        failure_window=30.0,
        failure_ratio=0.5,
        ratio_window=60.0,
        ratio_min_calls=20,
        open_for=20.0,
    ),
)

#: name -> the governor settings of that configuration (None: the default Client()).
CONFIGS: dict[str, GovernorSettings | None] = {
    "Client()": None,
    "plain retrier": GovernorSettings.off(),
    "budget only": GovernorSettings(breaker=None),
    "old defaults": OLD_DEFAULTS,
    "finagle 20%": GovernorSettings(budget=BudgetSettings(ratio=0.2, max_tokens=100.0)),
    "0.28, 20 tokens": GovernorSettings(budget=BudgetSettings(ratio=0.28, max_tokens=20.0)),
}
QUICK_CONFIGS = ("Client()", "plain retrier", "budget only")


def make_client(settings: GovernorSettings | None) -> Client:
    if settings is None:
        return Client(limits=LIMITS)
    return Client(limits=LIMITS, governor=Governor(settings))


# ---------------------------------------------------------------------------------------
# Driving calls
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Call:
    started: float  # time.monotonic()
    latency: float  # seconds
    outcome: str  # "ok", "refused" (a local refusal, nothing sent), or the error's kind


def one_call(client: Client, url: str) -> Call:
    started = time.monotonic()
    t0 = time.perf_counter()
    try:
        response = client.get(url)
    except Refused as exc:
        kind = "refused" if exc.attempts == 0 else f"{type(exc).__name__} after attempts"
        return Call(started, time.perf_counter() - t0, kind)
    except ApiError as exc:
        return Call(started, time.perf_counter() - t0, f"{type(exc).__name__}:{exc.reason}")
    except Exception as exc:  # every failure is a data point here
        return Call(started, time.perf_counter() - t0, type(exc).__name__)
    latency = time.perf_counter() - t0
    return Call(started, latency, "ok" if response.status_code == 200 else "not 200")


def run_calls(client: Client, urls: Sequence[str]) -> tuple[list[Call], float]:
    """Every URL once, CONCURRENCY at a time, from a thread pool sharing ``client``."""
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
        calls = list(pool.map(lambda url: one_call(client, url), urls))
    return calls, time.monotonic() - began


def run_stream(
    client: Client, url: str, *, threads: int, every: float, duration: float
) -> list[Call]:
    """``threads`` threads, each calling ``url`` every ``every`` s for ``duration`` s."""
    results: list[Call] = []
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
            call = one_call(client, url)
            with lock:
                results.append(call)
            next_call = max(next_call + every, time.monotonic())

    workers = [
        threading.Thread(target=worker, args=(n * every / threads,), daemon=True)
        for n in range(threads)
    ]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(duration + 40.0)
    with lock:
        return list(results)


def percentile(samples: Sequence[float], fraction: float) -> float:
    if not samples:
        return math.nan
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def outcomes(calls: Sequence[Call]) -> dict[str, int]:
    return dict(collections.Counter(call.outcome for call in calls).most_common())


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------


def flaky(
    server: ChaosServer, settings: GovernorSettings | None, rate: float, n: int, seed: int
) -> dict[str, Any]:
    server.reset()
    urls = [f"{server.url}/flaky?rate={rate}&seed={seed}&key=c{i}" for i in range(n)]
    with make_client(settings) as client:
        calls, wall = run_calls(client, urls)
    attempts = sum(1 for record in server.log() if record.endpoint == "flaky")
    ok = sum(call.outcome == "ok" for call in calls)
    return {
        "rate": rate,
        "calls": n,
        "success_pct": 100.0 * ok / n,
        "attempts_per_call": attempts / n,
        "outcomes": outcomes(calls),
        "wall_s": wall,
    }


def full_outage(server: ChaosServer, settings: GovernorSettings | None, n: int) -> dict[str, Any]:
    server.reset()
    urls = [f"{server.url}/status/503?key=o{i}" for i in range(n)]
    with make_client(settings) as client:
        calls, wall = run_calls(client, urls)
    attempts = sum(1 for record in server.log() if record.endpoint == "status")
    refused = [call.latency for call in calls if call.outcome == "refused"]
    return {
        "calls": n,
        "attempts_per_call": attempts / n,
        "refused_calls": len(refused),
        "fail_fast_p50_ms": percentile(refused, 0.5) * 1000,
        "fail_fast_p99_ms": percentile(refused, 0.99) * 1000,
        "outcomes": outcomes(calls),
        "wall_s": wall,
    }


def outage_that_ends(
    server: ChaosServer,
    settings: GovernorSettings | None,
    *,
    down_s: float,
    duration: float,
    threads: int,
    every: float,
) -> dict[str, Any]:
    server.reset()
    url = f"{server.url}/outage/stream?down_ms={int(down_s * 1000)}"
    with make_client(settings) as client:
        calls = run_stream(client, url, threads=threads, every=every, duration=duration)
    log = [record for record in server.log() if record.endpoint == "outage"]
    t0 = min(record.time for record in log)  # the server's outage starts here
    end = t0 + down_s
    failed_after = [call.started for call in calls if call.outcome != "ok" and call.started >= end]
    during = [call for call in calls if call.started < end]
    refused = [call.latency for call in during if call.outcome == "refused"]
    return {
        "url": url.removeprefix(server.url),
        "calls": len(calls),
        "offered_per_s": threads / every,
        "attempts_per_call_during_outage": sum(r.time < end for r in log) / max(1, len(during)),
        "fail_fast_p50_ms": percentile(refused, 0.5) * 1000,
        # Every call started later than this after the outage's end succeeded.
        "recover_s": max(failed_after) - end if failed_after else 0.0,
        "failed_after_end": len(failed_after),
        "outcomes": outcomes(calls),
    }


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------


def fmt(value: float, spec: str) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def print_table(report: dict[str, Any]) -> None:
    rows = report["configs"]
    print("retrysafe load protection" + (" (--quick)" if report["quick"] else ""))
    print(f"machine: {report['machine']}")
    setup = report["setup"]
    print(
        f"setup: chaos server on 127.0.0.1 in this process; {CONCURRENCY} concurrent calls "
        f"from a thread pool sharing one client; {setup['flaky_calls']} calls per failure "
        f"rate (seed {setup['seed']}), {setup['outage_calls']} in the full outage; attempts "
        "counted from the server's log; RetryPolicy() defaults everywhere"
    )
    print()
    names = list(rows)
    width = max(len(name) for name in names) + 2
    print("success % (independent failures, /flaky?rate=)")
    print(" " * width + "".join(f"{int(rate * 100):>8}%" for rate in RATES))
    for name in names:
        print(
            f"{name:<{width}}" + "".join(f"{r['success_pct']:>9.2f}" for r in rows[name]["flaky"])
        )
    print()
    print("attempts per call at the server (independent failures)")
    print(" " * width + "".join(f"{int(rate * 100):>8}%" for rate in RATES))
    for name in names:
        print(
            f"{name:<{width}}"
            + "".join(f"{r['attempts_per_call']:>9.3f}" for r in rows[name]["flaky"])
        )
    print()
    stream = report["setup"]["stream"]
    offered = stream["threads"] / stream["every_s"]
    print(
        "full outage (/status/503) and an outage that ends "
        f"(/outage/{{key}}?down_ms={int(stream['down_s'] * 1000)}, {stream['threads']} threads "
        f"x 1 call / {stream['every_s'] * 1000:.0f} ms = {offered:.0f} "
        f"calls/s for {stream['duration_s']:.0f} s)"
    )
    print(
        f"{'':<{width}}{'attempts/call':>14}{'vs plain':>9}{'fail fast p50/p99 ms':>22}"
        f"{'recover s':>11}{'attempts/call while down':>26}"
    )
    for name in names:
        outage = rows[name]["outage"]
        ends = rows[name]["outage_ends"]
        fast = (
            f"{fmt(outage['fail_fast_p50_ms'], '.2f')} / {fmt(outage['fail_fast_p99_ms'], '.2f')}"
        )
        print(
            f"{name:<{width}}{outage['attempts_per_call']:>14.3f}{outage['vs_plain']:>8.3f}x"
            f"{fast:>22}{ends['recover_s']:>11.2f}{ends['attempts_per_call_during_outage']:>26.3f}"
        )
    print()
    print("targets")
    for line in report["verdicts"]:
        print(f"  {line}")
    print()
    print(f"total wall time {report['wall_s']:.1f} s")


def verdicts(rows: dict[str, Any]) -> list[str]:
    def mark(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    lines = []
    plain = rows["plain retrier"]
    for name, row in rows.items():
        if name == "plain retrier":
            continue
        worst = max(
            p["success_pct"] - r["success_pct"]
            for p, r in zip(plain["flaky"], row["flaky"], strict=True)
            if r["rate"] <= 0.20
        )
        outage = row["outage"]
        line = (
            f"{name}: worst success gap to plain up to 20 %: {worst:.2f} points "
            f"(<= {SUCCESS_GAP_TARGET}: {mark(worst <= SUCCESS_GAP_TARGET)}); "
            f"full outage {outage['vs_plain']:.3f}x plain"
        )
        if name == "budget only":
            load = outage["attempts_per_call"]
            line += f", load {load:.3f}x (<= {BUDGET_ONLY_LOAD_TARGET}: "
            line += f"{mark(load <= BUDGET_ONLY_LOAD_TARGET)})"
        else:
            line += f" (<= {OUTAGE_VS_PLAIN_TARGET}: "
            line += f"{mark(outage['vs_plain'] <= OUTAGE_VS_PLAIN_TARGET)})"
        lines.append(line)
    return lines


def json_safe(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and configurations")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--seed", type=int, default=1, help="seed of the /flaky draws")
    args = parser.parse_args(argv)

    flaky_calls = 400 if args.quick else 1000
    outage_calls = 2000
    stream = {
        "down_s": 1.0 if args.quick else 3.0,
        "duration_s": 6.5 if args.quick else 10.0,
        "threads": 50,
        "every_s": 0.05,
    }
    names = QUICK_CONFIGS if args.quick else tuple(CONFIGS)

    # The library logs a WARNING per failed call; count nothing, write nothing.
    library_logger = logging.getLogger("retrysafe")
    library_logger.disabled = True
    began = time.monotonic()
    server = ChaosServer("127.0.0.1").start()
    rows: dict[str, Any] = {}
    try:
        for name in names:
            settings = CONFIGS[name]
            rows[name] = {
                "settings": repr(settings if settings is not None else GovernorSettings()),
                "flaky": [flaky(server, settings, rate, flaky_calls, args.seed) for rate in RATES],
                "outage": full_outage(server, settings, outage_calls),
                "outage_ends": outage_that_ends(
                    server,
                    settings,
                    down_s=stream["down_s"],
                    duration=stream["duration_s"],
                    threads=int(stream["threads"]),
                    every=stream["every_s"],
                ),
            }
    finally:
        server.stop()
        library_logger.disabled = False
    plain_load = rows["plain retrier"]["outage"]["attempts_per_call"]
    for row in rows.values():
        row["outage"]["vs_plain"] = row["outage"]["attempts_per_call"] / plain_load
    report = {
        "quick": args.quick,
        "machine": (
            f"{platform.python_implementation()} {platform.python_version()}, "
            f"httpx {httpx.__version__}, retrysafe {getattr(retrysafe, '__version__', '?')}, "
            f"{platform.platform()}"
        ),
        "setup": {
            "concurrency": CONCURRENCY,
            "flaky_calls": flaky_calls,
            "outage_calls": outage_calls,
            "seed": args.seed,
            "stream": stream,
        },
        "configs": rows,
        "verdicts": verdicts(rows),
        "wall_s": time.monotonic() - began,
    }
    if args.json:
        print(json.dumps(json_safe(report), indent=2, allow_nan=False))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
