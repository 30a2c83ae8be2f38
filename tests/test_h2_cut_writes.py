"""Async HTTP/2: a cancel that lands while a request's frames are being written ends
only that request; the connection and the other requests on it carry on.

httpcore takes every frame waiting in h2 (this request's HEADERS, and whatever other
streams queued) and then awaits the network write. A cancel landing in that write (a
caller's, or an attempt's end) lost the frames: h2 had already counted them sent. The
server's header compression table then differed from the client's, so the next request
on the connection arrived garbled or was refused, and the reset of the cancelled stream
reached a server that had never seen it; either way the server ended the connection, and
every request on it failed with it (trial86: 44 connections ended so in 24 stress runs;
plain httpx alike). The frames taken from h2 are now always written whole, in order
(``async_whole_writes.WholeWrites``), while the cancelled caller leaves at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

import retrysafe
from h2_test_server import H2TestServer
from retrysafe import RetryPolicy

pytest.importorskip("h2")  # (the servers below speak HTTP/2 through it)
h2_events = pytest.importorskip("h2.events")
h2_exceptions = pytest.importorskip("h2.exceptions")

pytestmark = pytest.mark.anyio

#: How long the server holds the answer to ``/slow``.
SLOW = 0.6


class RecordingServer(H2TestServer):
    """An HTTP/2 server that notes each request's headers, answers ``/slow...`` after
    :data:`SLOW` seconds and anything else at once, and notes any error in what the
    client sent (then ends the connection, as a server must)."""

    def __init__(self) -> None:
        self.requests: list[dict[bytes, bytes]] = []
        self.errors: list[str] = []
        self.resets = 0
        super().__init__()

    def serve(self, sock: socket.socket) -> None:
        due: dict[int, float] = {}
        with contextlib.suppress(OSError):
            conn = self.start_h2(sock, poll=0.005, header_encoding=None)
            while True:
                data = self.received(sock)
                if data == b"":
                    return
                if data:
                    try:
                        events = conn.receive_data(data)
                    except Exception as error:  # (h2's or hpack's: the client erred)
                        self.errors.append(repr(error))
                        sock.sendall(conn.data_to_send())
                        sock.close()
                        return
                    for event in events:
                        if isinstance(event, h2_events.RequestReceived):
                            headers = dict(event.headers)
                            self.requests.append(headers)
                            slow = headers.get(b":path", b"").startswith(b"/slow")
                            wait = SLOW if slow else 0.0
                            due[event.stream_id] = time.monotonic() + wait
                        elif isinstance(event, h2_events.StreamReset):
                            self.resets += 1
                            due.pop(event.stream_id, None)
                now = time.monotonic()
                for stream_id, at in list(due.items()):
                    if at <= now:
                        del due[stream_id]
                        with contextlib.suppress(h2_exceptions.StreamClosedError):
                            conn.send_headers(stream_id, [(":status", "200")])
                            conn.send_data(stream_id, b"ok", end_stream=True)
                sock.sendall(conn.data_to_send())


@pytest.fixture
def recording() -> Iterator[RecordingServer]:
    server = RecordingServer()
    yield server
    server.close()


def _headers_frames(buffer: bytes) -> int:
    """How many HTTP/2 HEADERS frames ``buffer`` (whole frames, after any preface) holds."""
    from retrysafe.bounded_backend import H2_PREFACE

    at = len(H2_PREFACE) if buffer.startswith(H2_PREFACE) else 0
    count = 0
    while at + 9 <= len(buffer):
        length = int.from_bytes(buffer[at : at + 3], "big")
        count += buffer[at + 3] == 0x1  # (the frame's type: HEADERS)
        at += 9 + length
    return count


class _ArmedWrites:
    """A network backend around httpcore's own whose streams, once :attr:`armed`, call
    :meth:`on_armed_write` as the next frames are handed to them, before they are
    written (then disarm)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        #: The scope to cancel (:class:`_CancelsAsItWrites`), or only a flag.
        self.armed: anyio.CancelScope | None = None
        #: Set as the armed write begins.
        self.cut = anyio.Event()
        #: The writes handed to the streams, and of those the empty ones.
        self.writes = 0
        self.empty_writes = 0
        #: How many HEADERS frames each write handed to the streams held.
        self.headers_per_write: list[int] = []

    async def on_armed_write(self, scope: anyio.CancelScope) -> None:
        """What the armed write does before it writes (or instead: by raising)."""

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
        backend = self

        class Stream:
            def __init__(self, inner: Any) -> None:
                self._inner = inner

            async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's signature
                backend.writes += 1
                backend.empty_writes += not buffer
                backend.headers_per_write.append(_headers_frames(buffer))
                scope = backend.armed
                if buffer and scope is not None:
                    backend.armed = None
                    backend.cut.set()
                    await backend.on_armed_write(scope)
                await self._inner.write(buffer, timeout)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._inner, name)

        return Stream(await self._inner.connect_tcp(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _CancelsAsItWrites(_ArmedWrites):
    """Armed, cancels ``armed`` as the next frames are handed to the stream, just before
    they are written: the cancel lands in the write, as a caller's or an attempt's end
    can."""

    async def on_armed_write(self, scope: anyio.CancelScope) -> None:
        scope.cancel()


_Armed = TypeVar("_Armed", bound=_ArmedWrites)


def _armed_under(client: retrysafe.AsyncClient, kind: type[_Armed]) -> _Armed:
    """Put an :class:`_ArmedWrites` of ``kind`` under ``client``'s network streams."""
    pool: Any = client._transport._loop.transport._pool  # type: ignore[attr-defined]
    armed = kind(pool._network_backend.inner)
    pool._network_backend.inner = armed
    return armed


async def test_a_cancel_landing_in_a_write_ends_only_its_own_request(
    recording: RecordingServer,
) -> None:
    """One request waits for a slow answer; a second is cancelled as its HEADERS are
    written; a third then goes on the same connection with the header the cancelled one
    introduced. The server reads every request's headers as sent and sees no error in
    the connection; the slow request and the third are answered."""
    policy = RetryPolicy(attempts=1, attempt_timeout=5.0, deadline=5.0)
    marker = {"x-marker": "set-by-the-cancelled-request"}
    async with retrysafe.AsyncClient(policy=policy, http1=False, http2=True) as client:
        cutting = _armed_under(client, _CancelsAsItWrites)
        assert (await client.get(f"{recording.url}/warm")).status_code == 200
        slow: list[int] = []

        async def wait_for_slow() -> None:
            slow.append((await client.get(f"{recording.url}/slow")).status_code)

        async def cancelled() -> None:
            with scope:
                await client.get(f"{recording.url}/slow/cancelled", headers=marker)

        scope = anyio.CancelScope()
        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_slow)
            with anyio.fail_after(5):
                while len(recording.requests) < 2:  # noqa: ASYNC110 - the server's thread counts
                    await anyio.sleep(0.005)
            cutting.armed = scope
            group.start_soon(cancelled)
            with anyio.fail_after(5):
                await cutting.cut.wait()
            await anyio.sleep(0.05)
            third = await client.get(f"{recording.url}/third", headers=marker)
            assert third.status_code == 200
        assert scope.cancelled_caught
        assert slow == [200]
    assert recording.errors == []
    # (the cancelled request's HEADERS went out, then its reset)
    assert [r[b":path"] for r in recording.requests].count(b"/slow/cancelled") == 1
    assert recording.resets == 1
    third_seen = [r for r in recording.requests if r.get(b":path") == b"/third"]
    assert [r.get(b"x-marker") for r in third_seen] == [b"set-by-the-cancelled-request"]


class _WritesSlowlyWhenArmed(_ArmedWrites):
    """Armed, the next frames wait 0.4 s before they are written: a write the attempt's
    end overtakes."""

    async def on_armed_write(self, scope: anyio.CancelScope) -> None:
        await anyio.sleep(0.4)


async def test_a_post_whose_attempt_ends_as_its_headers_are_written_may_have_been_processed(
    recording: RecordingServer,
) -> None:
    """An unkeyed POST whose attempt ends while its HEADERS are being written: the frames
    still reach the server (the connection stays whole), so the call reports the POST
    maybe processed and does not send it again."""
    policy = RetryPolicy(attempts=3, attempt_timeout=0.15, deadline=2.0)
    async with retrysafe.AsyncClient(policy=policy, http1=False, http2=True) as client:
        slow = _armed_under(client, _WritesSlowlyWhenArmed)
        assert (await client.get(f"{recording.url}/warm")).status_code == 200
        slow.armed = anyio.CancelScope()  # (only a flag here)
        with pytest.raises(retrysafe.ApiError) as raised:
            await client.post(f"{recording.url}/slow/post", content=b"x")
        assert raised.value.processed == "maybe"
        assert len(raised.value.history) == 1
        with anyio.fail_after(5):
            while not any(r.get(b":path") == b"/slow/post" for r in recording.requests):  # noqa: ASYNC110 - the server's thread notes it
                await anyio.sleep(0.01)
        assert (await client.get(f"{recording.url}/after")).status_code == 200
    assert recording.errors == []
    posts = [r for r in recording.requests if r.get(b":method") == b"POST"]
    assert len(posts) == 1


class _StreamsOwnError(BaseException):
    """What a network stream of the user's raises from its write: no ``Exception``."""


class _RaisesItsOwnWhenArmed(_ArmedWrites):
    """Armed, the next write raises :class:`_StreamsOwnError` after a pause."""

    async def on_armed_write(self, scope: anyio.CancelScope) -> None:
        await anyio.lowlevel.checkpoint()
        raise _StreamsOwnError("from the user's network stream")


async def test_a_write_that_raises_a_base_exception_of_its_own_fails_the_call_not_the_loop(
    recording: RecordingServer,
) -> None:
    """A network stream of the user's whose write raises its own ``BaseException``: the
    call fails as a write error, and the connection with it; on trio the exception, left
    to escape the write's task, ended the whole run (``TrioInternalError``, review82)."""
    policy = RetryPolicy(attempts=1, attempt_timeout=5.0, deadline=5.0)
    async with retrysafe.AsyncClient(policy=policy, http1=False, http2=True) as client:
        raising = _armed_under(client, _RaisesItsOwnWhenArmed)
        assert (await client.get(f"{recording.url}/warm")).status_code == 200
        raising.armed = anyio.CancelScope()  # (only a flag here)
        with pytest.raises(retrysafe.ApiError) as raised:
            await client.get(f"{recording.url}/raises")
        assert raised.value.outcome == "write_error"
        causes: list[BaseException] = []
        cause = raised.value.__cause__
        while cause is not None:
            causes.append(cause)
            cause = cause.__cause__
        # (httpcore's pool raises its errors "from None": what the stream raised is named)
        assert any("from the user's network stream" in str(cause) for cause in causes), causes


#: Requests whose writes wait behind one that fails.
QUEUED = 20
#: Tasks that each hold the event loop 3 ms a pass: a pass takes about 60 ms.
BUSY_TASKS = 20


async def _queue_behind_an_armed_write(
    client: retrysafe.AsyncClient,
    armed: _ArmedWrites,
    group: anyio.abc.TaskGroup,
    call: Callable[[str], Awaitable[None]],
) -> None:
    """Start ``call("first")``, whose write is armed, then :data:`QUEUED` more calls, and
    return once each of their HEADERS has been taken from h2 and queued behind it."""
    armed.armed = anyio.CancelScope()  # (only a flag here)
    group.start_soon(call, "first")
    with anyio.fail_after(5):
        await armed.cut.wait()
    for number in range(QUEUED):
        group.start_soon(call, f"queued-{number}")
    pool: Any = client._transport._loop.transport._pool  # type: ignore[attr-defined]
    (connection,) = (c._connection for c in pool._connections)
    with anyio.fail_after(5):
        # (a stream h2 opened: its HEADERS taken and queued in the same step)
        while connection._h2_state.open_outbound_streams < QUEUED + 1:  # noqa: ASYNC110 - h2's count
            await anyio.sleep(0.01)


class _FailsWhenToldWhenArmed(_ArmedWrites):
    """Armed, the next write waits until :attr:`fail` is set and fails (a server that
    stopped reading), noting when in :attr:`failed_at`."""

    failed_at: float | None = None

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.fail = anyio.Event()

    async def on_armed_write(self, scope: anyio.CancelScope) -> None:
        import httpcore

        await self.fail.wait()
        self.failed_at = time.monotonic()
        raise httpcore.WriteError("the server stopped reading")


async def test_the_writes_queued_behind_a_write_that_fails_all_fail_at_once(
    recording: RecordingServer,
) -> None:
    """Twenty requests whose HEADERS wait to be written behind a write that fails, beside
    tasks that make each pass of the event loop take about 60 ms: every one ends within
    0.6 s of the failure. (Queued for httpcore's write lock, or each write waiting for
    the one before it in a task of its own, each learned of it in a pass or two of its
    own: 1.2 s or more.)"""
    policy = RetryPolicy(attempts=1, attempt_timeout=10.0, deadline=10.0)
    ended: list[float] = []
    outcomes: list[str | None] = []
    stop = threading.Event()

    async def busy() -> None:
        while not stop.is_set():
            time.sleep(0.003)  # noqa: ASYNC251 - a slow pass of the loop is the point
            await anyio.lowlevel.checkpoint()

    async with retrysafe.AsyncClient(policy=policy, http1=False, http2=True) as client:
        failing = _armed_under(client, _FailsWhenToldWhenArmed)
        assert (await client.get(f"{recording.url}/warm")).status_code == 200

        async def call(path: str) -> None:
            try:
                await client.get(f"{recording.url}/{path}")
            except retrysafe.ApiError as error:
                outcomes.append(error.outcome)
            else:
                outcomes.append("answered")
            ended.append(time.monotonic())

        async with anyio.create_task_group() as group:
            await _queue_behind_an_armed_write(client, failing, group, call)
            for _ in range(BUSY_TASKS):
                group.start_soon(busy)
            await anyio.sleep(0.2)
            failing.fail.set()
            with anyio.fail_after(20):
                while len(ended) < QUEUED + 1:  # noqa: ASYNC110 - counted by the calls
                    await anyio.sleep(0.01)
            stop.set()
    assert outcomes == ["write_error"] * (QUEUED + 1)
    assert not [r for r in recording.requests if r[b":path"].startswith(b"/queued")]
    assert failing.failed_at is not None
    assert max(ended) - failing.failed_at < 0.6, str(
        sorted(round(t - failing.failed_at, 3) for t in ended)
    )


async def test_an_http2_connections_empty_writes_reach_no_stream(
    recording: RecordingServer,
) -> None:
    """httpcore's empty writes of an HTTP/2 connection (after every read) send nothing:
    they reach no network stream, where one of the user's passing them on could meet
    the connection's write under way, now that httpcore's lock no longer keeps them
    apart ("another task is already writing", review83)."""
    async with retrysafe.AsyncClient(http1=False, http2=True) as client:
        counting = _armed_under(client, _ArmedWrites)  # (never armed: it counts)
        for _ in range(3):
            assert (await client.get(f"{recording.url}/")).status_code == 200
    assert counting.empty_writes == 0
    assert counting.writes >= 4  # (the preface, and each request's HEADERS)


class _PassesOnAnyWrite:
    """A network stream that notes every write it is handed."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's signature
        self.written.append(buffer)
        await anyio.lowlevel.checkpoint()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_writing_task_cancelled_before_it_ran_fails_its_writes() -> None:
    """The connection's writing task cancelled before its first step (as by code that
    cancels every task) never ran: the write queued for it fails, and so does every
    later one, at once; before, each waited for ever (review83)."""
    import asyncio

    import httpcore

    from retrysafe.async_whole_writes import WholeWrites

    class NoPool:
        pool = None

    inner = _PassesOnAnyWrite()
    writes = WholeWrites(inner, NoPool())  # type: ignore[arg-type]
    caller = asyncio.ensure_future(writes.write(b"first", None))
    await asyncio.sleep(0)  # (queued; the writing task made, not yet run)
    writer = writes._task
    assert writer is not None
    writer.cancel()
    with anyio.fail_after(2), pytest.raises(httpcore.WriteError):
        await caller
    with anyio.fail_after(2), pytest.raises(httpcore.WriteError):
        await writes.write(b"second", None)
    assert inner.written == []


class _TakesATenthOfASecond:
    """A network stream whose every write takes 0.1 s, timing out as httpcore's do when
    given less."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's signature
        import httpcore

        with anyio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
            await anyio.sleep(0.1)
        if scope.cancelled_caught:
            raise httpcore.WriteTimeout("the socket took no more in the write's time")
        self.written.append(buffer)


async def test_frames_written_together_get_the_longest_of_their_callers_write_times() -> None:
    """The frames of a caller with 0.05 s left and of one with 2 s, queued behind a write
    under way, go out together in one write given 2 s. (Given the first's 0.05 s, it
    timed out, and a write that times out fails the connection and every request on it.)"""
    from retrysafe.async_whole_writes import WholeWrites

    class NoPool:
        pool = None

    inner = _TakesATenthOfASecond()
    writes = WholeWrites(inner, NoPool())  # type: ignore[arg-type]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(writes.write, b"under way;", 1.0)
            await anyio.sleep(0.02)
            group.start_soon(writes.write, b"little time left;", 0.05)
            await anyio.sleep(0.02)
            group.start_soon(writes.write, b"more time;", 2.0)
    assert inner.written == [b"under way;", b"little time left;more time;"]


class _TakesNothingAfterItsFirstWrite:
    """A network stream whose first write takes 0.05 s and whose later ones never end
    (a server that stopped reading), timing out as httpcore's do."""

    def __init__(self) -> None:
        self.writes = 0

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's signature
        import httpcore

        self.writes += 1
        with anyio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
            await anyio.sleep(0.05 if self.writes == 1 else 3600)
        if scope.cancelled_caught:
            raise httpcore.WriteTimeout("the socket took nothing in the write's time")


class _OnePooledConnection:
    """What ``attempt_deadline.connection_carrying`` finds a network stream's connection
    in: a pool of one httpcore connection, whose ``_connection_error`` marks it retired."""

    def __init__(self) -> None:
        self._connection_error = False
        self._network_stream: object = None
        self.connections = [self]
        self._connection = self

    def pool(self) -> _OnePooledConnection:
        return self


async def test_a_write_that_outlasts_a_callers_time_retires_its_connection() -> None:
    """A caller with 0.4 s and an upload with 30 s, their frames joined in one write the
    socket does not take: the write goes on under the upload's 30 s, but once it has
    outlasted 0.4 s, the next request's frames retire the connection, so later requests
    go to another one rather than each waiting its whole time behind it (review87)."""
    from retrysafe.async_whole_writes import WholeWrites

    connection = _OnePooledConnection()
    writes = WholeWrites(_TakesNothingAfterItsFirstWrite(), connection)  # type: ignore[arg-type]
    connection._network_stream = connection  # (the stream WholeWrites carries)
    async with anyio.create_task_group() as group:
        group.start_soon(writes.write, b"under way;", 1.0)
        await anyio.sleep(0.02)
        group.start_soon(writes.write, b"little time left;", 0.4)
        group.start_soon(writes.write, b"an upload;", 30.0)
        await anyio.sleep(0.1)  # (the joined write under way, within both times)
        with anyio.move_on_after(0.05):
            await writes.write(b"a request in time;", 0.3)
        assert not connection._connection_error
        await anyio.sleep(0.4)  # (past the caller's 0.4 s)
        with anyio.move_on_after(0.05):
            await writes.write(b"a request after it;", 0.3)
        assert connection._connection_error  # (retired: no new request goes there)
        assert writes._failed is None  # (the upload's write goes on)
        group.cancel_scope.cancel()


class _HoldsUntilToldWhenArmed(_ArmedWrites):
    """Armed, the next write waits until :attr:`go` is set, then writes."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.go = anyio.Event()

    async def on_armed_write(self, scope: anyio.CancelScope) -> None:
        await self.go.wait()


async def test_the_frames_queued_behind_a_write_go_out_together_in_the_next(
    recording: RecordingServer,
) -> None:
    """Twenty requests' HEADERS queued while a write is under way go out in one write
    after it, as httpcore's lock holder took every frame waiting: written one a pass of
    the event loop apart, a burst's last HEADERS reached the server 50 to 400 ms after
    they were taken (trial88)."""
    async with retrysafe.AsyncClient(http1=False, http2=True) as client:
        holding = _armed_under(client, _HoldsUntilToldWhenArmed)
        assert (await client.get(f"{recording.url}/warm")).status_code == 200
        statuses: list[int] = []

        async def call(path: str) -> None:
            statuses.append((await client.get(f"{recording.url}/{path}")).status_code)

        async with anyio.create_task_group() as group:
            await _queue_behind_an_armed_write(client, holding, group, call)
            holding.go.set()
            with anyio.fail_after(5):
                while len(statuses) < QUEUED + 1:  # noqa: ASYNC110 - counted by the calls
                    await anyio.sleep(0.01)
        assert statuses == [200] * (QUEUED + 1)
    assert holding.headers_per_write.count(QUEUED) == 1, holding.headers_per_write
    assert sum(holding.headers_per_write) == QUEUED + 2  # (with /warm and /first)
