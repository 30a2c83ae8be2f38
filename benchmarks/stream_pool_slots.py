"""The connection slots a caller's ``asyncio.timeout`` costs when it lands as a body httpx
reads (after the transport returned) is closed: retrysafe's streamed calls and its drop-in
transport under a plain ``httpx.AsyncClient``, beside plain httpx.

httpcore tidies its pool inside an anyio shield when a response is closed; asyncio's
``Task.cancel()`` (``asyncio.timeout``, ``asyncio.wait_for``) reaches into it, and the pool
keeps the connection busy and the request queued for ever (encode/httpcore#1093 family).
To land each caller's timeout there every time, the script slows httpcore's
``_response_closed`` (inside that shield) by ``--hold`` seconds, and each call runs under
``asyncio.timeout(--timeout)``, shorter. Each way of calling keeps one client (a pool of
``--calls`` connections) for ``--calls`` such calls, then counts what the pool lost:
connections :func:`retrysafe.pool_repair.stranded` and requests left in ``pool._requests``,
and whether one more call (unslowed) is answered within a second.

    .venv/bin/python benchmarks/stream_pool_slots.py [--calls 3] [--json]

Only 127.0.0.1 is reached (a minimal server in a child process, benchmarks/overhead.py's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
from httpcore._async import http11

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import loopback_server

import retrysafe
from retrysafe.pool_repair import stranded

Call = Callable[[httpx.AsyncClient, str], Awaitable[object]]


async def get(client: httpx.AsyncClient, url: str) -> object:
    return await client.get(url)


async def stream(client: httpx.AsyncClient, url: str) -> object:
    async with client.stream("GET", url) as response:
        return await response.aread()


async def send_stream(client: httpx.AsyncClient, url: str) -> object:
    response = await client.send(client.build_request("GET", url), stream=True)
    try:
        return await response.aread()
    finally:
        await response.aclose()


def plain(limits: httpx.Limits) -> httpx.AsyncClient:
    return httpx.AsyncClient(limits=limits)


def own(limits: httpx.Limits) -> httpx.AsyncClient:
    return retrysafe.AsyncClient(limits=limits)


def drop_in(limits: httpx.Limits) -> httpx.AsyncClient:
    inner = httpx.AsyncHTTPTransport(limits=limits)
    return httpx.AsyncClient(transport=retrysafe.AsyncRetryTransport(inner))


CASES: list[tuple[str, Callable[[httpx.Limits], httpx.AsyncClient], Call]] = [
    ("plain httpx            get()", plain, get),
    ("plain httpx            stream()", plain, stream),
    ("retrysafe.AsyncClient  get()", own, get),
    ("retrysafe.AsyncClient  stream()", own, stream),
    ("retrysafe.AsyncClient  send(stream=True)", own, send_stream),
    ("httpx + AsyncRetryTransport  get()", drop_in, get),
    ("httpx + AsyncRetryTransport  stream()", drop_in, stream),
]


def pool_of(client: object) -> Any:
    found: Any = client._transport  # type: ignore[attr-defined]
    while not hasattr(found, "_pool"):
        found = found._loop.transport
    return found._pool


async def one_case(
    make: Callable[[httpx.Limits], httpx.AsyncClient], call: Call, url: str, args: Any
) -> dict[str, Any]:
    closing = http11.AsyncHTTP11Connection._response_closed

    async def slowly(self: http11.AsyncHTTP11Connection) -> None:
        await anyio.sleep(args.hold)  # (inside httpcore's shield)
        await closing(self)

    limits = httpx.Limits(max_connections=args.calls, max_keepalive_connections=args.calls)
    async with make(limits) as client:
        pool = pool_of(client)
        timed_out = 0
        http11.AsyncHTTP11Connection._response_closed = slowly  # type: ignore[method-assign]
        try:
            for _ in range(args.calls):
                try:
                    async with asyncio.timeout(args.timeout):
                        await call(client, url)
                except TimeoutError:
                    timed_out += 1
        finally:
            http11.AsyncHTTP11Connection._response_closed = closing  # type: ignore[method-assign]
        lost = sum(1 for connection in pool._connections if stranded(connection))
        queued = len(pool._requests)
        try:
            async with asyncio.timeout(1.0):
                await get(client, url)
            next_call = "answered"
        except TimeoutError:
            next_call = "no connection in 1 s"
        return {
            "calls": args.calls,
            "timed_out": timed_out,
            "stranded": lost,
            "queued": queued,
            "next_call": next_call,
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3, help="calls (and pool size) per case")
    parser.add_argument("--hold", type=float, default=0.2, help="seconds the close is slowed")
    parser.add_argument("--timeout", type=float, default=0.1, help="the caller's timeout")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {}
    with loopback_server() as url:
        for name, make, call in CASES:
            results[name] = await one_case(make, call, url, args)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'case':44} timed out  stranded  queued  next call")
    for name, r in results.items():
        print(
            f"{name:44} {r['timed_out']:>4}/{r['calls']:<4} {r['stranded']:>8} "
            f"{r['queued']:>7}  {r['next_call']}"
        )


if __name__ == "__main__":
    asyncio.run(main())
