"""Ending a requests attempt at its deadline, whatever the server trickles.

requests' timeouts are per socket operation: a server sending one byte of its
headers or body every second never trips a 2 s read timeout. So each attempt with a
finite time registers a :class:`Watch` with one process-wide watchdog thread, and
urllib3's connections of a :class:`~retrysafe.requests.RetryAdapter` tell the watch
which connection the attempt is using (:class:`BoundedHTTPConnection`). When the
attempt's time is up, the watchdog shuts that socket down: the blocked read returns
at once, urllib3 raises, and the shell reports the attempt as timed out.

The watchdog costs one lock and a heap push per attempt; its thread wakes only when
an attempt still running reaches its end. Not covered: name resolution
(``getaddrinfo`` cannot be interrupted) and the TLS handshake past the connect
timeout; both are still bounded by the connect timeout per operation.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import logging
import os
import socket
import threading
import time
from typing import Any

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager

_log = logging.getLogger("retrysafe")

__all__ = [
    "BoundedHTTPConnection",
    "BoundedHTTPSConnection",
    "Watch",
    "bound_pools",
    "watchdog",
]


class Watch:
    """One attempt's end, and the connection it is using."""

    __slots__ = ("connection", "done", "ends_at", "expired", "phases_end_at")

    def __init__(self, ends_at: float, phases_end_at: float | None = None) -> None:
        self.ends_at = ends_at
        #: When the attempt's phases must be over (``time.monotonic()``): its limit,
        #: before the hard end ``ends_at``. A wait for a pooled connection ends then, as
        #: a pool timeout of its own, before the watchdog cuts the attempt.
        self.phases_end_at = ends_at if phases_end_at is None else phases_end_at
        self.connection: HTTPConnection | None = None
        #: The attempt ended (set under the watchdog's lock: no shutdown after it).
        self.done = False
        #: The watchdog shut the attempt's socket down: its failure is a timeout.
        self.expired = False

    def _expire(self) -> None:
        connection = self.connection
        self.expired = True
        if connection is None or getattr(connection, "_retrysafe_watch", None) is not self:
            return  # not connected yet (the connect timeout bounds it) or used by another
        # (a response that closes its connection, as with "Connection: close" or
        # HTTP/1.0, is handed the socket: http.client then sets the connection's to None,
        # and the body is read through the socket the connection last connected)
        sock = getattr(connection, "sock", None) or getattr(connection, "_retrysafe_sock", None)
        # (HTTPS through an HTTPS proxy: urllib3's TLS-in-TLS wraps the TLS socket to the
        # proxy in an SSLTransport, no socket; the socket under it carries both)
        while sock is not None and not isinstance(sock, socket.socket):
            sock = getattr(sock, "socket", None)
        if sock is not None:
            # The plain socket's shutdown, also under TLS: it wakes a blocked read
            # without touching the TLS object another thread is reading through.
            with contextlib.suppress(OSError):  # already closed
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


#: The watch of the attempt running in this thread, for the connection to find.
current_watch: contextvars.ContextVar[Watch | None] = contextvars.ContextVar(
    "retrysafe_requests_watch", default=None
)


class _Watchdog:
    """One daemon thread that shuts down the sockets of attempts past their end."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self.reset()

    def reset(self) -> None:
        """Start afresh: no thread, no attempt watched. Also in a child process just
        forked, which has no watchdog thread (only the thread that forked goes on), and
        whose attempts would otherwise never be cut; the parent's attempts are not the
        child's to cut (their sockets are the parent's too), and its lock may have been
        held as it forked."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Watch]] = []
        self._thread: threading.Thread | None = None

    def watch(self, ends_at: float, phases_end_at: float | None = None) -> Watch:
        """Start watching an attempt that must end by ``ends_at`` (``time.monotonic()``),
        whose phases end by ``phases_end_at`` (``ends_at`` if not given)."""
        watch = Watch(ends_at, phases_end_at)
        with self._lock:
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (ends_at, next(self._order), watch))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="retrysafe-requests-watchdog", daemon=True
                )
                self._thread.start()
            elif earliest is None or ends_at < earliest:
                self._wake.notify()
        return watch

    def release(self, watch: Watch) -> None:
        """The attempt ended: its socket must not be shut down any more."""
        with self._lock:
            watch.done = True

    def pooled(self, connection: HTTPConnection) -> None:
        """``connection`` goes back to its pool, its attempt's use of it over: a watch
        that runs out from now on must not shut down a socket another thread may take."""
        with self._lock:  # (the lock _expire runs under: it shut it down before, or never)
            connection._retrysafe_watch = None  # type: ignore[attr-defined]

    def _run(self) -> None:
        with self._lock:
            while True:
                heap = self._heap
                while heap and heap[0][2].done:
                    heapq.heappop(heap)
                if not heap:
                    self._wake.wait()
                    continue
                ends_at, _, watch = heap[0]
                left = ends_at - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                heapq.heappop(heap)
                try:
                    watch._expire()
                except Exception:  # (one attempt's connection of an unforeseen kind)
                    # The thread goes on: ended, it would cut no attempt of the process.
                    _log.debug("the watchdog could not cut an attempt", exc_info=True)


#: The process's one watchdog (its thread starts with the first watched attempt).
watchdog = _Watchdog()
if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=watchdog.reset)


class _Bounded:
    """Mixed into urllib3's connections: each request tells the running attempt's
    watch which connection (so which socket) it uses."""

    def request(self, *args: Any, **kwargs: Any) -> None:
        watch = current_watch.get()
        if watch is not None:
            self._retrysafe_watch = watch
            watch.connection = self  # type: ignore[assignment]
            if watch.expired:  # its time ran out while it was connecting (TLS)
                watch._expire()
        super().request(*args, **kwargs)  # type: ignore[misc]

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        # (kept for the watch: a response that closes the connection takes its socket)
        self._retrysafe_sock = self.sock  # type: ignore[attr-defined]
        watch = current_watch.get()
        if watch is None or not watch.expired:
            return
        if watch.connection is self:  # type: ignore[comparison-overlap]
            watch._expire()  # its time ran out while it was connecting (plain HTTP)


class BoundedHTTPConnection(_Bounded, HTTPConnection):
    """urllib3's HTTP connection, reporting itself to the attempt's watch."""


class BoundedHTTPSConnection(_Bounded, HTTPSConnection):
    """urllib3's HTTPS connection, reporting itself to the attempt's watch."""


class _BoundedPool:
    """Mixed into urllib3's pools: waiting for a free connection (a full pool with
    ``pool_block=True``) ends with the running attempt's phases, as a pool timeout
    (never sent: retried, and not the dependency's doing) before the watchdog's hard
    end, which would make it the attempt's timeout. requests passes no pool timeout,
    and urllib3 would otherwise wait for as long as it takes. A connection put back is
    no longer its attempt's to shut down."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        watch = current_watch.get()
        if watch is not None:
            left = max(0.0, watch.phases_end_at - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        return super()._get_conn(timeout)  # type: ignore[misc]

    def _put_conn(self, conn: Any) -> None:
        if getattr(conn, "_retrysafe_watch", None) is not None:
            watchdog.pooled(conn)
        super()._put_conn(conn)  # type: ignore[misc]


class _BoundedHTTPPool(_BoundedPool, HTTPConnectionPool):
    ConnectionCls = BoundedHTTPConnection


class _BoundedHTTPSPool(_BoundedPool, HTTPSConnectionPool):
    ConnectionCls = BoundedHTTPSConnection


def bound_pools(manager: PoolManager) -> None:
    """Make the pools ``manager`` creates use the bounded connections."""
    manager.pool_classes_by_scheme = {"http": _BoundedHTTPPool, "https": _BoundedHTTPSPool}
