"""Async HTTP/2 connections under cancellation: a cancel must end only the request it
lands in.

- A cancel landing in a write of the connection's frames lost them, whoever's they were:
  h2 had counted them sent, so the server's header table no longer matched the client's,
  or a stream's reset never reached it, and it ended the connection, failing every
  request on it (trial84: one to six times in every async run cutting attempts). The
  write is now shielded (``async_bounded_backend._whole``).
- A cancel landing while the first request started the connection closed it unstarted,
  and each request waiting to go on it started it again on the closed connection: h2's
  own ``ProtocolError`` reached the caller (trial84: 81 in 40 rounds). Such a request is
  now sent on another connection. (A rarer ``ValueError`` from httpcore's stream count,
  one to three in 40 rounds, where it was 5 to 20, is not yet mended.)
"""

from __future__ import annotations

import random

import anyio
import httpcore
import pytest

import retrysafe
from retrysafe.async_bounded_backend import AsyncBoundedStream

pytestmark = pytest.mark.anyio


class _SlowWrites(httpcore.AsyncNetworkStream):
    """Records each write once it has all gone; a write takes 50 ms."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await anyio.sleep(0.05)
        self.written.append(buffer)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return b""

    async def aclose(self) -> None:
        pass


async def test_a_cancel_during_a_write_of_http2_frames_lets_the_write_end_whole() -> None:
    inner = _SlowWrites()
    stream = AsyncBoundedStream(inner)
    stream.shared = True  # (an HTTP/2 connection's, past its preface)
    with anyio.move_on_after(0.01) as scope:
        await stream.write(b"frames of several requests")
        await anyio.sleep(1)  # (the cancel lands here, after the write)
    assert scope.cancelled_caught
    assert inner.written == [b"frames of several requests"]


async def test_a_cancel_during_an_http1_write_still_cuts_it() -> None:
    """Over HTTP/1.1 a connection carries one request: a cut write ends it alone."""
    inner = _SlowWrites()
    stream = AsyncBoundedStream(inner)
    with anyio.move_on_after(0.01) as scope:
        await stream.write(b"GET / HTTP/1.1\r\n\r\n")
    assert scope.cancelled_caught
    assert inner.written == []


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


async def test_free_stream_slots_a_cancelled_start_left_are_taken_back() -> None:
    """httpcore makes 100 slots and takes back 99, one await at a time: a cancel after
    the first left 98 free beside the connection's count of one stream, and two requests
    went on it. Counted again as the connection first writes after its preface: none
    free, and the one slot too many held is owed by the next stream to close."""
    from httpcore._synchronization import AsyncSemaphore

    from retrysafe.async_bounded_backend import _count_slots_again, _inner_semaphore

    class Connection:
        _max_streams = 1
        _events: dict[int, list[object]] = {1: [], 3: []}  # noqa: RUF012 - two requests' streams

    slots = AsyncSemaphore(100)
    await slots.acquire()  # (the one take-back before the cancel)
    await slots.acquire()  # (the two requests' streams)
    await slots.acquire()
    assert _count_slots_again(Connection(), slots) == 1
    assert _inner_semaphore(slots).value == 0


async def test_a_connection_counted_right_is_left_as_it_is() -> None:
    from httpcore._synchronization import AsyncSemaphore

    from retrysafe.async_bounded_backend import _count_slots_again, _inner_semaphore

    class Connection:
        _max_streams = 1
        _events: dict[int, list[object]] = {1: []}  # noqa: RUF012

    slots = AsyncSemaphore(100)
    for _ in range(100):
        await slots.acquire()  # (99 taken back, one stream)
    assert _count_slots_again(Connection(), slots) == 0
    assert _inner_semaphore(slots).value == 0
