"""httpcore's async network streams that end every operation by the current attempt's
deadline: the async twins of :mod:`retrysafe.bounded_backend`'s, for asyncio and trio.

They stay plain Python in the compiled build: a coroutine compiled by mypyc passes a
cancellation on to the one it awaits with the three-argument ``throw()`` Python 3.12
deprecated, and every cancel of an attempt in flight crosses a read.

What holds for the sync streams holds here, HTTP/2 included, but for httpcore's waits on
an async HTTP/2 connection: those are bounded by the attempt's cancellation, as every
async wait is, so only the connection's count of free streams is watched
(:class:`_AsyncStreamSlots`).
"""

from __future__ import annotations

import typing
import weakref
from collections.abc import Coroutine, Iterable
from typing import Any

import httpcore

from retrysafe.attempt_deadline import (
    AttemptDeadlineReached,
    connection_carrying,
    note_failed_open,
    note_headers_sent,
    note_sent,
    nothing_sent_yet,
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
    written_by_call,
)

__all__ = ["AsyncBoundedBackend", "AsyncBoundedStream"]

_AsyncPool: typing.TypeAlias = "httpcore.AsyncConnectionPool"


class _AsyncStreamSlots:
    """httpcore's count of the streams an async HTTP/2 connection may still open, as it
    counts them: a request that gets a slot while h2 counts the server's limit full
    retires the connection (:func:`~retrysafe.attempt_deadline.retire_if_full`). (The
    wait itself is bounded by the attempt's cancellation, as every async wait is.)

    httpcore also takes slots back when the server lowers its limit; that is no request,
    and is left alone, as in the sync
    :class:`~retrysafe.bounded_backend._StreamSlots`. It is told by httpcore's
    own count of the streams it allows, which stays above the new limit until every
    slot is taken back.
    """

    def __init__(self, semaphore: typing.Any, connection: object) -> None:
        self._semaphore = semaphore
        self._connection = weakref.ref(connection)

    async def acquire(self) -> None:
        await self._semaphore.acquire()
        connection = self._connection()
        if not _taking_slots_back(connection):
            retire_if_full(connection)

    async def release(self) -> None:
        await self._semaphore.release()


def _taking_slots_back(connection: typing.Any) -> bool:
    """Whether httpcore's HTTP/2 ``connection`` is taking stream slots back, after the
    server lowered its limit (True when that cannot be told: nothing is then retired)."""
    try:
        state = connection._h2_state
        allowed = min(
            state.remote_settings.max_concurrent_streams,
            state.local_settings.max_concurrent_streams,
        )
        return bool(connection._max_streams > allowed)
    except Exception:
        return True


def _adopt_h2_connection_async(stream: AsyncBoundedStream) -> None:
    """Fit the async HTTP/2 connection ``stream`` carries, once it has written its
    preface: :class:`_AsyncStreamSlots` around its own count of free streams (only where
    it finds httpcore's own ``AsyncSemaphore``), and :class:`_AsyncResetOnClose` as its
    ``_response_closed`` (where the connection's class has one)."""
    connection = connection_carrying(stream)
    slots = getattr(connection, "_max_streams_semaphore", None)
    if isinstance(slots, httpcore._synchronization.AsyncSemaphore):
        connection._max_streams_semaphore = _AsyncStreamSlots(slots, connection)
    if callable(getattr(type(connection), "_response_closed", None)):
        connection._response_closed = _AsyncResetOnClose(connection)


class _AsyncResetOnClose:
    """The async :class:`~retrysafe.bounded_backend._ResetOnClose`: httpcore's
    ``_response_closed`` for one async HTTP/2 connection, resetting the stream of a
    response closed before its end first."""

    def __init__(self, connection: typing.Any) -> None:
        self._connection = weakref.ref(connection)
        self._closed = type(connection)._response_closed

    async def __call__(self, stream_id: int) -> None:
        connection = self._connection()
        reset_if_open(connection, stream_id)
        await self._closed(connection, stream_id)


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

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        bounded, binds, in_attempt = time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            if self.shared:
                retire(self)
            raise AttemptDeadlineReached(stalled=False)
        try:
            return await self._inner.read(max_bytes, bounded)
        except httpcore.ReadTimeout:
            if not in_attempt:
                raise
            if self.shared:
                retire(self)
            raise read_timed_out(binds, bounded) from None

    def write(self, buffer: bytes, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        # A plain function handing back the write to await: an empty one (nothing is
        # sent: see BoundedStream.write), two of a GET's three, is the inner stream's
        # own, with no coroutine of this class's around it.
        if not buffer:
            return self._inner.write(buffer, timeout)
        return self._write(buffer, timeout)

    async def _write(self, buffer: bytes, timeout: float | None) -> None:
        # (see bounded_backend.BoundedStream.write)
        if self.shared or buffer.startswith(H2_PREFACE):
            if not self.shared:
                self.shared = True
                self._slots_unwatched = True
                note_headers_sent(self)  # (each request is sent as its HEADERS go into h2)
            elif self._slots_unwatched:
                # (the first write after the preface: the connection has made its slots)
                self._slots_unwatched = False
                _adopt_h2_connection_async(self)
            written_by_call(self)
            return await self._inner.write(buffer, timeout)
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
        try:
            inner = await self._inner.start_tls(
                ssl_context, server_hostname, bounded_handshake(timeout)
            )
        except (httpcore.ConnectError, httpcore.ConnectTimeout):
            note_failed_open(self.pool() if self.pool is not None else None, server_hostname)
            raise
        return AsyncBoundedStream(inner, self.pool)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class AsyncBoundedBackend(httpcore.AsyncNetworkBackend):
    """An async network backend whose connections are :class:`AsyncBoundedStream`."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend, pool: _AsyncPool | None = None) -> None:
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
        with Connecting(timeout, self._pool, host) as bounded:
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
