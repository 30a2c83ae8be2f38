"""Async HTTP/2: the streams a failed connection ends all close at once, each in a pass
of the event loop or two, not one after another.

httpcore closes each stream (shielded from cancels) under the connection's state lock,
and closes the connection again under it when the server ended it. When a connection
fails, every stream on it fails together and queued for that lock: each took its turn
in a pass of the event loop or two, so at a busy loop the last one took seconds, and a
call cut at its deadline waited for its stream to close (calls ran 0.3 to 3.5 s past
their deadline, trio and asyncio, in trial84's stress at a server's limit of one or two
streams). ``async_bounded_backend._AsyncResetOnClose`` closes a stream without queueing.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest

import retrysafe
from h2_test_server import H2TestServer
from retrysafe import RetryPolicy

pytest.importorskip("h2")  # (the servers below speak HTTP/2 through it)
h2_events = pytest.importorskip("h2.events")
h2_errors = pytest.importorskip("h2.errors")

pytestmark = pytest.mark.anyio

#: Requests in flight on the one connection when the server ends it.
STREAMS = 30
#: Tasks that each hold the event loop 3 ms a pass: a pass takes about 60 ms.
BUSY_TASKS = 20


class EndingServer(H2TestServer):
    """An HTTP/2 server that answers nothing: it counts the requests it holds, and once
    told to (:attr:`end`), ends each connection (GOAWAY, then close), noting when."""

    def __init__(self) -> None:
        self.held = 0
        self.end = threading.Event()
        self.ended_at: float | None = None
        super().__init__()

    def serve(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError, Exception):
            conn = self.start_h2(sock, poll=0.01)
            while not self.end.is_set():
                data = self.received(sock)
                if data is None:
                    continue
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2_events.RequestReceived):
                        self.held += 1
                sock.sendall(conn.data_to_send())
            conn.close_connection(error_code=h2_errors.ErrorCodes.INTERNAL_ERROR)
            sock.sendall(conn.data_to_send())
            self.ended_at = time.monotonic()
            sock.close()


@pytest.fixture
def ending() -> Iterator[EndingServer]:
    server = EndingServer()
    yield server
    server.close()


async def test_the_streams_of_an_ended_connection_all_close_within_a_few_passes(
    ending: EndingServer,
) -> None:
    """Thirty requests on one connection the server ends, beside tasks that make each
    pass of the event loop take about 60 ms: the last call ends within a second of the
    server's GOAWAY (one pass each in turn took 1.8 s or more)."""
    ended: list[float] = []
    failures: list[BaseException] = []
    stop = threading.Event()
    all_ended = anyio.Event()

    async def busy() -> None:
        while not stop.is_set():
            time.sleep(0.003)  # noqa: ASYNC251 - a slow pass of the loop is the point
            await anyio.lowlevel.checkpoint()

    async def call(client: retrysafe.AsyncClient) -> None:
        try:
            await client.get(f"{ending.url}/")
        except retrysafe.ApiError as error:
            failures.append(error)
        ended.append(time.monotonic())
        if len(ended) == STREAMS:
            all_ended.set()

    policy = RetryPolicy(attempts=1, attempt_timeout=20.0, deadline=20.0)
    async with (
        retrysafe.AsyncClient(policy=policy, http1=False, http2=True) as client,
        anyio.create_task_group() as group,
    ):
        for _ in range(STREAMS):
            group.start_soon(call, client)
        with anyio.fail_after(30):
            while ending.held < STREAMS:  # noqa: ASYNC110 - counted by the server's thread
                await anyio.sleep(0.01)
        await anyio.sleep(0.3)  # (every request is waiting for its answer)
        for _ in range(BUSY_TASKS):
            group.start_soon(busy)
        await anyio.sleep(0.3)
        ending.end.set()
        with anyio.fail_after(30):
            await all_ended.wait()
        stop.set()
    assert ending.ended_at is not None
    assert len(failures) == STREAMS
    assert all(isinstance(error, retrysafe.TransportError) for error in failures)
    assert max(ended) - ending.ended_at < 1.0


class HeadersThenGoawayServer(H2TestServer):
    """An HTTP/2 server that answers each request's headers and sends no body; once told
    to (:attr:`end`), it sends a GOAWAY and keeps the connection open, noting when the
    client closes it (:attr:`client_closed`)."""

    def __init__(self) -> None:
        self.end = threading.Event()
        self.client_closed = threading.Event()
        super().__init__()

    def serve(self, sock: socket.socket) -> None:
        ended = False
        with contextlib.suppress(OSError, Exception):
            conn = self.start_h2(sock, poll=0.01)
            while True:
                data = self.received(sock)
                if data == b"":
                    self.client_closed.set()
                    return
                for event in conn.receive_data(data or b""):
                    if isinstance(event, h2_events.RequestReceived):
                        conn.send_headers(event.stream_id, [(":status", "200")])
                if self.end.is_set() and not ended:
                    conn.close_connection(last_stream_id=3)
                    ended = True
                sock.sendall(conn.data_to_send())


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_cancel_does_not_leave_an_ended_connections_socket_open() -> None:
    """The last stream closed on a connection the server ended closes the connection. A
    cancel of that close at its first pause (asyncio's ``Task.cancel()`` reaches into
    httpcore's shielded clean-up) must not leave the connection marked closed with its
    socket open: the pool would drop it unclosed (review80)."""
    import asyncio

    import httpx

    server = HeadersThenGoawayServer()
    try:
        transport = httpx.AsyncHTTPTransport(http1=False, http2=True)
        async with httpx.AsyncClient(transport=retrysafe.AsyncRetryTransport(transport)) as client:
            first = await client.send(client.build_request("GET", f"{server.url}/a"), stream=True)
            last = await client.send(client.build_request("GET", f"{server.url}/b"), stream=True)
            server.end.set()
            with pytest.raises(httpx.RemoteProtocolError):
                await first.aread()
            closing = asyncio.create_task(last.aclose())
            await asyncio.sleep(0)  # (the close runs to its first pause)
            closing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await closing
            with anyio.fail_after(2):
                while not server.client_closed.is_set():  # noqa: ASYNC110 - the server's thread
                    await anyio.sleep(0.01)
    finally:
        server.close()
