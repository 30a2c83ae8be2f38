"""What a hedging policy costs a call that sends no copy: the price of being ready to hedge.

A hedging call runs its attempt where a copy can race it: the sync transport hands the
first copy to a worker thread and waits for it, the async one runs it in a task group.
That costs something on every call, also on the many that end before ``hedge_after``
and never send a copy. This times it on ``httpx.MockTransport`` (no I/O, every call a
200 at once), per successful GET:

* ``httpx``: a bare client, the baseline;
* ``RetryTransport``: ``RetryTransport(policy=RetryPolicy())`` (``AsyncRetryTransport``);
* ``RetryTransport, hedging``: the same with ``hedge_after=1.0``, which no call reaches.

Sync and async contenders are interleaved, each round in a fresh random order, and timed
on the wall clock (the cost is mostly waiting for another thread or task to run).
Reported: the median over rounds of microseconds per call, and of the difference to the
contender before it in the same round.

    .venv/bin/python benchmarks/hedging_call_cost.py [--rounds N] [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx

import retrysafe
from retrysafe import RetryPolicy

CONTENDERS = ("httpx", "RetryTransport", "RetryTransport, hedging")
POLICIES = {
    "RetryTransport": RetryPolicy(),
    "RetryTransport, hedging": RetryPolicy(hedge_after=1.0),  # (no call reaches it)
}


def _ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b"ok")


def _sync_client(name: str) -> httpx.Client:
    mock = httpx.MockTransport(_ok)
    if name == "httpx":
        return httpx.Client(transport=mock)
    return httpx.Client(transport=retrysafe.RetryTransport(transport=mock, policy=POLICIES[name]))


def _async_client(name: str) -> httpx.AsyncClient:
    mock = httpx.MockTransport(_ok)
    if name == "httpx":
        return httpx.AsyncClient(transport=mock)
    transport = retrysafe.AsyncRetryTransport(transport=mock, policy=POLICIES[name])
    return httpx.AsyncClient(transport=transport)


async def _measure(rounds: int, calls: int) -> dict[str, list[float]]:
    """Microseconds per call of every (mode, contender), one batch of each per round."""
    sync_clients = {name: _sync_client(name) for name in CONTENDERS}
    async_clients = {name: _async_client(name) for name in CONTENDERS}

    def sync_batch(client: httpx.Client) -> Callable[[], Awaitable[float]]:
        def timed() -> float:
            started = time.perf_counter()
            for _ in range(calls):
                client.get("http://mock/")
            return (time.perf_counter() - started) / calls * 1e6

        async def run() -> float:  # (on the event loop's thread, as a sync caller's own)
            return timed()

        return run

    def async_batch(client: httpx.AsyncClient) -> Callable[[], Awaitable[float]]:
        async def run() -> float:
            started = time.perf_counter()
            for _ in range(calls):
                await client.get("http://mock/")
            return (time.perf_counter() - started) / calls * 1e6

        return run

    batches = {f"sync {name}": sync_batch(client) for name, client in sync_clients.items()}
    batches |= {f"async {name}": async_batch(client) for name, client in async_clients.items()}
    for batch in batches.values():  # (warm up: threads started, code paths taken)
        await batch()
    timings: dict[str, list[float]] = {name: [] for name in batches}
    for _ in range(rounds):
        order = list(batches)
        random.shuffle(order)
        for name in order:
            timings[name].append(await batches[name]())
    for client in sync_clients.values():
        client.close()
    for async_client in async_clients.values():
        await async_client.aclose()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200, help="calls per batch")
    arguments = parser.parse_args()
    timings = asyncio.run(_measure(arguments.rounds, arguments.calls))
    print(f"median of {arguments.rounds} interleaved rounds of {arguments.calls} calls each")
    for mode in ("sync", "async"):
        print(f"\n{mode} MockTransport")
        print(f"  {'contender':<26} {'µs/call':>8} {'added µs':>9}")
        before: list[float] | None = None
        for name in CONTENDERS:
            rows = timings[f"{mode} {name}"]
            pairs = [] if before is None else zip(rows, before, strict=True)
            differences = [mine - theirs for mine, theirs in pairs]
            added = statistics.median(differences) if differences else 0.0
            print(f"  {name:<26} {statistics.median(rows):8.1f} {added:+9.1f}")
            before = rows


if __name__ == "__main__":
    main()
