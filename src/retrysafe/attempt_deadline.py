"""Bounding every byte of a sync attempt, from connect to the last body byte.

Socket timeouts are per operation: a server that trickles its headers or body
one byte at a time never trips them. The sync shell therefore puts the
attempt's end in a context variable, and wraps the network backend of httpx's
own connection pool so that every connect, read and write it makes in that
context gets at most the time left.

When the attempt's time runs out during a read, :class:`AttemptDeadlineReached`
is raised. It is a ``BaseException`` on purpose, like a cancellation: httpcore
then treats it as this request being cancelled, so over HTTP/2 only this
request's stream is reset and the shared connection stays usable for the other
requests on it; an ``Exception`` would mark the whole connection broken. The
shell turns it into an ordinary timeout outcome at once. Connects and writes
that run out of time raise httpcore's own timeouts (nothing half-read is left).
"""

from __future__ import annotations

import contextvars
import time
import typing
from collections.abc import Iterable

import httpcore
import httpx

__all__ = ["AttemptDeadlineReached", "attempt_ends_at", "bound_transport"]

#: The monotonic time (``time.monotonic()``) by which the current sync attempt must end.
attempt_ends_at: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "retrysafe_attempt_ends_at", default=None
)


class AttemptDeadlineReached(BaseException):
    """The sync attempt in this context ran out of time in the middle of a read."""


def _time_left(timeout: float | None) -> tuple[float | None, bool]:
    """The timeout to use now, and whether it is the attempt's deadline that binds."""
    ends_at = attempt_ends_at.get()
    if ends_at is None:
        return timeout, False
    left = ends_at - time.monotonic()
    if timeout is None or left < timeout:
        return max(0.0, left), True
    return timeout, False


class _BoundedStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the current attempt's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        bounded, binds = _time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            raise AttemptDeadlineReached
        try:
            return self._inner.read(max_bytes, bounded)
        except httpcore.ReadTimeout:
            if binds:
                raise AttemptDeadlineReached from None
            raise

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        bounded, binds = _time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            raise httpcore.WriteTimeout("the attempt's time ran out before the request was sent")
        self._inner.write(buffer, bounded)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: typing.Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        bounded, _ = _time_left(timeout)
        return _BoundedStream(self._inner.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _BoundedBackend(httpcore.NetworkBackend):
    """A network backend whose connections are :class:`_BoundedStream`."""

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
        bounded, _ = _time_left(timeout)
        stream = self.inner.connect_tcp(host, port, bounded, local_address, socket_options)
        return _BoundedStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounded, _ = _time_left(timeout)
        return _BoundedStream(self.inner.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def bound_transport(transport: httpx.BaseTransport) -> bool:
    """Make ``transport``'s connections honour the attempt deadline; False if it cannot.

    Works on httpx's own ``HTTPTransport`` (and its proxy pools), whose httpcore
    pool makes every connection through one network backend. Other transports
    (``MockTransport``, WSGI, custom ones) are left as they are.
    """
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(backend, httpcore.NetworkBackend):
        return False
    if not isinstance(backend, _BoundedBackend):
        pool._network_backend = _BoundedBackend(backend)  # type: ignore[union-attr]
    return True
