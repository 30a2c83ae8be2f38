"""Bounding every byte of a sync attempt, from connect to the last body byte.

Socket timeouts are per operation: a server that trickles its headers or body
one byte at a time never trips them. The sync shell therefore puts the
attempt's end in a context variable, and wraps the network backend of httpx's
own connection pool so that every connect, read and write it makes in that
context gets at most the time left.

When the attempt's time runs out during a read, :class:`AttemptDeadlineReached`
is raised. It is a ``BaseException`` on purpose, like a cancellation: httpcore
then treats it as this request being cancelled, so over HTTP/2 only this
request ends and the other requests on the shared connection carry on; an
``Exception`` would fail them all. (httpcore leaves the cancelled request's
stream open, so the connection is then retired: see :func:`retire`.) The
shell turns it into an ordinary timeout outcome at once. Connects and writes
that run out of time raise httpcore's own timeouts (nothing half-read is left).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

import httpx

from retrysafe.classify import AttemptTimedOut

if TYPE_CHECKING:
    import httpcore

__all__ = [
    "UNSENT_IN_TIME",
    "AttemptDeadlineReached",
    "CopyWatcher",
    "HeadersNoted",
    "RunningCall",
    "SharedStream",
    "bound_transport",
    "connection_carrying",
    "current_call",
    "current_copy",
    "cut_outcome",
    "failed_to_open_since",
    "note_failed_open",
    "may_speak_http2",
    "note_headers_sent",
    "note_sent",
    "opening_connection",
    "lost_while_waiting",
    "nothing_sent_yet",
    "notes_first_writes",
    "read_timed_out",
    "reset_if_open",
    "retire",
    "retire_for_cut",
    "retire_if_full",
    "retire_stream_of",
    "time_left",
]


class RunningCall(Protocol):
    """The call running in this context (task or thread): what a read needs to know."""

    #: The monotonic time (``time.monotonic()``) by which its attempt in flight must
    #: end, or None between attempts (a streamed body the caller reads is not bounded).
    attempt_ends_at: float | None
    #: When its attempt in flight first wrote its request to the network
    #: (``time.monotonic()``; None before): the time before it went on waiting for a
    #: connection, time the dependency was not given (set by the network stream).
    attempt_sent_at: float | None
    #: The HTTP/2 stream its attempts last wrote to (set by the network stream), to
    #: retire its connection when an attempt is cut from outside (retire_stream_of).
    shared_stream: SharedStream | None
    #: The per-phase timeouts the caller gave (httpx's ``timeout=``), before the shell
    #: bounded them by the attempt: a read that timed out names whose limit it was.
    caller_timeouts: dict[str, Any]
    #: How long past its limit the read that timed out ended (seconds; set by the network
    #: stream as it raises): the event loop, or the process, ran late, and the dependency
    #: was not given that time.
    late_by: float


#: The retrysafe call running in this context. One variable serves two needs: a call
#: made inside it is nested, and every read made for it is bounded by its attempt.
current_call: contextvars.ContextVar[RunningCall | None] = contextvars.ContextVar(
    "retrysafe_current_call", default=None
)


class Severable(Protocol):
    """A connection a hedged copy is sent on, which can be cut from another thread."""

    def sever(self) -> None: ...


class CopyWatcher(Protocol):
    """A hedged copy in flight.

    On a sync transport it is told of each connection it writes to, so that when it
    loses, its connection can be cut and the server sees the disconnect (a blocked
    socket read cannot otherwise be ended from outside).

    A copy that waited for a way to send (a free HTTP/2 stream, a pooled connection) is
    often given it as a sibling copy's request ends, with that sibling's answer not yet
    judged: it asks whether it may still send (:meth:`may_send`), and sends nothing if
    that answer won. A copy tells when its own answer is in hand (:meth:`answering`): as
    its body closes, which frees its stream or connection.
    """

    def watch(self, connection: Severable) -> None: ...

    def answering(self) -> None:
        """Its answer is in hand (its body closes, freeing its stream or connection), to
        be judged by its round: a sibling given its way to send meanwhile waits for that."""

    def may_send(self) -> bool:
        """(sync) Wait while a sibling's answer is being judged; whether this copy may
        still send (False: it lost)."""
        return True

    async def may_send_async(self) -> bool:
        """The async :meth:`may_send`."""
        return True


#: The hedged copy this thread or task sends, if any (only hedging calls set it).
current_copy: contextvars.ContextVar[CopyWatcher | None] = contextvars.ContextVar(
    "retrysafe_current_copy", default=None
)


class SharedStream(Protocol):
    """A network stream that knows whether it carries HTTP/2, and (weakly) its pool."""

    #: It carries HTTP/2: several requests at once on one connection.
    shared: bool
    #: A weak reference to the httpcore pool its connection is in, if known.
    pool: Any


#: HTTP/2's error code for a stream its client no longer wants (RFC 9113, CANCEL).
_CANCEL: Final = 0x8


def reset_if_open(connection: Any, stream_id: int) -> None:
    """Reset the HTTP/2 stream ``stream_id`` of httpcore's ``connection`` if h2 still has
    it open: its response is being closed before its end (the caller left its body, or
    an attempt was cut). Called as httpcore closes the response (``_response_closed``).

    httpcore sends no ``RST_STREAM`` then, and drops what the server goes on sending
    for that stream without acknowledging it, so each such stream took its share of the
    connection's flow-control window for good: after a few abandoned bodies the server
    could send nothing more there, and every request on the connection timed out
    (review74). Reset, the server stops sending, and h2 acknowledges what was already on
    its way (the reset goes out with the connection's next write). This reads httpcore's
    and h2's private state; where that fails, nothing is done.
    """
    try:
        state = connection._h2_state
        stream = state.streams.get(stream_id)
        if stream is not None and not stream.closed:
            state.reset_stream(stream_id, error_code=_CANCEL)
    except Exception:  # (a state it cannot read or reset: left as httpcore leaves it)
        pass


def retire(stream: SharedStream) -> None:
    """Let no new request onto the HTTP/2 connection ``stream`` carries, once the
    streams its cut requests left open fill half of what the server allows, or the
    streams open there reach it.

    A cut request's HTTP/2 stream stays open (httpcore does not reset the stream of
    a request it abandons) until the server ends it, which a server that hangs never
    does; at the server's limit of concurrent streams, every request on the
    connection would fail. (:func:`reset_if_open` resets it as httpcore closes the
    response, just after this runs; this stays for a stream it cannot reset, and for
    the streams the server still counts until the reset reaches it.) So before that,
    the connection is marked the way httpcore marks one that failed: the requests on
    it go on, new ones open another connection, and the pool closes it once it is
    idle. (A losing hedged copy's stream usually ends soon after, when the server
    answers: the connection is kept.)

    At the limit itself, the cut gives httpcore back a slot whose stream h2 still
    counts: a request waiting for a free stream would get it and be refused by h2
    (retried as never sent: ``stream_limit``). Retired now, the connection sends that
    retry elsewhere.

    This reads httpcore's and h2's private state; where it is missing or cannot be
    read, the connection is retired at once.
    """
    connection = connection_carrying(stream)
    if hasattr(connection, "_connection_error") and _worth_retiring(connection):
        connection._connection_error = True


def retire_for_cut(stream: SharedStream) -> None:
    """:func:`retire`, for a read or a wait to read in this context cut at its time: only
    if the call here has sent its request (noted by then, over HTTP/2: see
    :class:`HeadersNoted`), so that a stream of its may be left open. A closing body's
    read of its rest (``body_watch``) sends nothing, and its stream is reset as it
    closes: with a server allowing one or two streams, it retired the connection each
    time (review78)."""
    call = current_call.get()
    if call is None or call.attempt_sent_at is not None:
        retire(stream)


def connection_carrying(stream: SharedStream) -> Any:
    """The httpcore HTTP connection (HTTP/1.1 or HTTP/2) whose network stream is
    ``stream``, found in its pool; None if there is none (closed, or not known)."""
    pool = stream.pool() if stream.pool is not None else None
    if pool is None:
        return None
    for connection in pool.connections:
        inner: Any = getattr(connection, "_connection", None)
        if getattr(inner, "_network_stream", None) is stream:
            return inner
    return None


def _worth_retiring(connection: Any) -> bool:
    """Whether ``connection`` should take no new request: its streams that no request
    waits on any more (this cut's own included) fill half the server's limit, or its
    open streams reach the limit; True when that cannot be told."""
    try:
        waited_on = connection._events
        opened, limit = _open_streams_and_limit(connection)
        abandoned = sum(1 for number in opened if number not in waited_on)
    except Exception:  # httpcore's or h2's insides changed: retire, to be safe
        return True
    return (abandoned + 1) * 2 >= limit or len(opened) >= limit


def _open_streams_and_limit(connection: Any) -> tuple[list[int], int]:
    """The numbers of the streams the client opened that are open on the HTTP/2
    ``connection`` (httpcore's), and the server's limit of concurrent streams."""
    state = connection._h2_state
    # (a snapshot: another thread may be moving the connection's state along)
    streams = list(state.streams.items())
    opened = [number for number, each in streams if number % 2 == 1 and each.open]
    return opened, int(state.remote_settings.max_concurrent_streams)


def retire_if_full(connection: Any) -> None:
    """Retire the HTTP/2 ``connection`` (httpcore's) if the streams open there already
    fill the server's limit; called as a request gets one of httpcore's stream slots
    there.

    httpcore counts the slots, and h2 the open streams. They part when a cut request's
    stream stays open (see :func:`retire`) and the server then lowers its limit: h2
    counts that stream against the new limit, httpcore gave its slot back. A request
    given a slot then is refused by h2 before it is sent (``stream_limit``); retired
    now, the connection sends its retry elsewhere. Where the state cannot be read,
    nothing is done (the request goes as httpcore would send it)."""
    try:
        opened, limit = _open_streams_and_limit(connection)
    except Exception:
        return
    if len(opened) >= limit and hasattr(connection, "_connection_error"):
        connection._connection_error = True


def retire_stream_of(call: RunningCall) -> None:
    """Retire the HTTP/2 connection ``call``'s attempt last wrote to, if any: the
    attempt was cut from outside the network stream (a time limit, a cancellation), so
    its stream was left open too (see :func:`retire`)."""
    stream = call.shared_stream
    if stream is not None:
        call.shared_stream = None
        retire(stream)


class AttemptDeadlineReached(BaseException):
    """The attempt in this context ran out of time in the middle of a read.

    ``stalled``: a single read waited out its whole timeout (the server went quiet: a
    read timeout); otherwise bytes kept coming, too slowly (a trickle). ``callers``: that
    timeout was the caller's own (httpx's ``timeout=``), shorter than what the attempt had
    left, not one the shell lowered to the attempt's time; ``waited``: its seconds.
    """

    def __init__(
        self, *, stalled: bool, callers: bool = False, waited: float | None = None
    ) -> None:
        super().__init__("the attempt ran out of time while reading the response")
        self.stalled = stalled
        self.callers = callers
        self.waited = waited

    def as_outcome(self) -> Exception:
        """The ordinary timeout this stands for, for the engine to classify, its message
        naming the limit that ran out (one naming attempt_timeout for httpx's own sent
        whoever debugged it to raise a setting that was not the one that ran out)."""
        if self.stalled and self.callers:
            waited = f" {self.waited:g} s" if self.waited is not None else ""
            return httpx.ReadTimeout(
                f"the server sent nothing for the whole read timeout{waited} (httpx's "
                "timeout=, the client's or the call's; the attempt still had time left)"
            )
        if self.stalled:
            return httpx.ReadTimeout(
                "the server sent nothing before the attempt's time ran out "
                "(retrysafe's RetryPolicy attempt_timeout / deadline)"
            )
        return AttemptTimedOut(
            "the response did not arrive within the attempt's time "
            "(retrysafe's RetryPolicy attempt_timeout / deadline)"
        )


def read_timed_out(
    binds: bool, waited: float | None, started: float | None
) -> AttemptDeadlineReached:
    """What a read started at ``started`` (``time.monotonic()``; None: not told) that
    could wait ``waited`` seconds in an attempt and timed out stands for (``binds``: the
    attempt's end was its limit): see :class:`AttemptDeadlineReached`. The call is told
    how late the read ended past its limit (``late_by``)."""
    callers = False
    call = current_call.get()
    if call is not None:
        if waited is not None and started is not None:
            call.late_by = max(0.0, time.monotonic() - started - waited)
        if not binds:
            read = call.caller_timeouts.get("read")
            callers = isinstance(read, (int, float)) and waited is not None and waited >= read
    return AttemptDeadlineReached(stalled=not binds, callers=callers, waited=waited)


def time_left(timeout: float | None) -> tuple[float | None, bool, bool]:
    """The timeout to use now; whether the attempt's deadline binds it; and whether an
    attempt is in flight in this context at all."""
    call = current_call.get()
    ends_at = call.attempt_ends_at if call is not None else None
    if ends_at is None:
        return timeout, False, False
    left = ends_at - time.monotonic()
    if timeout is None or left < timeout:
        return max(0.0, left), True, True
    return timeout, False, True


#: What an attempt that ran out of time before its request was sent fails with (as a
#: pool timeout: here for a write, in the drive for an attempt cut from outside).
UNSENT_IN_TIME: Final = (
    "the attempt's time ran out waiting for a connection, before its request was sent "
    "(a full connection pool: see httpx.Limits(max_connections=...))"
)


def nothing_sent_yet() -> httpcore.PoolTimeout | None:
    """For a write that finds its attempt's time gone: a pool timeout if the attempt has
    sent nothing yet (it was handed a kept-alive connection with no time left, its time
    spent waiting for it: never sent, and no evidence against the server); else None."""
    call = current_call.get()
    if call is None or call.attempt_sent_at is not None:
        return None
    import httpcore  # (loaded by now: a network stream is writing)

    return httpcore.PoolTimeout(UNSENT_IN_TIME)


def lost_while_waiting(way: str) -> httpcore.PoolTimeout:
    """What a hedged copy raises when it is given ``way`` to send (a free HTTP/2 stream, a
    connection in the pool) after a sibling won its round: it gives it back unused, and
    sends nothing (see :class:`CopyWatcher`)."""
    import httpcore  # (loaded by now: a pool or a connection is handing out its way)

    return httpcore.PoolTimeout(
        f"this hedged copy lost while it waited for {way}; nothing was sent"
    )


#: When a connection of each httpcore pool last failed to open (``time.monotonic()``), by
#: the host it was for, for :func:`cut_outcome`: the pool drops it at once, before the
#: requests that waited for it are cut. The latest first-failing hosts only (a client
#: meeting ever new unreachable hosts grew it by one each: trial81).
_failed_opens: weakref.WeakKeyDictionary[Any, dict[str, float]] = weakref.WeakKeyDictionary()
#: How many hosts :data:`_failed_opens` keeps per pool, the latest to fail.
_FAILED_HOSTS_KEPT: Final = 256


def note_failed_open(pool: object | None, host: str | None = None) -> None:
    """A connection of ``pool`` (an httpcore pool) to ``host`` failed to open: its connect
    or TLS handshake failed or timed out."""
    if pool is not None:
        by_host = _failed_opens.get(pool)
        if by_host is None:
            by_host = _failed_opens[pool] = {}
        key = host or ""
        by_host.pop(key, None)  # (to the end: the dict runs from the oldest failure)
        by_host[key] = time.monotonic()
        if len(by_host) > _FAILED_HOSTS_KEPT:
            with contextlib.suppress(StopIteration, KeyError, RuntimeError):
                del by_host[next(iter(by_host))]  # (another thread may be at it too)


#: The connections being opened now (a TCP connect or a TLS handshake under way), by
#: httpcore pool, then host: how many. A request waiting on a connection being opened can
#: be cut before the opening request is: httpcore then drops the connection from its pool
#: at once (a cancelled wait marks it failed), and the opener has not yet noted its
#: failure (:func:`cut_outcome`).
_opening_connections: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def opening_connection(
    pool: object | None, host: str | None, bounded: float | None
) -> Iterator[None]:
    """Note, for its duration, the open (TCP connect or TLS handshake) of a connection of
    ``pool`` to ``host``, given ``bounded`` seconds. Async only: one event loop's tasks
    change the count.

    An open cut from outside after running its whole time (by the attempt's hard end,
    before its own timeout was raised: a loop late by more than the 50 ms between them,
    and the outer cut wins) timed out all the same: it is noted as a failed open, and the
    requests waiting on it are judged by that (:func:`cut_outcome`). Taken for waits in
    the client's own pool, a host that hangs as connections open never opened the
    breaker. (An open that fails with an error of its own is the caller's to judge.)"""
    started = time.monotonic()
    by_host = _opening_connections.setdefault(pool, {}) if pool is not None else {}
    key = host or ""
    by_host[key] = by_host.get(key, 0) + 1
    try:
        yield
    except BaseException as error:
        cut = not isinstance(error, Exception)
        if cut and bounded is not None and time.monotonic() - started >= bounded:
            note_failed_open(pool, host)
        raise
    finally:
        left = by_host[key] - 1
        if left:
            by_host[key] = left
        else:
            del by_host[key]


def _open_under_way(pool: object, host: str | None) -> bool:
    """Whether a connection of ``pool`` to ``host`` (None: any) is being opened."""
    by_host = _opening_connections.get(pool)
    if not by_host:
        return False
    return host is None or host in by_host


def cut_outcome(transport: object, call: RunningCall) -> Exception:
    """What an attempt cut from outside by its time limit failed with: the attempt's
    timeout; or a connect timeout when it was never sent while a connection of
    ``transport``'s pool to its host was being opened, or failed to open during the
    attempt.

    Over HTTP/2 every request waits for the one connection being opened; a host that
    never completes it (a TCP connect or TLS handshake that hangs) is as down as one that
    refuses it, and the breaker must hear it from every call so cut. Taken as a wait in
    the client's own queue (the drive's pool timeout, for an attempt cut before it was
    sent), the outage opened nothing and each call blamed its pool. (Only its own host's:
    one pool serves every host a client calls, and another host's hanging open is no news
    of this one.)"""
    if call.attempt_sent_at is None:
        pool = getattr(transport, "_pool", None)
        host = _host_of(call)
        if pool is not None and (
            _unopened_connection(pool, host)
            or _open_under_way(pool, host)
            or failed_to_open_since(pool, call)
        ):
            return httpx.ConnectTimeout(
                "the attempt's time ran out waiting for its connection to the server to open"
            )
    return AttemptTimedOut("the attempt did not finish in its time")


def _host_of(call: object) -> str | None:
    """The host ``call``'s request is for, as httpcore connects to it (an international
    name in its ASCII form); None where that cannot be told."""
    request = getattr(call, "request", None)
    if not isinstance(request, httpx.Request):
        return None
    return request.url.raw_host.decode("ascii", "replace")


def failed_to_open_since(pool: object, call: RunningCall | None) -> bool:
    """Whether a connection of ``pool`` to ``call``'s host failed to open since ``call``'s
    attempt in flight started: the time it waited for a connection went on one that never
    opened. (A call whose host cannot be told: a connection to any host.)"""
    started_at = getattr(call, "attempt_started_at", None)
    by_host = _failed_opens.get(pool) if pool is not None else None
    if by_host is None or started_at is None:
        return False
    host = _host_of(call)
    if host is None:
        return any(failed_at >= started_at for failed_at in by_host.values())
    failed_at = by_host.get(host)
    return failed_at is not None and failed_at >= started_at


def _unopened_connection(pool: object, host: str | None) -> bool:
    """Whether ``pool`` (httpcore's) holds a connection to ``host`` (None: any) being
    opened; False where that cannot be told."""
    try:
        wanted = None if host is None else host.encode("ascii", "replace")
        return any(
            getattr(connection, "_connection", False) is None
            and (
                wanted is None
                or getattr(connection, "_origin", None) is None
                or connection._origin.host == wanted
            )
            for connection in getattr(pool, "connections", ())
        )
    except Exception:  # (httpcore's insides changed)
        return False


def note_sent() -> None:
    """The attempt in flight in this context writes its request now: note when, the
    first time (see :attr:`RunningCall.attempt_sent_at`), whether or not the attempt
    has an end (an attempt with none still tells whether its request went out)."""
    call = current_call.get()
    if call is not None and call.attempt_sent_at is None:
        call.attempt_sent_at = time.monotonic()


class HeadersNoted:
    """An HTTP/2 connection's ``h2`` ``send_headers``, which then notes that the attempt
    in flight in this context sends its request now (:func:`note_sent`).

    Over HTTP/2 a request's HEADERS go into h2's buffer here, in its own thread or task,
    and any request's write may then carry them: this, not its own write, is when it may
    have been sent. Before it, the request only waited (for the connection, its turn,
    a free stream): time the dependency was not given.

    It never refuses a request, even one whose time is gone: httpcore has given it a
    stream number by now, which h2 hands out again to the next request until these
    HEADERS open it, and two requests on one stream break the connection. Such a
    request goes out and ends at once, having given the server no time: the breaker
    does not count it once it has seen healthy answers take longer (see the breaker's
    cut_short), and only a request safe to repeat is sent again.

    HEADERS h2 refuses (an invalid header) never went: the note is taken back. h2 may
    have fed the headers before the bad one to its header compression already, so the
    server's table and the client's no longer agree: the connection takes no new
    request, and a request already on it is sent nowhere there, but handed back to the
    pool (``ConnectionNotAvailable``), which sends it on another connection (review77:
    the server could not decode the next one). One refused at the stream limit is
    refused before any of that, and leaves the connection as it was.
    """

    __slots__ = ("_connection", "_send", "opening", "out_of_step")

    def __init__(self, send: Any, connection: Any) -> None:
        self._send = send
        self._connection = weakref.ref(connection)
        #: A sync connection's turn to open a stream, which these HEADERS end (see
        #: bounded_backend._Opening); None elsewhere.
        self.opening: Any = None
        #: h2 refused HEADERS here: its header compression and the server's disagree.
        self.out_of_step = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.out_of_step:
            opening = self.opening
            if opening is not None:
                opening.end_if_taken()
            import httpcore  # (loaded by now: a connection is sending)

            raise httpcore.ConnectionNotAvailable()
        call = current_call.get()
        noted = call is not None and call.attempt_sent_at is None
        note_sent()  # (before: another request's write may carry these HEADERS at once)
        try:
            return self._send(*args, **kwargs)
        except BaseException as refused:
            if noted and call is not None:
                call.attempt_sent_at = None  # (refused: never sent)
            if type(refused).__name__ != "TooManyStreamsError":
                self.out_of_step = True
                connection = self._connection()
                if connection is not None:
                    connection._connection_error = True  # (as httpcore marks a failed one)
            raise
        finally:
            opening = self.opening
            if opening is not None:
                opening.end_if_taken()


def note_headers_sent(stream: SharedStream) -> None:
    """Make the HTTP/2 connection ``stream`` carries note each request's sending as its
    HEADERS go into h2 (:class:`HeadersNoted`). Called as the connection writes its
    preface, before any request on it can send its HEADERS. (Where httpcore does not send
    HEADERS that way, nothing is watched, and its attempts count as sent from their
    start: :func:`notes_first_writes`.)

    Where httpcore sends HEADERS as this expects, the send loops take an attempt that was
    not noted as never sent (:func:`notes_first_writes`); so a connection that cannot be
    watched must carry nothing, or a request another's write carried would be taken as
    unsent and a POST sent twice. It then fails here, before its preface, as a connect
    error (nothing sent). That cannot happen with httpcore's pools, which list every
    connection they make."""
    connection = connection_carrying(stream)
    state: Any = getattr(connection, "_h2_state", None)
    send = getattr(state, "send_headers", None)
    if send is None:
        if _h2_headers_noted():
            import httpcore  # (loaded by now: a network stream is writing)

            raise httpcore.ConnectError(
                "retrysafe could not find this HTTP/2 connection in its pool, to tell when "
                "each request on it is sent; nothing was sent on it (please report this; "
                "http2=False avoids it)"
            )
    elif not isinstance(send, HeadersNoted):
        state.send_headers = HeadersNoted(send, connection)
    send_data = getattr(state, "send_data", None)
    if send_data is not None and not isinstance(send_data, _DataInTime):
        state.send_data = _DataInTime(send_data)


class _DataInTime:
    """An HTTP/2 connection's ``h2`` ``send_data``, which first checks that the attempt in
    flight in this context still has time: a body goes out a frame at a time, and a
    write on a shared connection is not cut by one attempt (it may carry every
    request's frames), so this is where an upload stops at its attempt's end. (A sync
    8 MiB upload to a server reading slowly ran 5.5 s past a 2 s deadline: trial79.)

    Raising here leaves h2's state as it was: httpcore then closes the request's stream,
    which retrysafe resets (see :func:`reset_if_open`)."""

    __slots__ = ("_send",)

    def __init__(self, send: Any) -> None:
        self._send = send

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        left, binds, _ = time_left(None)
        if binds and left is not None and left <= 0:
            import httpcore  # (loaded by now: a connection is sending)

            raise httpcore.WriteTimeout(
                "the attempt's time ran out before the request's body was all sent"
            )
        return self._send(*args, **kwargs)


#: Whether httpcore's HTTP/2 connections send HEADERS as note_headers_sent expects (None:
#: not looked at yet).
_headers_noted_by_h2: bool | None = None


def _h2_headers_noted() -> bool:
    """Whether httpcore's HTTP/2 connections send each request's HEADERS through their
    ``_h2_state.send_headers``, as :func:`note_headers_sent` needs (looked at once)."""
    global _headers_noted_by_h2
    if _headers_noted_by_h2 is None:
        try:
            from httpcore._async.http2 import AsyncHTTP2Connection
            from httpcore._sync.http2 import HTTP2Connection
        except ImportError:
            _headers_noted_by_h2 = False
        else:
            _headers_noted_by_h2 = all(
                {"_h2_state", "send_headers"} <= set(kind._send_request_headers.__code__.co_names)
                for kind in (HTTP2Connection, AsyncHTTP2Connection)
            )
    return _headers_noted_by_h2


def may_speak_http2(transport: object) -> bool:
    """Whether ``transport``'s httpcore pool may open HTTP/2 connections (``http2=True``)."""
    return getattr(getattr(transport, "_pool", None), "_http2", False) is True


def notes_first_writes(transport: object) -> bool:
    """Make ``transport``'s connections honour the attempt deadline (:func:`bound_transport`),
    and say whether they then tell surely when each attempt first writes its request
    (:attr:`RunningCall.attempt_sent_at`), so that one that wrote nothing was never sent:
    httpx's own transport over HTTP/1.1; over HTTP/2 too where httpcore's connections send
    HEADERS as :func:`note_headers_sent` expects (one request's write may carry another's
    frames, so there the HEADERS going into h2 are noted, not the writes)."""
    return bound_transport(transport) and (not may_speak_http2(transport) or _h2_headers_noted())


def bound_transport(transport: object) -> bool:
    """Make ``transport``'s connections honour the attempt deadline; False if it cannot.

    Works on httpx's own ``HTTPTransport`` (and its proxy pools), whose httpcore
    pool makes every connection through one network backend. Other transports
    (``MockTransport``, WSGI, custom ones) are left as they are.
    """
    pool = getattr(transport, "_pool", None)
    if pool is None:
        return False
    # httpx loads httpcore only once a transport exists; so it is loaded by now.
    import httpcore

    from retrysafe.async_bounded_backend import AsyncBoundedBackend
    from retrysafe.bounded_backend import BoundedBackend

    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, (BoundedBackend, AsyncBoundedBackend)):
        return True
    from retrysafe.pool_wait import bound_pool_waits

    if isinstance(backend, httpcore.NetworkBackend):
        bound_pool_waits(pool)  # (its waits for a connection: no reads to bound)
        pool._network_backend = BoundedBackend(backend, pool)
        return True
    if isinstance(backend, httpcore.AsyncNetworkBackend):
        bound_pool_waits(pool)  # (its waits for a connection give up cleanly)
        pool._network_backend = AsyncBoundedBackend(backend, pool)
        return True
    return False
