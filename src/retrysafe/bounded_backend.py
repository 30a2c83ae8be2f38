"""httpcore network streams that end every operation by the current attempt's deadline.

See :mod:`retrysafe.attempt_deadline` for why; this module is loaded only once
a transport with an httpcore pool is wrapped, since httpx itself defers httpcore.
"""

from __future__ import annotations

import contextlib
import socket
import typing
from collections.abc import Iterable

import httpcore

from retrysafe.attempt_deadline import AttemptDeadlineReached, current_copy, time_left

__all__ = ["AsyncBoundedBackend", "AsyncBoundedStream", "BoundedBackend", "BoundedStream"]


class BoundedStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the current attempt's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        bounded, binds, in_attempt = time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            raise AttemptDeadlineReached(stalled=False)
        try:
            return self._inner.read(max_bytes, bounded)
        except httpcore.ReadTimeout:
            if not in_attempt:
                raise  # outside an attempt (a streamed body the caller reads): httpx's own
            raise AttemptDeadlineReached(stalled=True) from None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            # (httpcore writes a GET's empty body and end this way: nothing is sent, so
            # there is nothing to bound; two of every GET's three writes)
            return self._inner.write(buffer, timeout)
        bounded, binds, _ = time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            raise httpcore.WriteTimeout("the attempt's time ran out before the request was sent")
        copy = current_copy.get()
        if copy is not None:
            copy.watch(self)  # a hedged copy: it may be cut off if another copy wins
        self._inner.write(buffer, bounded)

    def sever(self) -> None:
        """Cut the connection from any thread: a read blocked on it returns at once and
        the server sees the disconnect. Not done over HTTP/2, where other requests share
        the connection (the copy's reads then end at its attempt's end instead)."""
        ssl_object = self._inner.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
            return
        sock = self._inner.get_extra_info("socket")
        if sock is None:
            return
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: typing.Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        bounded, _, _ = time_left(timeout)
        return BoundedStream(self._inner.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class BoundedBackend(httpcore.NetworkBackend):
    """A network backend whose connections are :class:`BoundedStream`."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self.inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounded, _, _ = time_left(timeout)
        stream = self.inner.connect_tcp(host, port, bounded, local_address, socket_options)
        return BoundedStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounded, _, _ = time_left(timeout)
        return BoundedStream(self.inner.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class AsyncBoundedStream(httpcore.AsyncNetworkStream):
    """The async twin of :class:`BoundedStream` (asyncio and trio alike)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        bounded, binds, in_attempt = time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            raise AttemptDeadlineReached(stalled=False)
        try:
            return await self._inner.read(max_bytes, bounded)
        except httpcore.ReadTimeout:
            if not in_attempt:
                raise
            raise AttemptDeadlineReached(stalled=True) from None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:  # (nothing is sent: see BoundedStream.write)
            return await self._inner.write(buffer, timeout)
        bounded, binds, _ = time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            raise httpcore.WriteTimeout("the attempt's time ran out before the request was sent")
        await self._inner.write(buffer, bounded)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: typing.Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        bounded, _, _ = time_left(timeout)
        inner = await self._inner.start_tls(ssl_context, server_hostname, bounded)
        return AsyncBoundedStream(inner)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class AsyncBoundedBackend(httpcore.AsyncNetworkBackend):
    """An async network backend whose connections are :class:`AsyncBoundedStream`."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self.inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        bounded, _, _ = time_left(timeout)
        stream = await self.inner.connect_tcp(host, port, bounded, local_address, socket_options)
        return AsyncBoundedStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        bounded, _, _ = time_left(timeout)
        stream = await self.inner.connect_unix_socket(path, bounded, socket_options)
        return AsyncBoundedStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)
