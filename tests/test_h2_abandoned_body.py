"""An HTTP/2 body closed before its end is reset, so it cannot stall its connection.

Found in a review: httpcore closes such a response without a ``RST_STREAM`` and drops
what the server goes on sending for it without acknowledging it, so each abandoned body
still flowing took its share of the connection's flow-control window for good; after a
few, the server could send nothing more on the connection, and every request there
timed out (four attempts, 20 s). Now the stream is reset as its response is closed:
the server stops, and h2 acknowledges what was already on its way. Over a real HTTP/2
(h2c) server in its own process, sync and async.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import retrysafe
from local_http import serving_h2_apart
from retrysafe import RetryPolicy

#: Each abandoned body: more than a connection's window could take back unacknowledged.
BIG = "/big?kib=8192"
#: Enough abandoned bodies to have stalled the connection before (about 1 MiB each).
ABANDONED = 20
ONE_ATTEMPT = RetryPolicy(attempts=1, attempt_timeout=2.0, deadline=2.0)
H2_ONLY: dict[str, Any] = {"http1": False, "http2": True}


@pytest.fixture(scope="module")
def h2_server() -> Iterator[str]:
    with serving_h2_apart(100) as base:
        yield base


def _open_streams(client: retrysafe.Client | retrysafe.AsyncClient) -> list[int]:
    """The streams h2 still has open on the client's one connection."""
    (connection,) = client._transport.transport._pool.connections  # type: ignore[attr-defined]
    state = connection._connection._h2_state
    return [number for number, stream in state.streams.items() if not stream.closed]


def test_abandoned_sync_bodies_leave_the_connection_working(h2_server: str) -> None:
    with retrysafe.Client(**H2_ONLY) as client:
        for _ in range(ABANDONED):
            with client.stream("GET", f"{h2_server}{BIG}") as response:
                next(response.iter_raw())
            assert _open_streams(client) == []  # reset as it was closed
            answer = client.get(f"{h2_server}/delay?ms=0", policy=ONE_ATTEMPT)
            assert answer.status_code == 200
            assert answer.http_version == "HTTP/2"


def test_abandoned_async_bodies_leave_the_connection_working(h2_server: str) -> None:
    async def main() -> None:
        async with retrysafe.AsyncClient(**H2_ONLY) as client:
            for _ in range(ABANDONED):
                async with client.stream("GET", f"{h2_server}{BIG}") as response:
                    await response.aiter_raw().__anext__()
                assert _open_streams(client) == []
                answer = await client.get(f"{h2_server}/delay?ms=0", policy=ONE_ATTEMPT)
                assert answer.status_code == 200

    asyncio.run(main())
