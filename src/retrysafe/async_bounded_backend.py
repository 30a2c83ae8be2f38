"""httpcore's async network streams that end every operation by the current attempt's
deadline: the async twins of :mod:`retrysafe.bounded_backend`'s, for asyncio and trio.

They stay plain Python in the compiled build: a coroutine compiled by mypyc passes a
cancellation on to the one it awaits with the three-argument ``throw()`` Python 3.12
deprecated, and every cancel of an attempt in flight crosses a read.

What holds for the sync streams holds here, HTTP/2 included, but for httpcore's waits on
an async HTTP/2 connection: those are bounded by the attempt's cancellation, as every
async wait is, so only the connection's count of free streams is watched
(:class:`_AsyncStreamSlots`), and its turns to read are given as the sync ones are
(:class:`_AsyncTurnToRead`).
"""

from __future__ import annotations

import collections
import contextvars
import time
import typing
import weakref
from collections.abc import Coroutine, Iterable
from typing import Any

import httpcore

from retrysafe.async_whole_writes import WholeWrites
from retrysafe.attempt_deadline import (
    AttemptDeadlineReached,
    connection_carrying,
    current_copy,
    lost_while_waiting,
    note_failed_open,
    note_headers_sent,
    note_sent,
    nothing_sent_yet,
    opening_connection,
    read_timed_out,
    reset_if_open,
    retire,
    retire_if_full,
    time_left,
)
from retrysafe.bounded_backend import (
    H2_PREFACE,
    Connecting,
    PoolRef,
    bounded_handshake,
    first_answered,
    written_by_call,
)

__all__ = ["AsyncBoundedBackend", "AsyncBoundedStream"]

_AsyncPool: typing.TypeAlias = "httpcore.AsyncConnectionPool"


class _AsyncStreamSlots:
    """httpcore's count of the streams an async HTTP/2 connection may still open, as it
    counts them: a request that gets a slot while h2 counts the server's limit full
    retires the connection (:func:`~retrysafe.attempt_deadline.retire_if_full`). (The
    wait itself is bounded by the attempt's cancellation, as every async wait is.)

    httpcore also takes slots back when the server lowers its limit, while it reads for
    every request (see :class:`_TakeBackWithoutWaiting`). It waited there for streams to
    close, holding every request's turn to read: the streams that would close could not
    read their answers, and when the reading request's time ran out, the cancel cut
    httpcore's handling of what it had read, so another request's answer, read with it,
    was lost (it waited on until its read timed out, 5 s). As in the sync
    :class:`~retrysafe.bounded_backend._StreamSlots`, a slot not free at once is owed
    instead: the next stream to close pays it rather than freeing its slot.
    """

    def __init__(self, semaphore: Any, connection: object) -> None:
        self._semaphore = semaphore
        self._connection = weakref.ref(connection)
        #: Slots taken back that were not free then: the next streams to close pay them.
        self.owed = 0
        #: Whether httpcore is taking slots back now (set around it: it never waits).
        self.taking_back = False

    async def acquire(self) -> None:
        semaphore = self._semaphore
        if self.taking_back:
            if not _took_at_once(semaphore):
                self.owed += 1
            return
        # A slot may have come free with slots still owed: handed to a request waiting
        # for one whose cancel then gave it back by anyio's own release, past ours.
        # It pays what is owed before this request takes one.
        while self.owed and _took_at_once(semaphore):
            self.owed -= 1
        inner = _inner(semaphore)
        waits = inner is not None and inner.value == 0
        await semaphore.acquire()
        if waits:
            await self._still_wanted()
        retire_if_full(self._connection())

    async def _still_wanted(self) -> None:
        """A hedged copy given a stream after waiting for one first waits while a
        sibling's answer is judged, and gives the stream back, sending nothing, if it
        lost (see :class:`~retrysafe.attempt_deadline.CopyWatcher`)."""
        copy = current_copy.get()
        if copy is None:
            return
        try:
            sends = await copy.may_send_async()
        except BaseException:  # (it lost: cancelled where it waited)
            await self.release()
            raise
        if not sends:
            await self.release()
            raise lost_while_waiting("a free HTTP/2 stream")

    async def release(self) -> None:
        if self.owed:
            self.owed -= 1
        else:
            await self._semaphore.release()


def _inner(primitive: Any) -> Any:
    """The trio or anyio lock or semaphore inside httpcore's ``AsyncLock`` or
    ``AsyncSemaphore`` ``primitive`` (None before its first use, which makes it, or in an
    httpcore that keeps it elsewhere)."""
    for name in ("_trio_lock", "_anyio_lock", "_trio_semaphore", "_anyio_semaphore"):
        inner = getattr(primitive, name, None)
        if inner is not None:
            return inner
    return None


def _took_at_once(primitive: Any) -> bool:
    """Take httpcore's ``AsyncLock`` or a slot of its ``AsyncSemaphore`` if free, without
    waiting (and so without a checkpoint, where a cancel could land); whether it did."""
    try:
        _inner(primitive).acquire_nowait()
    except Exception:  # (anyio's and trio's WouldBlock, neither imported here; not made)
        return False
    return True


class _TakeBackWithoutWaiting:
    """httpcore's ``_receive_remote_settings_change`` for one async HTTP/2 connection,
    with its stream slots told that what it takes is taken back (owed if not free).

    It runs without a pause (its slots neither wait nor yield), so no other request's
    ``acquire`` can run while ``taking_back`` is set."""

    def __init__(self, connection: Any, slots: _AsyncStreamSlots) -> None:
        self._connection = weakref.ref(connection)
        self._slots = slots
        self._change = type(connection)._receive_remote_settings_change

    async def __call__(self, event: object) -> None:
        slots = self._slots
        slots.taking_back = True
        try:
            await self._change(self._connection(), event)
        finally:
            slots.taking_back = False


#: The stream the task reads for now, on an HTTP/2 connection (see _AsyncReadingFor).
_reading_for: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "retrysafe_h2_reading_for", default=None
)


class _AsyncTurnToRead:
    """The lock an async HTTP/2 connection's requests take turns to read under, in
    httpcore's place: the turn goes first to a waiting request whose answer has come,
    then to the one that asked first.

    httpcore reads for every request under it. A request whose answer another one read
    still waits for the turn before it takes that answer; a reader with no answer yet
    blocks in its read, holding the turn. With plain lock turns, the requests beside a
    few hangs waited until the hangs' reads ended, and every one of them ran out of
    time although its answer had come (trial79, asyncio and trio). A wait cut by a
    cancel leaves the line (or passes on a turn just handed to it).

    Once the connection has ended (the server's GOAWAY read, or a read failed), httpcore
    reads no more under the lock: each request in it raises at once. The line is then
    let in all together, and turns end: handed on one at a time, each took a pass of
    the event loop, and at a busy loop the last request learned of the end seconds
    later (trial84; ``tests/test_h2_closing_streams.py``)."""

    def __init__(self, connection: object) -> None:
        self._connection = weakref.ref(connection)
        self._held = False
        #: Whether the connection has ended: no more turns (see above).
        self._open = False
        self._waiting: collections.deque[_AsyncWaiter] = collections.deque()

    async def __aenter__(self) -> _AsyncTurnToRead:
        if self._open:
            return self
        if not self._held:
            self._held = True
            return self
        waiter = _AsyncWaiter(_reading_for.get())
        self._waiting.append(waiter)
        try:
            await waiter.turn.wait()
        except BaseException:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            else:  # (handed the turn as it was cut: the next one takes it)
                self._pass_on()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._pass_on()

    def _pass_on(self) -> None:
        if self._open:
            return
        waiting = self._waiting
        if _has_ended(self._connection()):
            self._open = True
            self._held = False
            for waiter in waiting:
                waiter.turn.set()
            waiting.clear()
        elif waiting:
            chosen = first_answered(waiting, self._connection()) or waiting[0]
            waiting.remove(chosen)
            chosen.turn.set()  # (still held: by that task now)
        else:
            self._held = False


def _has_ended(connection: Any) -> bool:
    """Whether httpcore's HTTP/2 ``connection`` has ended: it read the server's GOAWAY,
    or one of its reads failed (httpcore raises that failure to every later read)."""
    return (
        getattr(connection, "_connection_terminated", None) is not None
        or getattr(connection, "_read_exception", None) is not None
    )


class _AsyncWaiter:
    """A task waiting for the turn to read: the event set to hand it the turn, and the
    stream it reads for (None: not known)."""

    __slots__ = ("stream_id", "turn")

    def __init__(self, stream_id: int | None) -> None:
        import anyio  # (not with the module: it loads for every async client)

        self.stream_id = stream_id
        self.turn = anyio.Event()


class _AsyncReadingFor:
    """httpcore's ``_receive_stream_event`` for one async HTTP/2 connection, telling its
    :class:`_AsyncTurnToRead` which stream the task waits for while it does."""

    def __init__(self, connection: Any) -> None:
        self._connection = weakref.ref(connection)
        self._receive = type(connection)._receive_stream_event

    async def __call__(self, request: object, stream_id: int) -> object:
        token = _reading_for.set(stream_id)
        try:
            return await self._receive(self._connection(), request, stream_id)
        finally:
            _reading_for.reset(token)


def _take_turns_to_read(connection: Any) -> None:
    """Put an :class:`_AsyncTurnToRead` in place of ``connection``'s read lock, where it
    finds httpcore's own, not yet taken, and the method that reads for one stream."""
    lock = getattr(connection, "_read_lock", None)
    if not isinstance(lock, httpcore._synchronization.AsyncLock):
        return
    if lock_held(lock):
        return
    if callable(getattr(type(connection), "_receive_stream_event", None)):
        connection._read_lock = _AsyncTurnToRead(connection)
        connection._receive_stream_event = _AsyncReadingFor(connection)


def _adopt_h2_connection_async(stream: AsyncBoundedStream) -> None:
    """Fit the async HTTP/2 connection ``stream`` carries, once it has written its
    preface: :class:`_AsyncStreamSlots` around its own count of free streams, which it
    takes back without waiting (:class:`_TakeBackWithoutWaiting`) (only where it finds
    httpcore's own ``AsyncSemaphore``, set up, and settings handler),
    :class:`_AsyncResetOnClose` as its ``_response_closed`` (where the connection's
    class has one), :class:`_AsyncTurnToRead` as its read lock, and
    :class:`_WritesQueued` as its write lock."""
    connection = connection_carrying(stream)
    slots = getattr(connection, "_max_streams_semaphore", None)
    if (
        isinstance(slots, httpcore._synchronization.AsyncSemaphore)
        and _inner(slots) is not None  # (else no slot could be taken at once)
        and callable(getattr(type(connection), "_receive_remote_settings_change", None))
    ):
        watched = _AsyncStreamSlots(slots, connection)
        connection._max_streams_semaphore = watched
        connection._receive_remote_settings_change = _TakeBackWithoutWaiting(connection, watched)
    if callable(getattr(type(connection), "_response_closed", None)):
        connection._response_closed = _AsyncResetOnClose(connection)
    _take_turns_to_read(connection)
    if isinstance(getattr(connection, "_write_lock", None), httpcore._synchronization.AsyncLock):
        connection._write_lock = _WRITES_QUEUED


async def _nothing_to_write() -> None:
    """An empty write of an HTTP/2 connection's: nothing is sent."""


class _WritesQueued:
    """httpcore's write lock, for an async HTTP/2 connection whose frame writes are
    :class:`~retrysafe.async_whole_writes.WholeWrites`: entered at once.

    httpcore takes the frames waiting in h2 and hands them to the network stream with
    no pause between, and the stream queues each write behind the ones before it in that
    same step: the frames go out in the order they were taken without the lock. Held
    while the write went on, the lock made each writer wait for the one before it, a
    pass of the event loop or more each (one per queued request at a burst), and once a
    write failed, each writer queued for the lock learned of it in its own pass."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc_info: object) -> None:
        return None


#: The one :class:`_WritesQueued` (it holds nothing).
_WRITES_QUEUED = _WritesQueued()


class _AsyncResetOnClose:
    """httpcore's ``_response_closed`` for one async HTTP/2 connection: it resets the
    stream of a response closed before its end first (see
    :func:`~retrysafe.attempt_deadline.reset_if_open`), and it never queues behind the
    other streams' clean-ups for the connection's state lock.

    httpcore frees the stream, then takes the connection's state lock to decide whether
    the connection is now idle or, ended by the server and left with no stream, to close
    it. A read that fails ends every stream on the connection at once, and each stream's
    clean-up (shielded from cancels) then queued for that lock, only to close the
    connection again: each turn in the queue takes a pass of the event loop or two, so
    at a busy loop the last stream's clean-up took seconds, and the attempt, cut at its
    deadline, waited for it (calls ran 0.3 to 3.5 s past their deadline, trio and
    asyncio, at a server's limit of one or two streams; trial84). Here the decision is
    taken at once, with no await between reading the connection's state and changing it,
    as the event loop allows. A connection to close is marked closed first, so the
    streams that close after it have nothing left to do, and closed with no pause
    between (a cancel landing in one, as asyncio's ``Task.cancel()`` can despite
    httpcore's shield, left a connection marked closed with its socket open: review80).
    The close holds the state lock where it is free, taken without a pause, as
    httpcore's holds it (see :func:`~retrysafe.pool_repair._others_clean_up`). A
    connection whose state this does not know is left to httpcore's own
    ``_response_closed``."""

    def __init__(self, connection: typing.Any) -> None:
        self._connection = weakref.ref(connection)
        self._closed = type(connection)._response_closed
        self._known = all(hasattr(connection, name) for name in _STATE_READ_ON_CLOSE)

    async def __call__(self, stream_id: int) -> None:
        connection: Any = self._connection()  # (alive: httpcore calls this on it)
        reset_if_open(connection, stream_id)
        if not self._known:
            await self._closed(connection, stream_id)
            return
        await connection._max_streams_semaphore.release()
        del connection._events[stream_id]
        states = type(connection._state)  # (httpcore's HTTPConnectionState)
        if connection._events or connection._state == states.CLOSED:
            return
        if connection._connection_terminated or (
            connection._state == states.ACTIVE and connection._used_all_stream_ids
        ):
            connection._state = states.CLOSED  # (the streams closing next have nothing to do)
            lock = connection._state_lock
            # (taken with no pause, where a cancel could land, leaving it unclosed; held
            # by another, or not made yet: closed without it)
            held = _took_at_once(lock)
            try:
                await connection.aclose()
            finally:
                if held:
                    _inner(lock).release()
        elif connection._state == states.ACTIVE:
            connection._state = states.IDLE
            if connection._keepalive_expiry is not None:
                connection._expire_at = time.monotonic() + connection._keepalive_expiry


#: What :class:`_AsyncResetOnClose` reads of an httpcore HTTP/2 connection.
_STATE_READ_ON_CLOSE = (
    "_max_streams_semaphore",
    "_events",
    "_state",
    "_state_lock",
    "_connection_terminated",
    "_used_all_stream_ids",
    "_keepalive_expiry",
    "_expire_at",
)


def lock_held(lock: Any) -> bool:
    """Whether httpcore's ``AsyncLock`` ``lock`` is held (by any task)."""
    inner = _inner(lock)
    return inner is not None and bool(inner.locked())


class AsyncBoundedStream(httpcore.AsyncNetworkStream):
    """The async twin of :class:`BoundedStream` (asyncio and trio alike)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, pool: PoolRef = None) -> None:
        self._inner = inner
        # (as BoundedStream's: httpcore asks it of every request's connection)
        self.get_extra_info = inner.get_extra_info  # type: ignore[method-assign]
        #: See :class:`BoundedStream`.
        self.pool = pool
        self.shared = False
        #: Its HTTP/2 connection's stream slots are still httpcore's own.
        self._slots_unwatched = False
        #: Its HTTP/2 connection's frame writes (set with :attr:`shared`).
        self._whole_writes: WholeWrites | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        bounded, binds, in_attempt = time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            if self.shared:
                retire(self)
            raise AttemptDeadlineReached(stalled=False)
        started = time.monotonic()
        try:
            return await self._inner.read(max_bytes, bounded)
        except httpcore.ReadTimeout:
            if not in_attempt:
                raise
            if self.shared:
                retire(self)
            raise read_timed_out(binds, bounded, started) from None

    def write(self, buffer: bytes, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        # A plain function handing back the write to await: an empty one (nothing is
        # sent: see BoundedStream.write), two of a GET's three, is the inner stream's
        # own, with no coroutine of this class's around it; over HTTP/2, none at all:
        # httpcore no longer holds its lock through the connection's writes (see
        # _WritesQueued), and a stream of the user's passing the empty write on could
        # meet one under way ("another task is already writing": review83).
        if not buffer:
            if self._whole_writes is not None:
                return _nothing_to_write()
            return self._inner.write(buffer, timeout)
        return self._write(buffer, timeout)

    async def _write(self, buffer: bytes, timeout: float | None) -> None:
        # (see bounded_backend.BoundedStream.write)
        if self.shared or buffer.startswith(H2_PREFACE):
            if self._whole_writes is None:
                self.shared = True
                self._slots_unwatched = True
                self._whole_writes = WholeWrites(self._inner, self)
                note_headers_sent(self)  # (each request is sent as its HEADERS go into h2)
            elif self._slots_unwatched:
                # (the first write after the preface: the connection has made its slots)
                self._slots_unwatched = False
                _adopt_h2_connection_async(self)
            written_by_call(self)
            # (frames h2 counts sent: written whole, even if this task is cancelled)
            return await self._whole_writes.write(buffer, timeout)
        bounded, binds, _ = time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            raise nothing_sent_yet() or httpcore.WriteTimeout(
                "the attempt's time ran out before the request was all sent"
            )
        note_sent()
        await self._inner.write(buffer, bounded)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: typing.Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        bounded = bounded_handshake(timeout)
        pool = self.pool() if self.pool is not None else None
        try:
            with opening_connection(pool, server_hostname, bounded):
                inner = await self._inner.start_tls(ssl_context, server_hostname, bounded)
        except (httpcore.ConnectError, httpcore.ConnectTimeout):
            note_failed_open(pool, server_hostname)
            raise
        return AsyncBoundedStream(inner, self.pool)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


def _no_second_start(original: Any) -> Any:
    """httpcore's ``AsyncHTTP2Connection._send_connection_init``, refusing a connection
    already closed, for the connections of retrysafe's network streams.

    The first request on a new connection starts it (its preface and settings). Cancelled
    while it did, it closed the connection without marking it started, and each request
    already waiting to go on it started it again, on the closed connection: h2 raised its
    own ``ProtocolError`` ("Invalid input SEND_SETTINGS in state CLOSED") to the caller,
    unclassified (trial81, trial84: 81 in 40 rounds of six requests, the first cancelled).
    Refused as not available, such a request is sent on another connection by the pool,
    as httpcore does with a connection that closes before a request can use it. A start
    that succeeds flags the stream slots httpcore makes next (:class:`_StartSlots`)."""

    async def _send_connection_init(self: Any, request: Any) -> Any:
        ours = isinstance(getattr(self, "_network_stream", None), AsyncBoundedStream)
        if ours and getattr(self, "_state", None) == _CLOSED:
            raise httpcore.ConnectionNotAvailable()
        started = await original(self, request)
        if ours and "trace" not in getattr(request, "extensions", {"trace": None}):
            # (httpcore makes the connection's stream slots next, with nothing between
            # that awaits or raises, but for a trace callback: see _StartSlots)
            _starting.set(True)
        return started

    _send_connection_init.__doc__ = original.__doc__
    _send_connection_init._retrysafe_wrapped = True  # type: ignore[attr-defined]
    return _send_connection_init


#: httpcore's state of a closed connection (None: not found, and nothing is wrapped).
_CLOSED: Any = None

#: Whether the task has just started an HTTP/2 connection of retrysafe's network streams,
#: whose stream slots httpcore makes next (see :class:`_StartSlots`).
_starting: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "retrysafe_h2_starting", default=False
)


#: httpcore's ``AsyncSemaphore`` (``object`` in an httpcore that keeps it elsewhere: then
#: nothing is replaced, see :func:`_start_connections_once`).
_HttpcoreSemaphore: Any = getattr(
    getattr(httpcore, "_synchronization", None), "AsyncSemaphore", object
)


class _StartSlots(_HttpcoreSemaphore):  # type: ignore[misc]
    """httpcore's ``AsyncSemaphore``, as its async HTTP/2 connections make their stream
    slots; for a connection of retrysafe's network streams, a free slot is taken without
    a pause.

    A new connection allows one stream until the server's settings come: httpcore makes
    a slot for each stream it allows itself (100), then takes back all but one, a pause
    of the event loop each. A cancel landing among those pauses (the first request's
    deadline, or its caller's) left the connection with up to 99 slots too many: it
    opened more streams than the server allowed before its settings came, and once they
    came, giving back the slots they no longer took back raised anyio's or trio's
    ``ValueError: semaphore released too many times`` to a caller (trial84, trial85). With
    no pause there, no cancel lands there. A slot not free is waited for as httpcore
    does. Every other connection's slots are httpcore's own, unchanged, and so are those
    of a connection whose first request has a ``trace`` extension (httpcore awaits its
    callback between the start and the slots: a callback that raised would leave the
    flag set for the task's next connection, review81)."""

    def __init__(self, bound: int) -> None:
        super().__init__(bound)
        self._without_pause = _starting.get()
        if self._without_pause:
            _starting.set(False)

    async def acquire(self) -> None:
        if self._without_pause:
            if not self._backend:
                self.setup()
            if _took_at_once(self):
                return
        await super().acquire()


def _start_connections_once() -> None:
    """Wrap httpcore's ``AsyncHTTP2Connection._send_connection_init`` once (see
    :func:`_no_second_start`), where it is as expected, and have its connections make
    their stream slots as :class:`_StartSlots`."""
    global _CLOSED
    if _CLOSED is not None:
        return
    try:
        from httpcore._async import http2
        from httpcore._async.http2 import AsyncHTTP2Connection, HTTPConnectionState
    except ImportError:  # (httpcore's insides changed, or h2 is not installed)
        return
    original = getattr(AsyncHTTP2Connection, "_send_connection_init", None)
    if callable(original) and not getattr(original, "_retrysafe_wrapped", False):
        AsyncHTTP2Connection._send_connection_init = _no_second_start(original)  # type: ignore[method-assign]
        if getattr(http2, "AsyncSemaphore", None) is _HttpcoreSemaphore:
            setattr(http2, "AsyncSemaphore", _StartSlots)  # noqa: B010 - httpcore does not export it
    _CLOSED = HTTPConnectionState.CLOSED


class AsyncBoundedBackend(httpcore.AsyncNetworkBackend):
    """An async network backend whose connections are :class:`AsyncBoundedStream`."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend, pool: _AsyncPool | None = None) -> None:
        _start_connections_once()
        self.inner = inner
        self._pool: PoolRef = weakref.ref(pool) if pool is not None else None

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        pool = self._pool() if self._pool is not None else None
        with (
            Connecting(timeout, self._pool, host) as bounded,
            opening_connection(pool, host, bounded),
        ):
            stream = await self.inner.connect_tcp(
                host, port, bounded, local_address, socket_options
            )
        return AsyncBoundedStream(stream, self._pool)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with Connecting(timeout, self._pool) as bounded:
            stream = await self.inner.connect_unix_socket(path, bounded, socket_options)
        return AsyncBoundedStream(stream, self._pool)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)
