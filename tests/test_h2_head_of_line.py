"""Requests sharing an HTTP/2 connection with hangs: their answers come at once, and
must be taken at once.

httpcore reads for every request on the connection under one lock. A request whose
answer another request read waits for that lock before it takes its answer, while a
request with no answer yet holds it through a blocking read. Beside a few hangs, every
GET on the connection ran out of its 1 s attempt although its answer had come within
milliseconds (trial79; sync, asyncio and trio; bare httpx returned them after the
hangs' 3 s). The turn to read now goes first to a request whose answer has come.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import anyio
import pytest

import retrysafe
from retrysafe import RetryPolicy
from test_h2_lowered_stream_limit import H2_ONLY, LoweringServer, unprotected

pytestmark = pytest.mark.anyio

HANGS = 4
GETS = 12
#: The hangs hold their reads for 3 s; each GET has 1 s, and no time to retry.
HANG = RetryPolicy(attempts=1, attempt_timeout=3.0, deadline=3.0)
GET = RetryPolicy(attempts=1, attempt_timeout=1.0, deadline=1.5)
#: What a loaded machine may add to an answer that comes at once.
SLACK = 0.8


@pytest.fixture
def server() -> Iterator[LoweringServer]:
    server = LoweringServer()
    yield server
    server.close()


def test_gets_beside_hangs_take_their_answers_at_once_sync(server: LoweringServer) -> None:
    took: list[float] = []
    failed: list[BaseException] = []

    with retrysafe.Client(governor=unprotected(), **H2_ONLY) as client:
        assert client.get(f"{server.url}/ok").status_code == 200  # (the connection)

        def hang() -> None:
            with contextlib.suppress(retrysafe.ApiError):
                client.get(f"{server.url}/hang", policy=HANG)

        def get() -> None:
            time.sleep(0.1)  # (the hangs read by now)
            started = time.monotonic()
            try:
                client.get(f"{server.url}/ok", policy=GET)
            except retrysafe.ApiError as error:
                failed.append(error)
            took.append(time.monotonic() - started)

        threads = [threading.Thread(target=hang) for _ in range(HANGS)]
        threads += [threading.Thread(target=get) for _ in range(GETS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert failed == []
    assert len(took) == GETS
    assert max(took) < SLACK
    assert server.connections == 1


async def test_gets_beside_hangs_take_their_answers_at_once_async(server: LoweringServer) -> None:
    took: list[float] = []
    failed: list[BaseException] = []

    async with retrysafe.AsyncClient(governor=unprotected(), **H2_ONLY) as client:
        assert (await client.get(f"{server.url}/ok")).status_code == 200

        async def hang() -> None:
            with contextlib.suppress(retrysafe.ApiError):
                await client.get(f"{server.url}/hang", policy=HANG)

        async def get() -> None:
            await anyio.sleep(0.1)
            started = time.monotonic()
            try:
                await client.get(f"{server.url}/ok", policy=GET)
            except retrysafe.ApiError as error:
                failed.append(error)
            took.append(time.monotonic() - started)

        async with anyio.create_task_group() as tasks:
            for _ in range(HANGS):
                tasks.start_soon(hang)
            for _ in range(GETS):
                tasks.start_soon(get)
    assert failed == []
    assert len(took) == GETS
    assert max(took) < SLACK
    assert server.connections == 1
