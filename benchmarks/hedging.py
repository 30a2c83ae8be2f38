"""What hedged requests do to the latency tail, and what they cost in requests.

Starts a :class:`retrysafe.chaos.ChaosServer` on 127.0.0.1 in a child process (so
the server's latency is not the client's threads' GIL contention) and calls its
heavy-tailed endpoint ``/tail/{key}`` from a pool of worker threads sharing one
``retrysafe.Client`` per configuration (so one governor: one retry budget and one
learned latency per run). Requests are counted from the chaos server's own log
(``/_chaos/log``: every request that reached it, answered or abandoned); the copies
the client sent (some cancelled before the server had read them) are printed too.

1. Tail (default: 2 % of requests take 1 s, the rest 10 ms), ``--calls`` calls each:
   no hedging; ``hedge_after=<--fixed>`` seconds; ``hedge_after="p95"``. Prints
   p50 / p99 / p99.9 call latency, requests sent and the extra requests in percent.
   Target (issue 15): p99 at least 5x lower with at most 5 % more requests.
2. Brownout (most requests slow: ``--brownout-fraction`` of them take
   ``--brownout-ms``): the extra requests hedging adds, against what the retry budget
   allows (``ratio x calls + max_tokens + min_per_second x seconds``), and the same
   fixed-delay hedging without a governor (no budget) for contrast.

    .venv/bin/python benchmarks/hedging.py [--calls 2000] [--concurrency 16] [--json]
        [--mode sync|asyncio|trio]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import anyio
import httpx

import retrysafe
from retrysafe.governor import Governor, GovernorSettings

_SERVE = """
import sys, time
from retrysafe.chaos import ChaosServer
with ChaosServer("127.0.0.1", int(sys.argv[1])):
    print("ready", flush=True)
    sys.stdin.read()
"""


class ServerProcess:
    """The chaos server in a child process, stopped when stdin closes."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != "ready":
            raise RuntimeError("the chaos server process did not start")

    def log(self, key: str) -> list[dict[str, Any]]:
        """The server's log of ``key``'s requests."""
        response = httpx.get(f"{self.url}/_chaos/log", params={"key": key}, timeout=30)
        records: list[dict[str, Any]] = response.json()
        return records

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=30)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


Outcome = tuple[float, int, bool, bool]


def _outcome(started: float, response: httpx.Response | None) -> Outcome:
    """(seconds, hedges sent, won by a hedged copy, answered 200) of one call."""
    elapsed = time.perf_counter() - started
    if response is None:
        return elapsed, 0, False, False
    report = retrysafe.report_of(response)
    hedges = report.hedges if report is not None else 0
    won = report is not None and report.winner not in (None, 1)
    return elapsed, hedges, won, response.status_code == 200


def _tokens_left(governor: Governor) -> float | None:
    dependencies = governor.dependencies()
    if not dependencies:
        return None
    budget = governor.guard(dependencies[0]).budget
    return None if budget is None else budget.tokens


def _run_sync(
    url: httpx.URL,
    policy: retrysafe.RetryPolicy,
    governor: Governor | None,
    calls: int,
    concurrency: int,
) -> tuple[list[Outcome], float | None]:
    with retrysafe.Client(policy=policy, governor=governor) as client:

        def one(_: int) -> Outcome:
            started = time.perf_counter()
            try:
                return _outcome(started, client.get(url))
            except retrysafe.ApiError:
                return _outcome(started, None)

        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            outcomes = list(pool.map(one, range(calls)))
        return outcomes, _tokens_left(client.governor)


async def _run_async(
    url: httpx.URL,
    policy: retrysafe.RetryPolicy,
    governor: Governor | None,
    calls: int,
    concurrency: int,
) -> tuple[list[Outcome], float | None]:
    outcomes: list[Outcome] = []
    limiter = anyio.Semaphore(concurrency)
    async with retrysafe.AsyncClient(policy=policy, governor=governor) as client:

        async def one() -> None:
            async with limiter:
                started = time.perf_counter()
                try:
                    outcomes.append(_outcome(started, await client.get(url)))
                except retrysafe.ApiError:
                    outcomes.append(_outcome(started, None))

        async with anyio.create_task_group() as group:
            for _ in range(calls):
                group.start_soon(one)
        return outcomes, _tokens_left(client.governor)


def run(
    server: ServerProcess,
    key: str,
    policy: retrysafe.RetryPolicy,
    *,
    calls: int,
    concurrency: int,
    params: dict[str, Any],
    governor: Governor | None = None,
    mode: str = "sync",
) -> dict[str, Any]:
    """``calls`` GETs of ``/tail/{key}`` with ``policy``; latency and load figures.

    ``mode``: ``"sync"`` (``retrysafe.Client`` from a thread pool) or ``"asyncio"`` /
    ``"trio"`` (``retrysafe.AsyncClient``, ``concurrency`` tasks).
    """
    url = httpx.URL(f"{server.url}/tail/{key}", params=params)
    latencies: list[float] = []
    copies_sent = 0
    hedged_calls = 0
    won_by_hedge = 0
    failures = 0
    outcomes: list[tuple[float, int, bool, bool]]
    began = time.perf_counter()
    if mode == "sync":
        outcomes, budget_tokens = _run_sync(url, policy, governor, calls, concurrency)
    else:
        outcomes, budget_tokens = anyio.run(
            _run_async, url, policy, governor, calls, concurrency, backend=mode
        )
    seconds = time.perf_counter() - began
    for elapsed, hedges, won, ok in outcomes:
        latencies.append(elapsed)
        copies_sent += hedges
        hedged_calls += hedges > 0
        won_by_hedge += won
        failures += not ok
    # Let abandoned and slow requests reach the log before counting.
    time.sleep(float(params.get("slow_ms", 1000)) / 1000 + 0.3)
    sent = len(server.log(key))
    return {
        "calls": calls,
        "seconds": round(seconds, 2),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "p99.9_ms": round(percentile(latencies, 99.9) * 1000, 1),
        "max_ms": round(max(latencies) * 1000, 1),
        "requests": sent,
        "extra_pct": round((sent - calls) / calls * 100, 2),
        "client_extra_pct": round(copies_sent / calls * 100, 2),
        "hedges_sent": copies_sent,
        "hedged_calls": hedged_calls,
        "won_by_hedge": won_by_hedge,
        "failures": failures,
        "budget_tokens_left": None if budget_tokens is None else round(budget_tokens, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--fixed", type=float, default=0.05, help="fixed hedge delay (s)")
    parser.add_argument("--slow-fraction", type=float, default=0.02)
    parser.add_argument("--slow-ms", type=int, default=1000)
    parser.add_argument("--fast-ms", type=int, default=10)
    parser.add_argument("--brownout-calls", type=int, default=600)
    parser.add_argument("--brownout-fraction", type=float, default=0.8)
    parser.add_argument("--brownout-ms", type=int, default=300)
    parser.add_argument("--seed", default="hedging")
    parser.add_argument(
        "--mode",
        choices=("sync", "asyncio", "trio"),
        default="sync",
        help="retrysafe.Client on threads, or AsyncClient on an event loop",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)

    base = retrysafe.RetryPolicy(attempts=3, attempt_timeout=5.0, deadline=10.0)
    configs = {
        "no hedging": base,
        f"hedge_after={args.fixed:g}": retrysafe.RetryPolicy(
            attempts=3, attempt_timeout=5.0, deadline=10.0, hedge_after=args.fixed
        ),
        'hedge_after="p95"': retrysafe.RetryPolicy(
            attempts=3, attempt_timeout=5.0, deadline=10.0, hedge_after="p95"
        ),
    }
    tail = {
        "slow_fraction": args.slow_fraction,
        "slow_ms": args.slow_ms,
        "fast_ms": args.fast_ms,
        "seed": args.seed,
    }
    brownout = dict(tail, slow_fraction=args.brownout_fraction, slow_ms=args.brownout_ms)
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "calls": args.calls,
        "concurrency": args.concurrency,
        "mode": args.mode,
        "tail": tail,
        "brownout": brownout,
    }
    server = ServerProcess()
    try:
        tail_results = {}
        for index, (name, policy) in enumerate(configs.items()):
            tail_results[name] = run(
                server,
                f"tail-{index}",
                policy,
                calls=args.calls,
                concurrency=args.concurrency,
                params=tail,
                mode=args.mode,
            )
            if not args.json:
                print(f"tail      {name:<22} {tail_results[name]}", flush=True)
        results["tail_results"] = tail_results
        brownout_results = {}
        brownout_configs = dict(configs)
        del brownout_configs["no hedging"]
        brownout_configs["no hedging"] = base
        for index, (name, policy) in enumerate(brownout_configs.items()):
            brownout_results[name] = run(
                server,
                f"brownout-{index}",
                policy,
                calls=args.brownout_calls,
                concurrency=args.concurrency,
                params=brownout,
                mode=args.mode,
            )
        fixed_name = f"hedge_after={args.fixed:g}"
        brownout_results[f"{fixed_name}, no governor"] = run(
            server,
            "brownout-ungoverned",
            configs[fixed_name],
            calls=args.brownout_calls,
            concurrency=args.concurrency,
            params=brownout,
            governor=Governor(GovernorSettings.off()),
            mode=args.mode,
        )
        budget = GovernorSettings().budget
        assert budget is not None
        for name, figures in brownout_results.items():
            if "no governor" in name or name == "no hedging":
                continue
            allowed = (
                budget.ratio * figures["calls"]
                + budget.max_tokens
                + budget.min_per_second * figures["seconds"]
            )
            figures["budget_allows"] = round(allowed, 1)
            figures["extra_requests"] = figures["requests"] - figures["calls"]
            figures["within_budget"] = figures["extra_requests"] <= allowed
        if not args.json:
            for name, figures in brownout_results.items():
                print(f"brownout  {name:<34} {figures}", flush=True)
        results["brownout_results"] = brownout_results
    finally:
        server.close()

    plain = tail_results["no hedging"]
    summary = {}
    for name in list(configs)[1:]:
        figures = tail_results[name]
        summary[name] = {
            "p99_ratio": round(plain["p99_ms"] / figures["p99_ms"], 1),
            "p99.9_ratio": round(plain["p99.9_ms"] / figures["p99.9_ms"], 1),
            "extra_pct": figures["extra_pct"],
            "target_met": plain["p99_ms"] / figures["p99_ms"] >= 5 and figures["extra_pct"] <= 5,
        }
    results["summary"] = summary
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    print()
    print(f"{'tail: ' + str(tail):<60}")
    print(
        f"{'config':<24}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}{'requests':>10}{'extra':>8}"
        f"{'copies sent':>13}"
    )
    for name, figures in tail_results.items():
        print(
            f"{name:<24}{figures['p50_ms']:>9}{figures['p99_ms']:>9}{figures['p99.9_ms']:>10}"
            f"{figures['requests']:>10}{figures['extra_pct']:>7}%"
            f"{figures['hedges_sent']:>13}"
        )
    for name, figures in summary.items():
        print(
            f"{name}: p99 {figures['p99_ratio']}x lower, p99.9 {figures['p99.9_ratio']}x lower, "
            f"{figures['extra_pct']} % more requests; target (>=5x, <=5 %) "
            f"{'met' if figures['target_met'] else 'NOT met'}"
        )
    print()
    print(f"brownout: {brownout}")
    print(
        f"{'config':<34}{'p50 ms':>9}{'p99 ms':>9}{'requests':>10}{'extra':>7}{'budget allows':>15}"
    )
    for name, figures in brownout_results.items():
        allows = figures.get("budget_allows", "-")
        print(
            f"{name:<34}{figures['p50_ms']:>9}{figures['p99_ms']:>9}{figures['requests']:>10}"
            f"{figures['requests'] - figures['calls']:>7}{allows!s:>15}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
