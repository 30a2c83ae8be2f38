"""What retrysafe adds to a successful call on requests and on aiohttp.

Contenders, each with its own session (and so its own connection pool):

* ``requests``: a bare ``requests.Session``, the sync baseline;
* ``requests + RetryAdapter``: the same with ``retrysafe.requests.RetryAdapter`` mounted;
* ``aiohttp``: a bare ``aiohttp.ClientSession``, the async baseline;
* ``aiohttp + RetryMiddleware``: the same with ``retrysafe.aiohttp.RetryMiddleware``.

Every call is a GET that succeeds (``/status/200`` of the chaos server, body read), so
what is measured is the cost of the retry layer on the happy path. The chaos server runs
in a child process on 127.0.0.1 (so it does not share this process's GIL). All
contenders are interleaved: each round runs one batch of calls of every contender, in
a fresh random order, so drift hits all alike. Reported: the median over rounds of
microseconds per call, and the median over rounds of the difference to the bare client
in the same round ("added").

    .venv/bin/python benchmarks/client_overhead.py [--rounds N] [--calls N]

Wall-clock figures move with the machine's load. Instructions per call do not: with
``--only CONTENDER`` the script makes ``--calls`` calls of that contender alone (after
a warm-up, no report), so running it under valgrind for two numbers of calls gives
the instructions one call costs in this process (the server is a child process,
which valgrind does not follow)::

    for n in 100 300; do PYTHONHASHSEED=0 valgrind --tool=callgrind \
        --callgrind-out-file=/dev/null .venv/bin/python benchmarks/client_overhead.py \
        --only requests+RetryAdapter --calls $n 2>&1 | grep Collected; done
    # instructions per call = (second - first) / 200

Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import requests

from retrysafe.aiohttp import RetryMiddleware
from retrysafe.requests import RetryAdapter

_SERVER = """
import sys
from retrysafe.chaos import ChaosServer
server = ChaosServer()
server.__enter__()
print(server.url, flush=True)
sys.stdin.read()
"""


def start_server() -> tuple[subprocess.Popen[str], str]:
    """The chaos server in a child process; it exits when its stdin closes."""
    child = subprocess.Popen(
        [sys.executable, "-c", _SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    return child, child.stdout.readline().strip()


def requests_session(retrying: bool) -> requests.Session:
    session = requests.Session()
    if retrying:
        adapter = RetryAdapter()
        session.mount("http://", adapter)
        session.mount("https://", adapter)
    return session


def timed_sync(session: requests.Session, url: str, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        response = session.get(url)
        if response.status_code != 200:
            raise RuntimeError(f"expected 200, got {response.status_code}")
    return (time.perf_counter() - started) / calls * 1e6


async def timed_async(session: aiohttp.ClientSession, url: str, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        async with session.get(url) as response:
            await response.read()
            if response.status != 200:
                raise RuntimeError(f"expected 200, got {response.status}")
    return (time.perf_counter() - started) / calls * 1e6


CONTENDERS = (
    "requests",
    "requests + RetryAdapter",
    "aiohttp",
    "aiohttp + RetryMiddleware",
)


async def measure(
    url: str, rounds: int, calls: int, only: str | None = None
) -> dict[str, list[float]]:
    bare_sync = requests_session(retrying=False)
    retry_sync = requests_session(retrying=True)
    bare_async = aiohttp.ClientSession()
    retry_async = aiohttp.ClientSession(middlewares=(RetryMiddleware(),))
    contenders: dict[str, Callable[[int], Any]] = {
        "requests": lambda n: timed_sync(bare_sync, url, n),
        "requests + RetryAdapter": lambda n: timed_sync(retry_sync, url, n),
        "aiohttp": lambda n: timed_async(bare_async, url, n),
        "aiohttp + RetryMiddleware": lambda n: timed_async(retry_async, url, n),
    }
    if only is not None:
        contenders = {only: contenders[only]}
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        for run in contenders.values():  # warm up: connections, caches
            result = run(min(calls, 20) if only is not None else calls)
            if asyncio.iscoroutine(result):
                await result
        if only is not None:  # one batch for an instruction count: nothing else
            result = contenders[only](calls)
            samples[only].append(await result if asyncio.iscoroutine(result) else result)
            return samples
        for _ in range(rounds):
            order = list(contenders)
            random.shuffle(order)
            for name in order:
                gc.collect()
                result = contenders[name](calls)
                if asyncio.iscoroutine(result):
                    result = await result
                samples[name].append(result)
                await asyncio.sleep(0)
    finally:
        bare_sync.close()
        retry_sync.close()
        await bare_async.close()
        await retry_async.close()
    return samples


def report(samples: dict[str, list[float]]) -> None:
    baselines = {
        "requests + RetryAdapter": "requests",
        "aiohttp + RetryMiddleware": "aiohttp",
    }
    print(f"{'contender':28} {'µs/call':>9} {'added µs':>9} {'added %':>8}")
    for name, values in samples.items():
        median = statistics.median(values)
        base = baselines.get(name)
        if base is None:
            print(f"{name:28} {median:9.1f} {'':>9} {'':>8}")
            continue
        added = [value - bare for value, bare in zip(values, samples[base], strict=True)]
        added_median = statistics.median(added)
        share = added_median / statistics.median(samples[base]) * 100
        print(f"{name:28} {median:9.1f} {added_median:9.1f} {share:7.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    parser.add_argument("--calls", type=int, default=200, help="calls per batch")
    by_short_name = {name.replace(" ", ""): name for name in CONTENDERS}
    parser.add_argument(
        "--only",
        choices=sorted(by_short_name),
        help="make --calls calls of this contender alone and print nothing (for valgrind)",
    )
    args = parser.parse_args()
    only = by_short_name[args.only] if args.only is not None else None
    child, base_url = start_server()
    try:
        url = f"{base_url}/status/200?key=bench"
        samples = asyncio.run(measure(url, args.rounds, args.calls, only))
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)
    if only is not None:
        return
    print(
        f"{args.rounds} rounds x {args.calls} calls per contender, GET {base_url}/status/200 "
        "(chaos server, child process); medians over rounds"
    )
    report(samples)


if __name__ == "__main__":
    main()
