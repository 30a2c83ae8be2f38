"""What the retry budget does to a burst of calls started together, and to an outage's start.

A user trial found that 1,000 calls started at once through one ``AsyncClient``, at 10 %
independent failures, ended 40 to 57 of them in ``BudgetExhausted``, where a plain
retrier saved them all: the calls earned 270 tokens as they were admitted and the bucket
kept 60. Now a call earns as its first attempt ends, and ``BudgetSettings.burst_window``
(off by default) can also keep what calls earn past a full bucket for that many seconds.
This measures both over loopback, against the chaos server (in this process, on a
background thread), counting requests from the server's own log:

1. **Bursts.** ``--calls`` calls (1,000) gathered at once on one ``AsyncClient`` with
   ``--connections`` connections (100), to ``/flaky?rate=R`` (one key per call, so every
   configuration sees the same draws), at 10, 20 and 30 % failures, for each seed: the
   calls that failed, by error, and the requests per call.
2. **An outage after healthy traffic.** 100 calls a second for 12 s to a healthy
   endpoint, then 3 s to ``/status/503``: the requests per call during the outage, with
   the budget only (no breaker), with and without a window, and with the defaults, whose
   breaker opens after 20 failures in a row and ends the outage's retries. The window's
   price is here: what the last 10 s of healthy calls earned can be spent at the
   outage's start, once.

Configurations: ``Client()`` (the defaults), ``burst_window=10``, and ``plain retrier``
(``GovernorSettings.off()``), all with the default 4-attempt ``RetryPolicy``.

    .venv/bin/python benchmarks/budget_burst.py [--calls N] [--seeds S] [--connections C] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time
from typing import Any

import httpx

import retrysafe
from retrysafe.chaos import ChaosServer
from retrysafe.governor import BudgetSettings, Governor, GovernorSettings

RATES = (0.1, 0.2, 0.3)

#: name -> governor settings for the burst runs (None: the default Client()).
BURST_CONFIGS: dict[str, GovernorSettings | None] = {
    "Client()": None,
    "burst_window=10": GovernorSettings(budget=BudgetSettings(burst_window=10)),
    "plain retrier": GovernorSettings.off(),
}
#: name -> governor settings for the outage runs: the budget only, with and without the
#: window, then the defaults (None), whose breaker ends an outage's retries.
OUTAGE_CONFIGS: dict[str, GovernorSettings | None] = {
    "budget, burst_window=10": GovernorSettings(
        breaker=None, budget=BudgetSettings(burst_window=10)
    ),
    "budget alone (default)": GovernorSettings(breaker=None),
    "plain retrier": GovernorSettings.off(),
    "Client() (budget, breaker)": None,
}


def make_client(settings: GovernorSettings | None, connections: int = 100) -> retrysafe.AsyncClient:
    """An ``AsyncClient`` with ``settings`` (None: the defaults) and a pool of
    ``connections`` (100, httpx's default)."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    if settings is None:
        return retrysafe.AsyncClient(limits=limits)
    return retrysafe.AsyncClient(limits=limits, governor=Governor(settings))


async def _one(client: retrysafe.AsyncClient, url: str) -> str:
    try:
        response = await client.get(url)
    except retrysafe.ApiError as exc:
        return type(exc).__name__
    return "ok" if response.status_code == 200 else f"status {response.status_code}"


async def _burst(
    settings: GovernorSettings | None, urls: list[str], connections: int
) -> collections.Counter[str]:
    async with make_client(settings, connections) as client:
        outcomes = await asyncio.gather(*(_one(client, url) for url in urls))
    return collections.Counter(outcomes)


def burst(
    server: ChaosServer, name: str, rate: float, calls: int, seed: int, connections: int
) -> dict[str, Any]:
    server.reset()
    urls = [f"{server.url}/flaky?rate={rate}&seed={seed}&key=c{i}" for i in range(calls)]
    began = time.monotonic()
    outcomes = asyncio.run(_burst(BURST_CONFIGS[name], urls, connections))
    requests = sum(1 for record in server.log() if record.endpoint == "flaky")
    return {
        "config": name,
        "rate": rate,
        "seed": seed,
        "failed": calls - outcomes["ok"],
        "outcomes": {k: v for k, v in outcomes.items() if k != "ok"},
        "requests_per_call": requests / calls,
        "wall_s": time.monotonic() - began,
    }


async def _stream(
    client: retrysafe.AsyncClient, url: str, per_second: int, seconds: float
) -> collections.Counter[str]:
    tasks = []
    began = time.monotonic()
    for n in range(int(per_second * seconds)):
        delay = began + n / per_second - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(_one(client, url)))
    return collections.Counter(await asyncio.gather(*tasks))


async def _healthy_then_outage(
    settings: GovernorSettings | None, base: str, healthy_s: float, outage_s: float
) -> tuple[collections.Counter[str], int]:
    async with make_client(settings) as client:
        await _stream(client, f"{base}/status/200", 100, healthy_s)
        outcomes = await _stream(client, f"{base}/status/503", 100, outage_s)
    return outcomes, int(100 * outage_s)


def outage(server: ChaosServer, name: str, healthy_s: float, outage_s: float) -> dict[str, Any]:
    server.reset()
    outcomes, calls = asyncio.run(
        _healthy_then_outage(OUTAGE_CONFIGS[name], server.url, healthy_s, outage_s)
    )
    requests = sum(1 for record in server.log() if record.action == "status:503")
    return {
        "config": name,
        "calls": calls,
        "requests_per_call": requests / calls,
        "outcomes": dict(outcomes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per burst (1000)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per rate (3)")
    parser.add_argument("--quick", action="store_true", help="one seed, a 5 s healthy run")
    parser.add_argument(
        "--connections", type=int, default=100, help="the client's pool, for the bursts (100)"
    )
    parser.add_argument("--bursts-only", action="store_true", help="leave the outage out")
    args = parser.parse_args()
    seeds = 1 if args.quick else args.seeds
    healthy_s = 5.0 if args.quick else 12.0

    with ChaosServer() as server:
        print(
            f"1. Bursts: {args.calls} calls gathered at once, one AsyncClient, "
            f"{args.connections} connections"
        )
        print(f"  {'config':<15} {'rate':>5} {'seed':>4} {'failed':>6} {'req/call':>8}  failures")
        for rate in RATES:
            for seed in range(1, seeds + 1):
                for name in BURST_CONFIGS:
                    row = burst(server, name, rate, args.calls, seed, args.connections)
                    print(
                        f"  {name:<15} {rate:>5.0%} {seed:>4} {row['failed']:>6} "
                        f"{row['requests_per_call']:>8.3f}  {row['outcomes'] or ''}"
                    )
        if args.bursts_only:
            return
        print(
            f"\n2. An outage after healthy traffic: 100 calls/s, {healthy_s:g} s healthy, "
            "then 3 s of 503s"
        )
        print(f"  {'config':<28} {'req/call in the outage':>22}")
        for name in OUTAGE_CONFIGS:
            row = outage(server, name, healthy_s, 3.0)
            print(f"  {name:<28} {row['requests_per_call']:>22.3f}")


if __name__ == "__main__":
    main()
