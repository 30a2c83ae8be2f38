"""httpcore network streams that end every operation by the current attempt's deadline:
the sync ones (the async ones are :mod:`retrysafe.async_bounded_backend`).

See :mod:`retrysafe.attempt_deadline` for why; this module is loaded only once
a transport with an httpcore pool is wrapped, since httpx itself defers httpcore.
Every read and write of a sync call over a socket runs through it, so the compiled
build compiles it (``docs/cost.md``). The async streams stay plain Python apart: a
coroutine compiled by mypyc would pass a cancellation on with the three-argument
``throw()`` Python 3.12 deprecated.

A stream that carries HTTP/2 (it is told by the connection preface it writes) is
shared by every request on its connection, so two things change there. Its writes
carry frames of other requests too, and are never cut by one attempt's end (a
frame cut in half would break the connection for all of them). And when an
attempt is cut, httpcore forgets the request's stream without resetting it: the
server's limit of concurrent streams would fill up with forgotten ones, after
which every request on the connection fails. So the connection is retired
(:func:`~retrysafe.attempt_deadline.retire`): the requests on it finish, and new
ones get a fresh connection.

httpcore's sync HTTP/2 connection also makes a request wait, with no time limit, for
its turn to read (:class:`_TurnToRead`) and for a free stream when the server's limit
of concurrent streams is reached (:class:`_StreamSlots`). Both waits end by the
waiting request's attempt deadline.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
import typing
import weakref
from collections.abc import Iterable
from typing import Final

import httpcore

from retrysafe.attempt_deadline import (
    AttemptDeadlineReached,
    HeadersNoted,
    SharedStream,
    connection_carrying,
    current_call,
    current_copy,
    failed_to_open_since,
    lost_while_waiting,
    note_failed_open,
    note_headers_sent,
    note_sent,
    nothing_sent_yet,
    read_timed_out,
    reset_if_open,
    retire_for_cut,
    retire_if_full,
    time_left,
)

__all__ = [
    "H2_PREFACE",
    "BoundedBackend",
    "BoundedStream",
    "PoolRef",
    "Withdrawn",
    "bounded_handshake",
    "Connecting",
    "withdraw_queued",
    "written_by_call",
]

#: What an HTTP/2 client writes first on a connection (RFC 9113, 3.4).
H2_PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

_Pool: typing.TypeAlias = "httpcore.ConnectionPool | httpcore.AsyncConnectionPool"
#: A weak reference to the httpcore pool a stream's connection is in, if known.
PoolRef: typing.TypeAlias = "weakref.ref[_Pool] | None"


try:  # (httpcore's TLS-in-TLS stream: see BoundedStream._reads_end_on_time)
    from httpcore._backends.sync import TLSinTLSStream as _TLSinTLSStream

    _PER_RECV_TIMEOUTS: tuple[type, ...] = (_TLSinTLSStream,)
except ImportError:  # pragma: no cover (another httpcore: every read is taken as timed whole)
    _PER_RECV_TIMEOUTS = ()


class BoundedStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the current attempt's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, pool: PoolRef = None) -> None:
        self._inner = inner
        # httpcore asks these of every request's connection: the inner stream's own
        # methods answer them, with no frame of this class's around each.
        self.get_extra_info = inner.get_extra_info  # type: ignore[method-assign]
        self.close = inner.close  # type: ignore[method-assign]
        #: The pool its connection is in (to retire an HTTP/2 connection; see retire).
        self.pool = pool
        #: It carries HTTP/2: several requests at once (seen from its preface).
        self.shared = False
        #: Its HTTP/2 connection's stream slots are still httpcore's own (unbounded).
        self._slots_unbounded = False
        #: Its read's timeout is one limit for the whole read, so how late a read that
        #: timed out ended past it is the process's own lateness. httpcore's TLS-in-TLS
        #: stream (HTTPS through an HTTPS proxy) gives each recv of a read the whole
        #: timeout instead: a server sending a record piece by piece makes it last longer
        #: (review86), so its lateness is not told.
        self._reads_end_on_time = not isinstance(inner, _PER_RECV_TIMEOUTS)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        bounded, binds, in_attempt = time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            if self.shared:
                retire_for_cut(self)
            raise AttemptDeadlineReached(stalled=False)
        started = time.monotonic() if self._reads_end_on_time else None
        try:
            return self._inner.read(max_bytes, bounded)
        except httpcore.ReadTimeout:
            if not in_attempt:
                raise  # outside an attempt (a streamed body the caller reads): httpx's own
            if self.shared:
                retire_for_cut(self)
            # (stalled: the read's own timeout ran out; else the attempt's time did)
            raise read_timed_out(binds, bounded, started) from None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            # (httpcore writes a GET's empty body and end this way: nothing is sent, so
            # there is nothing to bound; two of every GET's three writes)
            return self._inner.write(buffer, timeout)
        if self.shared or buffer.startswith(H2_PREFACE):
            # HTTP/2: frames of every request on the connection, never cut by one attempt
            if not self.shared:
                self.shared = True
                self._slots_unbounded = _bound_turns_to_read(self)
                note_headers_sent(self)  # (each request is sent as its HEADERS go into h2)
            elif self._slots_unbounded:
                # (the first write after the preface: the connection has made its slots)
                self._slots_unbounded = False
                _adopt_h2_connection(self)
            written_by_call(self)
            return self._inner.write(buffer, timeout)
        bounded, binds, _ = time_left(timeout)
        if binds and bounded is not None and bounded <= 0:
            raise nothing_sent_yet() or httpcore.WriteTimeout(
                "the attempt's time ran out before the request was all sent"
            )
        note_sent()
        copy = current_copy.get()
        if copy is not None:
            copy.watch(self)  # a hedged copy: it may be cut off if another copy wins
        self._inner.write(buffer, bounded)

    def sever(self) -> None:
        """Cut the connection from any thread: a read blocked on it returns at once and
        the server sees the disconnect. Not done over HTTP/2, where other requests share
        the connection (the copy's reads then end at its attempt's end instead)."""
        ssl_object = self._inner.get_extra_info("ssl_object")
        if self.shared or (ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2"):
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
        try:
            inner = self._inner.start_tls(ssl_context, server_hostname, bounded_handshake(timeout))
        except (httpcore.ConnectError, httpcore.ConnectTimeout):
            note_failed_open(self.pool() if self.pool is not None else None, server_hostname)
            raise
        return BoundedStream(inner, self.pool)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


def written_by_call(stream: SharedStream) -> None:
    """The call running in this context wrote to the HTTP/2 ``stream``: it is the one to
    retire if that call's attempt is cut from outside (see retire_stream_of)."""
    call = current_call.get()
    if call is not None:
        call.shared_stream = stream


class _Acquirable(typing.Protocol):
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...


def _acquired_in_time(waited_on: _Acquirable) -> bool:
    """Take ``waited_on`` (a lock or semaphore), waiting no longer than the attempt in
    flight in this thread has left; False if its time ran out first. With no attempt
    in flight, wait as httpcore would."""
    left, _, _ = time_left(None)
    if left is None:
        return waited_on.acquire()
    return waited_on.acquire(timeout=left)  # (left >= 0; 0: no wait at all)


class _TurnToRead:
    """The lock an HTTP/2 connection's requests take turns to read under, whose wait
    ends by the waiting request's attempt deadline, and whose turns go in the order
    they were asked for.

    httpcore's sync HTTP/2 connection reads for all its requests under one lock: a
    request waits there for as long as another one's read runs, which its own time
    does not bound (a thread cannot be interrupted). This lock's wait is bounded: a
    request whose time runs out while it waits is cut like one whose read ran out
    (its connection retired; see :func:`~retrysafe.attempt_deadline.retire`).

    A reader that read another request's answer (with its own still to come) asks
    for the turn again at once, and then blocks in its next read; whoever has the turn
    next may have no answer yet either, and block too. So the turn goes first to a
    request whose answer has come (it takes it and gives the turn back at once), then
    to the one that asked first. With a plain lock, a GET answered at once waited out
    a hang beside it (1.4 s); with several hangs, every GET on the connection ran out
    of time although its answer had come (trial79).
    """

    def __init__(self, stream: BoundedStream, connection: object = None) -> None:
        self._guard = threading.Lock()
        #: Whether some thread holds the turn.
        self._held = False
        #: The threads waiting for the turn, first first: each waits on its own lock,
        #: released to hand it the turn.
        self._waiting: collections.deque[_Waiter] = collections.deque()
        self._stream = stream
        self._connection = weakref.ref(connection) if connection is not None else None
        #: The stream each thread reads for now (see :class:`_ReadingFor`).
        self.reading_for = threading.local()
        #: The thread reading under it now, if any (see _StreamSlots.acquire).
        self.reader: int | None = None

    def __enter__(self) -> _TurnToRead:
        with self._guard:
            if not self._held:
                self._held = True
                self.reader = threading.get_ident()
                return self
            waiter = _Waiter(getattr(self.reading_for, "stream_id", None))
            self._waiting.append(waiter)
        try:
            acquired = _acquired_in_time(waiter.ticket)
        except BaseException:  # (a KeyboardInterrupt in the wait: the line moves on)
            self._leave_line(waiter)
            raise
        if not acquired:
            self._leave_line(waiter)
            retire_for_cut(self._stream)
            raise AttemptDeadlineReached(stalled=False)
        self.reader = threading.get_ident()
        return self

    def _leave_line(self, waiter: _Waiter) -> None:
        """The wait of ``waiter`` ended without taking the turn: out of the line, or, if
        the turn was handed to it meanwhile, the turn passed on."""
        with self._guard:
            handed = waiter not in self._waiting
            if not handed:
                self._waiting.remove(waiter)
        if handed:
            self._pass_on()

    def __exit__(self, *exc_info: object) -> None:
        self.reader = None
        self._pass_on()

    def _pass_on(self) -> None:
        """Hand the turn to a waiting thread whose answer has come, else to the one that
        has waited longest, if any."""
        with self._guard:
            waiting = self._waiting
            if waiting:
                connection = self._connection() if self._connection is not None else None
                chosen = first_answered(waiting, connection) or waiting[0]
                waiting.remove(chosen)
                chosen.ticket.release()  # (still held: by that thread now)
            else:
                self._held = False


class ReadsForStream(typing.Protocol):
    """A request waiting for its turn to read an HTTP/2 connection, for the stream it
    reads for (None: not known)."""

    @property
    def stream_id(self) -> int | None: ...


_Reader = typing.TypeVar("_Reader", bound=ReadsForStream)


def first_answered(waiting: Iterable[_Reader], connection: object) -> _Reader | None:
    """The first of ``waiting`` whose stream has events read for it on httpcore's HTTP/2
    ``connection`` (its ``_events``, which only the turn's holder adds to), if any."""
    events = getattr(connection, "_events", None)
    if not isinstance(events, dict):
        return None
    for waiter in waiting:
        if waiter.stream_id is not None and events.get(waiter.stream_id):
            return waiter
    return None


class _Waiter:
    """A thread waiting for the turn to read: the lock it waits on (released to hand it
    the turn) and the stream it reads for (None: not known)."""

    __slots__ = ("stream_id", "ticket")

    def __init__(self, stream_id: int | None) -> None:
        self.stream_id = stream_id
        self.ticket = threading.Lock()
        self.ticket.acquire()


class _ReadingFor:
    """httpcore's ``_receive_stream_event`` for one sync HTTP/2 connection, telling its
    :class:`_TurnToRead` which stream the thread waits for while it does."""

    def __init__(self, connection: typing.Any, turn: _TurnToRead) -> None:
        self._connection = weakref.ref(connection)
        self._turn = turn
        self._receive = type(connection)._receive_stream_event

    def __call__(self, request: object, stream_id: int) -> object:
        reading_for = self._turn.reading_for
        reading_for.stream_id = stream_id
        try:
            return self._receive(self._connection(), request, stream_id)
        finally:
            reading_for.stream_id = None


class _StreamSlots:
    """httpcore's count of the streams an HTTP/2 connection may still open, whose wait
    for a free one ends by the waiting request's attempt deadline.

    The server limits the streams open at once. At the limit, httpcore's sync
    connection makes a new request wait until another one's stream closes, which its
    own time does not bound. Here, a request whose time runs out while it waits fails
    with a pool timeout: nothing of it was sent, so it may be sent again. It wraps the
    same semaphore httpcore counts with, so nothing is lost whichever thread holds
    which.

    The connection also takes slots back when the server lowers its limit, while
    reading for everyone under :class:`_TurnToRead`. httpcore waits there for streams
    to close, holding every request's turn to read: with more streams open than the
    new limit, the streams that would close wait for their turn, and every request on
    the connection hung until one ran out of time (a hang's 2 s deadline overran to
    10 s). Here a slot not free at once is owed instead: the next stream to close
    pays it rather than freeing its slot.

    A request that gets a slot while h2 counts the server's limit full retires the
    connection (:func:`~retrysafe.attempt_deadline.retire_if_full`).
    """

    def __init__(
        self, semaphore: threading.Semaphore, turn: _TurnToRead, connection: object
    ) -> None:
        self._semaphore = semaphore
        self._turn = turn
        self._connection = weakref.ref(connection)
        #: Slots taken back that were not free then: the next streams to close pay them.
        self.owed = 0
        self._owing = threading.Lock()

    def acquire(self) -> None:
        if self._turn.reader == threading.get_ident():  # (the server lowered its limit)
            with self._owing:
                if not self._semaphore.acquire(blocking=False):
                    self.owed += 1
            return
        if not self._semaphore.acquire(blocking=False):
            if not _acquired_in_time(self._semaphore):
                raise httpcore.PoolTimeout(
                    "no stream of the HTTP/2 connection came free within the attempt's "
                    "time (the server's limit of concurrent streams was reached); nothing "
                    "was sent"
                )
            copy = current_copy.get()
            if copy is not None and not copy.may_send():
                # (a hedged copy given the stream of a sibling that won: see CopyWatcher)
                self.release()
                raise lost_while_waiting("a free HTTP/2 stream")
        retire_if_full(self._connection())

    def release(self) -> None:
        with self._owing:
            if self.owed:
                self.owed -= 1
            else:
                self._semaphore.release()


def _bound_turns_to_read(stream: BoundedStream) -> bool:
    """Give the sync HTTP/2 connection ``stream`` carries a :class:`_TurnToRead` lock;
    whether it did.

    Called as the connection writes its preface, before any request reads. It
    replaces httpcore's private ``_read_lock``, only where it finds one unlocked;
    otherwise the connection is left as it is.
    """
    connection = connection_carrying(stream)
    lock = getattr(getattr(connection, "_read_lock", None), "_lock", None)
    if isinstance(lock, type(threading.Lock())) and not lock.locked():
        turn = connection._read_lock = _TurnToRead(stream, connection)
        if callable(getattr(type(connection), "_receive_stream_event", None)):
            connection._receive_stream_event = _ReadingFor(connection, turn)
        return True
    return False


def _adopt_h2_connection(stream: BoundedStream) -> None:
    """Fit the sync HTTP/2 connection ``stream`` carries, once it has written its
    preface: :class:`_StreamSlots` around its own count of free streams, and
    :class:`_ResetOnClose` as its ``_response_closed``.

    Replaces httpcore's private ``_max_streams_semaphore`` only where it finds the one
    httpcore makes, beside a :class:`_TurnToRead`, and ``_response_closed`` only where the
    connection's class has one; otherwise the connection is left as it is.
    """
    connection = connection_carrying(stream)
    turn = getattr(connection, "_read_lock", None)
    slots = getattr(connection, "_max_streams_semaphore", None)
    semaphore = getattr(slots, "_semaphore", None)
    if isinstance(turn, _TurnToRead) and isinstance(semaphore, threading.Semaphore):
        connection._max_streams_semaphore = _StreamSlots(semaphore, turn, connection)
    if callable(getattr(type(connection), "_response_closed", None)):
        opening = _Opening(connection)
        connection._response_closed = _ResetOnClose(connection, opening)
        state: typing.Any = getattr(connection, "_h2_state", None)
        headers = getattr(state, "send_headers", None)
        number = getattr(state, "get_next_available_stream_id", None)
        if isinstance(headers, HeadersNoted) and callable(number):
            headers.opening = opening
            state.get_next_available_stream_id = _NumberedInTurn(number, opening)


class _Opening:
    """One sync HTTP/2 connection's turn to open a stream: from taking the stream's
    number to sending the HEADERS that open it.

    httpcore takes a new stream's number (h2's next unused one) and sends its HEADERS
    apart, without a lock: two threads could take the same number, and the second's
    HEADERS, refused, closed the first's stream under it (a bare ``KeyError`` reached
    the caller, with nothing said of whether the request went out), or the two
    compressed their headers at once (hpack's ``RuntimeError``) (trial80). Between the
    two there is only work in memory: the turn is short. It ends as the HEADERS are
    sent (or refused), or, if something raised before them, as httpcore closes the
    stream. A turn never ended (a signal's exception landing between two lines of
    httpcore's) is waited for 0.5 s at most: the connection then takes no new request
    (it is marked as httpcore marks a failed one), and this one opens as httpcore's did."""

    def __init__(self, connection: object) -> None:
        self._lock = threading.Lock()
        self._holder: int | None = None
        self._connection = weakref.ref(connection)

    def take(self) -> None:
        if self._lock.acquire(timeout=0.5):
            self._holder = threading.get_ident()
            return
        connection = self._connection()
        if connection is not None:
            connection._connection_error = True  # type: ignore[attr-defined]

    def end_if_taken(self) -> None:
        """End the turn, if this thread holds it."""
        if self._holder == threading.get_ident():
            self._holder = None
            self._lock.release()


class _NumberedInTurn:
    """h2's ``get_next_available_stream_id`` for one sync HTTP/2 connection, taken in
    the connection's :class:`_Opening` turn."""

    __slots__ = ("_number", "_opening")

    def __init__(self, number: typing.Any, opening: _Opening) -> None:
        self._number = number
        self._opening = opening

    def __call__(self) -> typing.Any:
        self._opening.take()
        try:
            return self._number()
        except BaseException:  # (no number left: httpcore gives the connection up)
            self._opening.end_if_taken()
            raise


class _ResetOnClose:
    """httpcore's ``_response_closed`` for one sync HTTP/2 connection, resetting the
    stream of a response closed before its end first (see
    :func:`~retrysafe.attempt_deadline.reset_if_open`), and ending the connection's
    :class:`_Opening` turn if the closing thread still holds it (it raised before its
    HEADERS)."""

    def __init__(self, connection: typing.Any, opening: _Opening) -> None:
        self._connection = weakref.ref(connection)
        self._closed = type(connection)._response_closed
        self._opening = opening

    def __call__(self, stream_id: int) -> None:
        self._opening.end_if_taken()
        connection = self._connection()
        reset_if_open(connection, stream_id)
        self._closed(connection, stream_id)


class Withdrawn:
    """What a request taken out of its pool's queue gets instead of a connection: the
    pool no longer counts it as queued, so hands it nothing more, and its attempt ends
    there, before it sends anything (httpcore then drops it from the queue). Given to a
    hedged copy that lost (:func:`withdraw_queued`) and to a wait that ran out
    (:mod:`retrysafe.pool_wait`)."""

    def handle_request(self, request: object) -> typing.NoReturn:
        raise AttemptDeadlineReached(stalled=False)


def withdraw_queued(transport: object, extensions: object) -> None:
    """End the wait of the request whose ``extensions`` (the dict httpx hands httpcore as
    is) still waits for a connection in ``transport``'s sync httpcore pool: a hedged copy
    that lost, which then takes no connection and sends nothing. Nothing happens if no
    such request waits there (it has a connection already, or there is no such pool).

    Left alone, it would wait until a connection frees, take it, be refused before it
    writes (its time is over), and so leave that kept-alive connection closed."""
    pool = getattr(transport, "_pool", None)
    queued = getattr(pool, "_requests", None)
    lock = getattr(pool, "_optional_thread_lock", None)
    if not isinstance(queued, list) or lock is None:
        return
    with lock:  # (httpcore assigns connections under it)
        for pool_request in queued:
            request = getattr(pool_request, "request", None)
            if getattr(request, "extensions", None) is extensions and pool_request.is_queued():
                pool_request.assign_to_connection(Withdrawn())
                return


_POOL_FULL: Final = (
    "the attempt's time ran out waiting for a connection, before one was opened "
    "(a full connection pool: see httpx.Limits(max_connections=...))"
)
_FAILED_OPEN: Final = (
    "the attempt's time ran out waiting for a connection to the server that failed to open"
)


class Connecting:
    """One connect, bounded by its attempt's time: ``with Connecting(timeout) as bounded:``
    connect with ``bounded`` seconds (``timeout``, or the attempt's time left if less).

    With no time left, no connect is tried: the attempt's time went on waiting for a
    connection (its pool full, every connection busy, or the event loop late to resume
    it), so it fails as httpx's pool timeout does, never sent, rather than as a connect
    timeout, which would blame a server never asked. So does a connect that times out
    with less than half of its own time, the rest spent by the attempt that way.
    """

    __slots__ = ("_host", "_pool", "_starved", "bounded")

    def __init__(
        self, timeout: float | None, pool: PoolRef = None, host: str | None = None
    ) -> None:
        bounded, binds, _ = time_left(timeout)
        #: The pool the connection is for, and its host: told when it fails to open
        #: (note_failed_open).
        self._pool = pool
        self._host = host
        if binds and bounded is not None and bounded <= 0:
            if self._waited_on_a_failed_open():
                raise httpcore.ConnectTimeout(_FAILED_OPEN)
            raise httpcore.PoolTimeout(_POOL_FULL)
        self.bounded = bounded
        self._starved = (
            binds and timeout is not None and bounded is not None and bounded < timeout / 2
        )

    def _waited_on_a_failed_open(self) -> bool:
        """Whether the attempt's time went on a connection that failed to open (over
        HTTP/2 every request waits on the one being opened): the server's doing, a
        connect failure, not the pool's queue."""
        pool = self._pool() if self._pool is not None else None
        return pool is not None and failed_to_open_since(pool, current_call.get())

    def __enter__(self) -> float | None:
        return self.bounded

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, (httpcore.ConnectError, httpcore.ConnectTimeout)):
            if (
                self._starved
                and isinstance(exc, httpcore.ConnectTimeout)
                and not self._waited_on_a_failed_open()
            ):
                raise httpcore.PoolTimeout(
                    f"{_POOL_FULL}; the connect had too little time left: {exc}"
                ) from None
            note_failed_open(self._pool() if self._pool is not None else None, self._host)


def bounded_handshake(timeout: float | None) -> float | None:
    """The time a TLS handshake gets: ``timeout``, or the attempt's time left if less;
    with none left, a connect timeout (the connect took the attempt's time: a handshake
    given none would fail in the ssl module, with an error httpx does not know)."""
    bounded, binds, _ = time_left(timeout)
    if binds and bounded is not None and bounded <= 0:
        raise httpcore.ConnectTimeout("the attempt's time ran out before its TLS handshake")
    return bounded


class BoundedBackend(httpcore.NetworkBackend):
    """A network backend whose connections are :class:`BoundedStream`, for ``pool``."""

    def __init__(self, inner: httpcore.NetworkBackend, pool: _Pool | None = None) -> None:
        self.inner = inner
        self._pool: PoolRef = weakref.ref(pool) if pool is not None else None

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        with Connecting(timeout, self._pool, host) as bounded:
            stream = self.inner.connect_tcp(host, port, bounded, local_address, socket_options)
        return BoundedStream(stream, self._pool)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        with Connecting(timeout, self._pool) as bounded:
            stream = self.inner.connect_unix_socket(path, bounded, socket_options)
        return BoundedStream(stream, self._pool)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)
