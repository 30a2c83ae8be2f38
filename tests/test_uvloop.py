"""Under uvloop, the event loop uvicorn and many services run on, an async attempt ends at
its time as on asyncio's own loop: the attempt watchdog's timers are on the loop's clock,
which uvloop keeps in whole milliseconds, cached once per turn of the loop. A server that
hangs, one that trickles its headers a byte at a time, and a wait in a full pool, each cut
within its attempt's time. Wall-clock tests, short, asserting bounds.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import httpx
import pytest
from tests.local_http import loopback_server

import retrysafe
from retrysafe import RetryPolicy

uvloop = pytest.importorskip("uvloop")

pytestmark = pytest.mark.timeout(20)

OFF = retrysafe.Governor(retrysafe.GovernorSettings.off())
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def _serve(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """``answer`` each connection, once its request's head is in, on a loopback server."""
    with loopback_server(lambda connection, head: answer(connection)) as url:
        yield f"{url}/"


@pytest.fixture
def hanging() -> Iterator[str]:
    yield from _serve(lambda connection: time.sleep(3))


@pytest.fixture
def trickling() -> Iterator[str]:
    def trickle(connection: socket.socket) -> None:
        for byte in ANSWER:
            connection.sendall(bytes([byte]))
            time.sleep(0.05)

    yield from _serve(trickle)


@pytest.fixture
def slow() -> Iterator[str]:
    def after_a_while(connection: socket.socket) -> None:
        time.sleep(0.3)
        connection.sendall(ANSWER)
        time.sleep(1)

    yield from _serve(after_a_while)


def _on_uvloop(main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    async def checked() -> Any:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        return await main()

    return uvloop.run(checked())


def _failed_call(url: str, policy: RetryPolicy) -> tuple[retrysafe.ApiError, float]:
    async def call() -> tuple[retrysafe.ApiError, float]:
        async with retrysafe.AsyncClient(policy=policy, governor=OFF) as client:
            started = time.monotonic()
            with pytest.raises(retrysafe.ApiError) as caught:
                await client.get(url)
            return caught.value, time.monotonic() - started

    result: tuple[retrysafe.ApiError, float] = _on_uvloop(call)
    return result


TWO_SHORT_ATTEMPTS = RetryPolicy(attempts=2, attempt_timeout=0.3, deadline=1.0, backoff_base=0.01)


def test_a_hanging_server_is_cut_at_each_attempts_time(hanging: str) -> None:
    error, elapsed = _failed_call(hanging, TWO_SHORT_ATTEMPTS)
    assert [record.outcome for record in error.history] == ["read_timeout", "read_timeout"]
    assert all(record.elapsed < 0.3 + 0.15 for record in error.history)
    assert elapsed < 1.0 + 0.2


def test_headers_trickled_a_byte_at_a_time_are_cut_at_each_attempts_time(trickling: str) -> None:
    error, elapsed = _failed_call(trickling, TWO_SHORT_ATTEMPTS)
    assert [record.outcome for record in error.history] == ["attempt_timeout"] * 2
    assert all(record.elapsed < 0.3 + 0.15 for record in error.history)
    assert elapsed < 1.0 + 0.2


def test_waits_in_a_full_pool_end_at_their_time_and_leave_no_slot_behind(slow: str) -> None:
    """Ten calls at once on one connection to a server answering in 0.3 s: the nine
    waiting are cut at their 0.2 s, never sent; the pool keeps its one slot."""

    async def burst() -> tuple[list[tuple[str, float]], list[Any]]:
        async with retrysafe.AsyncClient(
            policy=RetryPolicy(attempts=1, attempt_timeout=0.2),
            governor=OFF,
            limits=httpx.Limits(max_connections=1),
        ) as client:

            async def one() -> tuple[str, float]:
                started = time.monotonic()
                try:
                    await client.get(slow)
                except retrysafe.ApiError as error:
                    return error.outcome, time.monotonic() - started
                return "200", time.monotonic() - started

            outcomes = list(await asyncio.gather(*(one() for _ in range(10))))
            pool: Any = client._transport._loop.transport._pool  # type: ignore[attr-defined]
            never_opened = [
                c for c in pool._connections if c._connection is None and not c._connect_failed
            ]
            return outcomes, never_opened

    outcomes, never_opened = _on_uvloop(burst)
    assert sum(outcome == "pool_timeout" for outcome, _ in outcomes) >= 8
    assert max(elapsed for _, elapsed in outcomes) < 0.2 + 0.2
    assert never_opened == []
