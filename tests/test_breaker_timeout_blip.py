"""A blip of timeouts that one retry fixes does not open the circuit.

Fifty calls in flight; the server stalls the first 21 requests and answers every other at
once, so each stalled call needs one retry. A timeout was told to the breaker at once
(a first 503 waits for its call's retry to decide it), so the 21 stalled attempts timing
out together made "20 failing calls in a row", and the circuit opened before any retry
went: 29 of 50 calls succeeded where every peer got 50 (a user's trial). Now a call's
first timeout is held like its first 503, and counts only if its retry fails too.

Over real sockets, through ``AsyncClient``, the aiohttp middleware and ``Client``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.server
import threading
import time
from collections.abc import Iterator

import aiohttp
import httpx
import pytest

import retrysafe
from local_http import serving
from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware
from retrysafe.request_facts import default_dependency

STALLED = 21
CALLS = 50
#: How long the first STALLED requests are held: longer than any attempt.
STALL = 1.5
#: (An answer at once fits an attempt with room for a loaded machine: at 0.3 s, 50 calls
#: at once on three test workers timed out beyond the stalled ones, and the circuit
#: opened; at 0.6 s it did so once in a CI run with the compiled build being built.)
POLICY = RetryPolicy(deadline=4.0, attempt_timeout=0.9, backoff_base=0.05)


def _stalling_the_first(count: int) -> type[http.server.BaseHTTPRequestHandler]:
    """A handler that holds its first ``count`` requests for STALL seconds, then answers them
    (long after their attempts gave up), and answers every later one at once."""
    lock = threading.Lock()
    seen = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            with lock:
                seen[0] += 1
                stalled = seen[0] <= count
            if stalled:
                time.sleep(STALL)
            try:
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:  # (a stalled request's client left long ago)
                self.close_connection = True

        def log_message(self, *_: object) -> None:
            pass

    return Handler


@pytest.fixture
def blip() -> Iterator[str]:
    with serving(_stalling_the_first(STALLED), many_at_once=True) as base:
        yield f"{base}/items"


def test_async_client_a_blip_of_timeouts_one_retry_fixes_leaves_it_closed(blip: str) -> None:
    async def run() -> tuple[list[str], str]:
        async with retrysafe.AsyncClient(policy=POLICY) as client:

            async def one() -> str:
                try:
                    return str((await client.get(blip)).status_code)
                except retrysafe.ApiError as error:
                    return type(error).__name__

            outcomes = list(await asyncio.gather(*(one() for _ in range(CALLS))))
            breaker = client.governor.guard(default_dependency(httpx.URL(blip))).breaker
            assert breaker is not None
            return outcomes, breaker.state

    outcomes, state = asyncio.run(run())
    assert outcomes == ["200"] * CALLS, outcomes
    assert state == "closed"


def test_aiohttp_middleware_a_blip_of_timeouts_one_retry_fixes_leaves_it_closed(
    blip: str,
) -> None:
    async def run() -> list[str]:
        middleware = RetryMiddleware(policy=POLICY)
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:

            async def one() -> str:
                try:
                    async with session.get(blip) as response:
                        await response.read()
                        return str(response.status)
                except retrysafe.ApiError as error:
                    return type(error).__name__

            return list(await asyncio.gather(*(one() for _ in range(CALLS))))

    assert asyncio.run(run()) == ["200"] * CALLS


def test_client_a_blip_of_timeouts_one_retry_fixes_leaves_it_closed(blip: str) -> None:
    limits = httpx.Limits(max_connections=CALLS)
    with retrysafe.Client(policy=POLICY, limits=limits) as client:

        def one(_: int) -> str:
            try:
                return str(client.get(blip).status_code)
            except retrysafe.ApiError as error:
                return type(error).__name__

        with concurrent.futures.ThreadPoolExecutor(CALLS) as pool:
            outcomes = list(pool.map(one, range(CALLS)))
        breaker = client.governor.guard(default_dependency(httpx.URL(blip))).breaker
        assert breaker is not None
        assert outcomes == ["200"] * CALLS, outcomes
        assert breaker.state == "closed"
