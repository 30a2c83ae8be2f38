"""How a client's pool holds up under many concurrent calls: retrysafe beside plain httpx and
httpx-retries, in one run.

Every contender makes ``--tasks`` concurrent async tasks of ``--calls`` GETs each (and, with
``--sync``, as many threads), through httpx's default pool limits (100 connections, 20 kept
alive), against a minimal keep-alive HTTP/1.1 server in a child process that answers at once.
It prints the run's time, the calls answered, the slowest call, and (async) the median
and 99th-percentile call and the event loop's longest lag, measured by a task that asks to
sleep 10 ms and notes how late it wakes.

What it shows: httpcore's pool scans every connection for every queued request each time a
request comes or goes, and closes each connection that goes idle while it holds more than 20,
so under load the client's own event loop lags and connections churn. The pools under
retrysafe's transports match queued requests in one pass when full and keep idle
connections up to the keep-alive limit (``retrysafe.pool_assign``).

    .venv/bin/python benchmarks/pool_load.py [--tasks 400] [--calls 10] [--sync] [--json]

Only 127.0.0.1 is reached.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import loopback_server

import retrysafe


def async_contenders() -> dict[str, Callable[[], httpx.AsyncClient]]:
    made: dict[str, Callable[[], httpx.AsyncClient]] = {
        "httpx": httpx.AsyncClient,
        "retrysafe.AsyncClient": retrysafe.AsyncClient,
    }
    if importlib.util.find_spec("httpx_retries") is not None:
        import httpx_retries

        made["httpx-retries"] = lambda: httpx.AsyncClient(transport=httpx_retries.RetryTransport())
    return made


def sync_contenders() -> dict[str, Callable[[], httpx.Client]]:
    made: dict[str, Callable[[], httpx.Client]] = {
        "httpx": httpx.Client,
        "retrysafe.Client": retrysafe.Client,
    }
    if importlib.util.find_spec("httpx_retries") is not None:
        import httpx_retries

        made["httpx-retries"] = lambda: httpx.Client(transport=httpx_retries.RetryTransport())
    return made


async def run_async(
    make: Callable[[], httpx.AsyncClient], url: str, tasks: int, calls: int
) -> dict[str, Any]:
    lag = 0.0

    async def ticker() -> None:
        nonlocal lag
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(0.01)
            lag = max(lag, time.perf_counter() - asked - 0.01)

    answered = failed = 0
    took: list[float] = []
    async with make() as client:

        async def worker() -> None:
            nonlocal answered, failed
            for _ in range(calls):
                asked = time.perf_counter()
                try:
                    await client.get(url)
                    answered += 1
                except Exception:
                    failed += 1
                took.append(time.perf_counter() - asked)

        watching = asyncio.create_task(ticker())
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(tasks)))
        seconds = time.perf_counter() - started
        watching.cancel()
    took.sort()
    return {
        "seconds": seconds,
        "answered": answered,
        "failed": failed,
        "max_loop_lag": lag,
        "p50_call": took[len(took) // 2],
        "p99_call": took[int(len(took) * 0.99)],
        "worst_call": took[-1],
    }


def run_sync(
    make: Callable[[], httpx.Client], url: str, threads: int, calls: int
) -> dict[str, Any]:
    answered = failed = 0
    worst = 0.0
    lock = threading.Lock()
    with make() as client:

        def worker() -> None:
            nonlocal answered, failed, worst
            for _ in range(calls):
                asked = time.perf_counter()
                try:
                    client.get(url)
                    ok = True
                except Exception:
                    ok = False
                took = time.perf_counter() - asked
                with lock:
                    answered += ok
                    failed += not ok
                    worst = max(worst, took)

        started = time.perf_counter()
        running = [threading.Thread(target=worker) for _ in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "answered": answered, "failed": failed, "worst_call": worst}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400, help="concurrent tasks (and threads)")
    parser.add_argument("--calls", type=int, default=10, help="GETs per task")
    parser.add_argument("--sync", action="store_true", help="also run threads on sync clients")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with loopback_server() as url:
        for name, make in async_contenders().items():
            row = asyncio.run(run_async(make, url, args.tasks, args.calls))
            rows.append({"contender": name, "kind": "async", **row})
        if args.sync:
            for name, make_sync in sync_contenders().items():
                row = run_sync(make_sync, url, args.tasks, args.calls)
                rows.append({"contender": name, "kind": "sync", **row})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{args.tasks} tasks x {args.calls} GETs, httpx's default limits, loopback")
    for row in rows:
        extra = f"worst call {row['worst_call']:.2f} s"
        if row["kind"] == "async":
            extra = (
                f"calls p50 {row['p50_call']:.2f} p99 {row['p99_call']:.2f} {extra}, "
                f"loop lag max {row['max_loop_lag']:.2f} s"
            )
        print(
            f"  {row['kind']:5} {row['contender']:24} {row['seconds']:6.2f} s  "
            f"{row['answered']:5} answered  {row['failed']:4} failed  {extra}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
