"""Async HTTP/2 connections under cancellation: a cancel must end only the request it
lands in.

A cancel landing while the first request started a new connection (its preface and
settings) closed the connection unstarted, and each request waiting to go on it started
it again on the closed connection: h2's own ``ProtocolError`` reached the caller,
unclassified (trial84: 81 in 40 rounds of six requests, the first cancelled). Such a
request is now sent on another connection (``async_bounded_backend._no_second_start``).

A new connection makes a stream slot for each stream it allows itself (100), then takes
back all but one until the server's settings come, a pause of the event loop each; a
cancel landing among those pauses left up to 99 slots too many, and once the server's
settings came, giving back the slots not taken back raised ``ValueError: semaphore
released too many times`` to a caller (trial85). Those slots are now taken back with no
pause (``async_bounded_backend._StartSlots``).

A cancel landing in a write of the connection's frames: ``test_h2_cut_writes.py``.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import retrysafe

pytestmark = pytest.mark.anyio


async def test_requests_waiting_on_a_connection_whose_start_was_cancelled_go_elsewhere() -> None:
    """Six requests on a fresh client, the first cancelled within 3 ms (often while it
    starts the connection): no caller gets h2's own ProtocolError."""
    from local_http import serving_h2_apart

    raw: list[str] = []

    async def one(client: retrysafe.AsyncClient, url: str, cancel_after: float | None) -> None:
        try:
            with anyio.move_on_after(cancel_after if cancel_after is not None else 5):
                await client.get(url)
        except Exception as error:  # (every kind: what is counted)
            if type(error).__module__.startswith("h2"):
                raw.append(repr(error))

    random.seed(7)
    with serving_h2_apart(100) as base:
        for _ in range(20):
            async with (
                retrysafe.AsyncClient(http1=False, http2=True) as client,
                anyio.create_task_group() as group,
            ):
                group.start_soon(one, client, f"{base}/", random.uniform(0, 0.003))
                for _ in range(5):
                    group.start_soon(one, client, f"{base}/", None)
    assert raw == []


def _started_connections(client: retrysafe.AsyncClient) -> list[Any]:
    """The HTTP/2 connections of ``client``'s pool that have sent their preface."""
    pool = client._transport._loop.transport._pool  # type: ignore[attr-defined]
    inner = [getattr(c, "_connection", None) for c in pool._connections]
    return [c for c in inner if getattr(c, "_sent_connection_init", False)]


def _free_slots(connection: Any) -> int:
    slots = connection._max_streams_semaphore
    semaphore = getattr(slots, "_semaphore", slots)  # (retrysafe's count around httpcore's)
    inner = getattr(semaphore, "_trio_semaphore", None) or semaphore._anyio_semaphore
    return int(inner.value)


async def _statuses_of_five(client: retrysafe.AsyncClient, url: str) -> list[int]:
    """The statuses of five requests sent at once."""
    statuses: list[int] = []

    async def one() -> None:
        statuses.append((await client.get(url)).status_code)

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(one)
    return statuses


async def test_a_request_cancelled_as_its_new_connection_makes_its_stream_slots() -> None:
    """The first request on a new connection is cancelled the moment the connection has
    sent its preface (where httpcore goes on to take back its spare stream slots): the
    connection's free slots never exceed the streams it allows, and the requests after
    it succeed, with no ``ValueError`` from the count."""
    from local_http import serving_h2_apart

    with serving_h2_apart(100) as base:
        for _ in range(5):
            async with retrysafe.AsyncClient(http1=False, http2=True) as client:
                scope = anyio.CancelScope()

                async def first(client: retrysafe.AsyncClient, scope: anyio.CancelScope) -> None:
                    with scope:
                        await client.get(f"{base}/")

                async with anyio.create_task_group() as group:
                    group.start_soon(first, client, scope)
                    with anyio.fail_after(5):
                        while not _started_connections(client):
                            await anyio.lowlevel.checkpoint()
                    scope.cancel()
                for connection in _started_connections(client):
                    assert _free_slots(connection) <= connection._max_streams
                with anyio.fail_after(10):
                    statuses = await _statuses_of_five(client, f"{base}/")
                assert statuses == [200] * 5
                for connection in _started_connections(client):
                    assert _free_slots(connection) <= connection._max_streams


async def test_a_plain_httpx_client_keeps_httpcores_own_start() -> None:
    """The wrap reaches only connections over retrysafe's network streams."""
    import httpcore
    from httpcore._async.http2 import AsyncHTTP2Connection, HTTPConnectionState

    retrysafe.AsyncClient()  # (its backend wraps httpcore's start, once)

    class Stream:
        async def aclose(self) -> None:
            pass

    connection = AsyncHTTP2Connection.__new__(AsyncHTTP2Connection)
    connection._state = HTTPConnectionState.CLOSED
    connection._network_stream = Stream()  # type: ignore[assignment]
    with pytest.raises(Exception) as raised:  # noqa: PT011 - whatever httpcore raises
        await connection._send_connection_init(request=None)  # type: ignore[arg-type]
    assert not isinstance(raised.value, httpcore.ConnectionNotAvailable)


async def test_a_plain_httpx_client_keeps_httpcores_own_stream_slots() -> None:
    """The slots taken without a pause are only those of connections over retrysafe's
    network streams: a plain httpx client's, in the same process, pause as httpcore's."""
    import httpx

    from local_http import serving_h2_apart

    retrysafe.AsyncClient()  # (its backend has httpcore make slots its way, once)
    with serving_h2_apart(100) as base:
        async with httpx.AsyncClient(http1=False, http2=True) as plain:
            assert (await plain.get(f"{base}/")).status_code == 200
            pool: Any = plain._transport._pool  # type: ignore[attr-defined]
            slots = pool._connections[0]._connection._max_streams_semaphore
            assert getattr(slots, "_without_pause", False) is False


async def test_a_trace_callback_that_raises_as_a_connection_starts_leaves_no_flag() -> None:
    """httpcore awaits a ``trace`` extension's callback between a connection's start and
    its stream slots: one that raises there must not leave the next HTTP/2 connection the
    task opens, a plain httpx client's, taking its slots retrysafe's way (review81)."""
    import httpx

    from local_http import serving_h2_apart

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name == "http2.send_connection_init.complete":
            raise RuntimeError("a trace callback that fails")

    with serving_h2_apart(100) as base:
        async with retrysafe.AsyncClient(http1=False, http2=True) as client:
            with pytest.raises(Exception, match="a trace callback that fails"):
                await client.get(f"{base}/", extensions={"trace": trace})
        async with httpx.AsyncClient(http1=False, http2=True) as plain:
            assert (await plain.get(f"{base}/")).status_code == 200
            pool: Any = plain._transport._pool  # type: ignore[attr-defined]
            slots = pool._connections[0]._connection._max_streams_semaphore
            assert getattr(slots, "_without_pause", False) is False
