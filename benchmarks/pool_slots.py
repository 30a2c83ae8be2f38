"""Connection slots a long-lived async client loses under load: retrysafe beside plain
httpx and httpx-retries, in one run.

httpcore's pool can lose a connection for good when a request ends at a bad moment: a
wait for a connection that ends just as one is made for it (encode/httpcore#1093), or a
``Task.cancel()`` that lands in the shielded clean-up of a finished response, which
leaves the connection busy and the request queued. Each lost slot stays lost; once all
are, every call waits for a connection in vain. retrysafe's async shell mends all three
on its own transports (``pool_wait.py``, ``attempt_watchdog.py``, ``pool_repair.py``).

Each contender keeps one client for the whole run: ``--tasks`` tasks make ``--calls``
GETs each per round, ``--rounds`` rounds, through a pool of ``--connections``
connections, to the chaos server's ``/tail`` endpoint (in a child process) where
``--slow-fraction`` of the answers take ``--slow-ms``. After each round, with no call
running, it counts the slots lost: connections the pool keeps that are neither idle,
closed nor available. Two ways of ending the slow calls:

- ``cut``: the contender's own time limit (retrysafe's ``attempt_timeout``, httpx's
  ``timeout``) of ``--timeout`` seconds;
- ``caller``: each call wrapped in ``asyncio.timeout(--caller-timeout)``, as async
  callers bound a call (the contenders' own limits left at 5 s).

retrysafe runs with its load protection off (``GovernorSettings.off()``), so that every
call reaches the pool in every round. Traffic goes only to 127.0.0.1.

    .venv/bin/python benchmarks/pool_slots.py [--rounds 8] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpcore
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrysafe
from hedging import ServerProcess
from retrysafe.governor import Governor, GovernorSettings
from retrysafe.pool_repair import stranded

#: Where each contender's client keeps the transport that holds the pool, in turn.
_INNER = ("_transport", "_loop", "transport", "_async_transport", "_pool")


def find_pool(client: object) -> Any:
    """The httpcore pool under ``client`` (through retrysafe's or httpx-retries' shell)."""
    found: object = client
    for _ in range(6):
        if isinstance(found, httpcore.AsyncConnectionPool):
            return found
        found = next((inner for name in _INNER if (inner := getattr(found, name, None))), None)
    raise RuntimeError(f"no httpcore pool found under {type(client).__name__}")


def lost_slots(pool: Any) -> int:
    """Connections the pool keeps that no call can use nor httpcore reclaim, with no call
    running: neither idle, closed nor available (retrysafe's own test of it)."""
    return sum(1 for connection in list(pool._connections) if stranded(connection))


def contenders(limits: httpx.Limits, timeout: float) -> dict[str, Callable[[], httpx.AsyncClient]]:
    """A maker of each contender's client, its own time limit ``timeout`` seconds."""
    policy = retrysafe.RetryPolicy(attempt_timeout=timeout, deadline=max(2.0, 4 * timeout))
    made: dict[str, Callable[[], httpx.AsyncClient]] = {
        "retrysafe.AsyncClient": lambda: retrysafe.AsyncClient(
            limits=limits, policy=policy, governor=Governor(GovernorSettings.off())
        ),
        "httpx": lambda: httpx.AsyncClient(limits=limits, timeout=timeout),
    }
    if importlib.util.find_spec("httpx_retries") is not None:
        import httpx_retries

        made["httpx-retries"] = lambda: httpx.AsyncClient(
            transport=httpx_retries.RetryTransport(
                transport=httpx.AsyncHTTPTransport(limits=limits)
            ),
            timeout=timeout,
        )
    return made


async def run_one(
    make: Callable[[], httpx.AsyncClient],
    url: str,
    args: argparse.Namespace,
    caller_timeout: float | None,
) -> dict[str, Any]:
    """One contender's rounds: slots lost after each, and its calls' outcomes."""
    outcomes: collections.Counter[str] = collections.Counter()
    lost: list[int] = []
    dead_rounds = 0
    async with make() as client:
        pool = find_pool(client)

        async def call() -> None:
            try:
                if caller_timeout is None:
                    response = await client.get(url)
                else:
                    async with asyncio.timeout(caller_timeout):
                        response = await client.get(url)
                outcomes["ok" if response.status_code == 200 else str(response.status_code)] += 1
            except TimeoutError:
                outcomes["caller timeout"] += 1
            except retrysafe.ApiError as error:
                outcomes[error.outcome] += 1
            except httpx.HTTPError as error:
                outcomes[type(error).__name__] += 1

        async def task() -> None:
            for _ in range(args.calls):
                await call()

        for _ in range(args.rounds):
            ok_before = outcomes["ok"]
            await asyncio.gather(*(task() for _ in range(args.tasks)))
            await asyncio.sleep(0.1)  # (let the last clean-ups run)
            lost.append(lost_slots(pool))
            dead_rounds += outcomes["ok"] == ok_before
    return {"lost_after_each_round": lost, "rounds_with_no_call_ok": dead_rounds, **outcomes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--calls", type=int, default=10, help="GETs per task per round")
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--slow-fraction", type=float, default=0.1)
    parser.add_argument("--slow-ms", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=0.3, help="the contenders' own")
    parser.add_argument("--caller-timeout", type=float, default=0.2)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 3
    limits = httpx.Limits(
        max_connections=args.connections, max_keepalive_connections=args.connections
    )
    server = ServerProcess()
    results: list[dict[str, Any]] = []
    try:
        for scenario, caller_timeout, own_timeout in (
            ("cut", None, args.timeout),
            ("caller", args.caller_timeout, 5.0),
        ):
            for name, make in contenders(limits, own_timeout).items():
                url = (
                    f"{server.url}/tail/{scenario}-{name}?slow_fraction={args.slow_fraction}"
                    f"&slow_ms={args.slow_ms}&fast_ms=5"
                )
                started = time.monotonic()
                row = asyncio.run(run_one(make, url, args, caller_timeout))
                row.update(scenario=scenario, contender=name, seconds=time.monotonic() - started)
                results.append(row)
                if not args.json:
                    print_row(row, args.connections)
    finally:
        server.close()
    if args.json:
        print(json.dumps(results, indent=2))


def print_row(row: dict[str, Any], connections: int) -> None:
    lost = row["lost_after_each_round"]
    calls = {k: v for k, v in row.items() if k not in _NOT_OUTCOMES}
    print(
        f"{row['scenario']:<7} {row['contender']:<22} slots lost after each round "
        f"{'/'.join(map(str, lost))} of {connections}; rounds with no call ok "
        f"{row['rounds_with_no_call_ok']}; calls {dict(sorted(calls.items()))} "
        f"({row['seconds']:.0f} s)",
        flush=True,
    )


_NOT_OUTCOMES = {
    "lost_after_each_round",
    "rounds_with_no_call_ok",
    "scenario",
    "contender",
    "seconds",
}


if __name__ == "__main__":
    main()
