"""Async HTTP/2 connections under cancellation: a cancel must end only the request it
lands in.

A cancel landing while the first request started a new connection (its preface and
settings) closed the connection unstarted, and each request waiting to go on it started
it again on the closed connection: h2's own ``ProtocolError`` reached the caller,
unclassified (trial84: 81 in 40 rounds of six requests, the first cancelled). Such a
request is now sent on another connection (``async_bounded_backend._no_second_start``).

Not mended (httpcore's, as in bare httpx): a cancel landing as httpcore takes back the
new connection's spare stream slots leaves too many free, and a ``ValueError`` from its
count can reach a caller; a cancel landing in a write of the connection's frames loses
them, and the server may end the connection (docs/deadlines.md).
"""

from __future__ import annotations

import random

import anyio
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
