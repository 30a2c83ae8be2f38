"""How much latency the idempotency middleware adds to a request, per store.

Sends a few thousand keyed POSTs (a fresh key each, so every one claims and completes)
through httpx's in-process ASGI transport to a trivial handler, alternating requests with
and without the middleware, and prints the added latency: median and p99 of the requests
with it, minus the same of those without. Redis and PostgreSQL are private throwaway
servers on loopback (PostgreSQL with fsync off, so its commits cost less than on a real
server); a store whose server is not installed is skipped.

    .venv/bin/python benchmarks/middleware_latency.py [--requests 3000] [--stores memory,...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from retrysafe.idempotency import (
    IdempotencyMiddleware,
    IdempotencyStore,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SQLiteStore,
)
from retrysafe.idempotency.asgi import Message, Receive, Scope, Send

# The throwaway Redis/PostgreSQL servers are test support, kept beside the idempotency tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "idempotency"))
from store_servers import ServerNotInstalled, postgres_server, redis_server

STORES = ("memory", "sqlite", "sqlite-normal", "redis", "postgres")
BODY = b'{"amount": 5, "currency": "EUR"}'


async def trivial_handler(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the body, answers 201 with a small JSON document."""
    more = True
    while more:
        message: Message = await receive()
        more = bool(message.get("more_body", False))
    body = b'{"id": 1}'
    await send(
        {
            "type": "http.response.start",
            "status": 201,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"9")],
        }
    )
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def open_store(kind: str, directory: Path) -> AsyncIterator[IdempotencyStore]:
    """A store of ``kind``, with a private server where it needs one."""
    with contextlib.ExitStack() as servers:
        store: IdempotencyStore
        if kind == "memory":
            store = MemoryStore()
        elif kind == "sqlite":
            store = SQLiteStore(directory / "full.sqlite3")
        elif kind == "sqlite-normal":
            store = SQLiteStore(directory / "normal.sqlite3", synchronous="NORMAL")
        elif kind == "redis":
            store = RedisStore(servers.enter_context(redis_server()))
        elif kind == "postgres":
            store = PostgresStore(servers.enter_context(postgres_server()))
        else:
            raise ValueError(f"unknown store {kind!r}")
        try:
            yield store
        finally:
            await store.close()


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def measure(store: IdempotencyStore, requests: int) -> tuple[list[float], list[float]]:
    """Latencies in seconds without and with the middleware, interleaved."""
    guarded = IdempotencyMiddleware(
        trivial_handler, store, scope=lambda request: "benchmark", required=True
    )
    apps: dict[str, Any] = {
        "without": trivial_handler,
        "with": guarded,
    }
    clients = {
        name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://b")
        for name, app in apps.items()
    }
    samples: dict[str, list[float]] = {"without": [], "with": []}
    try:
        for number in range(requests + requests // 10):
            for name, client in clients.items():
                headers = {"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"}
                started = time.perf_counter()
                response = await client.post("/", content=BODY, headers=headers)
                elapsed = time.perf_counter() - started
                if response.status_code != 201:
                    raise RuntimeError(f"{name}: unexpected {response.status_code} {response.text}")
                if number >= requests // 10:  # the first tenth warms up
                    samples[name].append(elapsed)
    finally:
        for client in clients.values():
            await client.aclose()
    return samples["without"], samples["with"]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--stores", default=",".join(STORES))
    arguments = parser.parse_args()
    print(f"{arguments.requests} keyed POSTs per store, unique keys; added latency in ms")
    print(f"{'store':<14} {'median':>8} {'p99':>8}   (without: median, p99; with: median, p99)")
    with tempfile.TemporaryDirectory() as directory:
        for kind in arguments.stores.split(","):
            try:
                async with open_store(kind, Path(directory)) as store:
                    without, with_ = await measure(store, arguments.requests)
            except ServerNotInstalled as exc:
                print(f"{kind:<14} skipped: {exc}")
                continue
            base_median, base_p99 = statistics.median(without), percentile(without, 0.99)
            median, p99 = statistics.median(with_), percentile(with_, 0.99)
            print(
                f"{kind:<14} {_ms(median - base_median):>8} {_ms(p99 - base_p99):>8}"
                f"   ({_ms(base_median)}, {_ms(base_p99)}; {_ms(median)}, {_ms(p99)})"
            )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


if __name__ == "__main__":
    asyncio.run(main())
