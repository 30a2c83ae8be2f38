"""Finishing the clean-up of httpcore's pool that a cancel stopped halfway.

When a request ends, httpcore tidies its pool inside a shield from cancellation: it
closes the response, gives the connection back (or closes it) and takes the request out
of its queue. anyio's shield keeps anyio's own cancellations out, but not asyncio's
``Task.cancel()``, which ``asyncio.timeout`` and ``asyncio.wait_for`` use: a caller's
timeout that falls in that moment stops the clean-up halfway, and the pool keeps the
connection busy and the request queued for ever. Each time, one connection is lost, until
every request waits for one in vain (plain httpx alike; encode/httpcore#1093).

So when an attempt of retrysafe's async shell is cancelled from outside, it finishes that
clean-up itself (:func:`release_abandoned`): the attempt's request leaves the queue, and
any connection left busy with no request using it is closed. (The attempt's own time
limit waits for the shield to end instead: :mod:`retrysafe.attempt_watchdog`.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = [
    "MendingStream",
    "mend_when_closed",
    "release_abandoned",
    "stranded",
]


def stranded(connection: Any) -> bool:
    """Whether the pool would keep ``connection`` for ever if no request used it: it is
    neither idle nor closed (which httpcore reclaims) nor available (which it hands to
    the next request). Such as a connection made for a request and never opened, or one
    whose request's clean-up was cut halfway."""
    return not (connection.is_idle() or connection.is_closed() or connection.is_available())


async def release_abandoned(transport: object, response: httpx.Response | None) -> None:
    """After an attempt through ``transport`` (httpx's own async transport) was cancelled
    from outside, and its ``response`` (if it got one) closed: take the attempt's request
    out of the pool's queue if a cut clean-up left it there, and close the connections no
    request uses that the pool would otherwise keep for ever. (With no response, httpcore
    took the request out itself; a cut clean-up can only have left its connection.)"""
    stream = response.stream if response is not None else None
    await _release(transport, getattr(_pool_stream_of(stream), "_pool_request", None))


def _cut_clean_up(transport: object, stream: object) -> object:
    """After ``stream``, a response's stream from ``transport``, was closed (or its close
    raised): the pool's record of the request it answers if httpcore's clean-up of it was
    cut halfway, for :func:`_release` to finish; None if it went as usual or never began
    (a reader that stopped early: the caller's close does it). Asked only after a close
    that could have been cut (see :meth:`MendingStream.aclose`)."""
    pool_stream = _pool_stream_of(stream)
    if pool_stream is None or getattr(pool_stream, "_closed", None) is not True:
        return None
    ours = pool_stream._pool_request
    if ours in getattr(getattr(transport, "_pool", None), "_requests", ()):
        return ours  # (cut before the pool let the request go)
    # The pool let the request go: a finished clean-up, unless the cut fell in the
    # connection's own part of it (a failed read closes the connection's stream first),
    # leaving the connection busy for no one.
    connection = getattr(ours, "connection", None)
    return ours if connection is not None and stranded(connection) else None


#: How long a close waits for a clean-up of httpcore's, running in another task, to let
#: go of the connection (see :func:`_others_clean_up`).
OTHERS_CLEAN_UP_WAIT = 0.5


async def _others_clean_up(ours: object) -> BaseException | None:
    """Wait (at most :data:`OTHERS_CLEAN_UP_WAIT` seconds) for a clean-up of httpcore's
    that may be under way in another task on the connection of ``ours`` (the pool's record
    of a request whose clean-up looks cut, :func:`_cut_clean_up`), so that it is judged
    once that ends. Returns the cancel that came meanwhile, if one did, for the caller to
    raise once it has judged.

    A reader that drops a body's iterator unfinished leaves its closing to the event
    loop's finalizer of async generators, which runs httpcore's clean-up in a task of its
    own. A close of the response while that clean-up is suspended finds the stream closed
    and the request still queued, as a cut clean-up leaves them; finishing it then would
    take the request out from under httpcore, whose own removal would fail in that task.
    httpcore holds the connection's state lock at every await of its clean-up (unless a
    ``trace`` extension is set: its callbacks are awaited outside the lock), and a cut
    lets the lock go as the cancel passes; so while the lock is held, this waits for it.
    Over HTTP/2 the lock may be another's: a request starting on the connection holds it
    for a pass, and retrysafe's close of a stream holds it only while it closes the
    connection (:class:`~retrysafe.async_bounded_backend._AsyncResetOnClose`).

    asyncio's ``Task.cancel()`` (the caller's ``asyncio.timeout``) reaches into the wait
    despite its shield. Judged at that moment, the close would look cut even when the
    other task is about to finish the clean-up, so the wait goes on to its end and the
    cancel is handed back: it then comes at most :data:`OTHERS_CLEAN_UP_WAIT` late."""
    lock: Any = getattr(
        getattr(getattr(ours, "connection", None), "_connection", None), "_state_lock", None
    )
    from retrysafe.async_bounded_backend import lock_held

    if not lock_held(lock):
        return None
    import asyncio

    import anyio  # (loaded by now: httpcore's async pool uses it)

    interrupted: BaseException | None = None
    with anyio.move_on_after(OTHERS_CLEAN_UP_WAIT, shield=True) as waiting:
        while True:
            try:
                async with lock:
                    break
            except asyncio.CancelledError as cancel:
                if waiting.cancel_called:  # (the wait's own end: the scope takes it)
                    raise
                interrupted = interrupted or cancel
    return interrupted


async def _judge(transport: object, stream: object) -> None:
    """Finish the clean-up of ``stream`` (a response's, from ``transport``) if it was cut."""
    cut = _cut_clean_up(transport, stream)
    if cut is not None:
        await _release(transport, cut)


async def _release(transport: object, ours: object) -> None:
    """Take ``ours`` (the pool's record of a request, or None) out of ``transport``'s pool
    queue if it is still there, and close the connections no request uses that the pool
    would keep for ever. The pool's books are put right before the first await, so a
    second cancel can cut only the closing of those connections."""
    pool: Any = getattr(transport, "_pool", None)
    queue = getattr(pool, "_requests", None)
    connections = getattr(pool, "_connections", None)
    if not isinstance(queue, list) or not isinstance(connections, list):
        return
    with pool._optional_thread_lock:  # (a no-op in httpcore's async pool)
        left = ours is not None and ours in queue
        if left:
            queue.remove(ours)
        lost = [
            connection
            for connection in connections
            if stranded(connection) and not any(queued.connection is connection for queued in queue)
        ]
        if not left and not lost:
            return
        for connection in lost:
            connections.remove(connection)
        closing = list(pool._assign_requests_to_connections())
    import anyio  # (loaded by now: httpcore's async pool uses it)

    with anyio.CancelScope(shield=True):
        for connection in lost + closing:
            await connection.aclose()


class MendingStream(httpx.AsyncByteStream):
    """The stream of a response the async shell hands over unread (a streamed call's, or
    any through the drop-in transport, whose body httpx reads afterwards): it passes the
    body on, and if a cancel from outside cuts httpcore's clean-up as it is closed (or as
    a failed read closes it), finishes that clean-up (:func:`_cut_clean_up`), once any
    clean-up of the connection under way in another task has ended
    (:func:`_others_clean_up`)."""

    def __init__(self, inner: httpx.AsyncByteStream, transport: object) -> None:
        self._inner = inner
        self._transport = transport

    def __aiter__(self) -> AsyncIterator[bytes]:
        # The body goes to its reader through no layer of this stream's own. A failed
        # read closes httpcore's pool stream there (where a cancel can cut it), and httpx,
        # which closes a response whose read failed, then comes to aclose() below.
        return self._inner.__aiter__()

    async def aclose(self) -> None:
        inner = self._inner
        # The usual close: of httpx's own stream over httpcore's pool stream, still open.
        # A cancel that cuts the pool's clean-up comes out of that close as an exception
        # (httpx passes it on, and anyio's shield does not swallow asyncio's cancels), so
        # a close that ends without one ran the clean-up to its end: nothing to check.
        # Every other close is checked: one that raised, or of a stream closed already
        # (a failed read closes it, where a cancel may have cut it).
        still_open = getattr(getattr(inner, "_httpcore_stream", None), "_closed", None) is False
        try:
            await inner.aclose()
        except BaseException:
            still_open = False
            raise
        finally:
            looks_cut = None if still_open else _cut_clean_up(self._transport, inner)
            if looks_cut is not None:
                interrupted = await _others_clean_up(looks_cut)
                await _judge(self._transport, inner)
                if interrupted is not None:  # (a cancel that came while it waited)
                    raise interrupted


def mend_when_closed(response: httpx.Response, transport: object) -> None:
    """Hand ``response`` (from httpx's own async ``transport``) over with a
    :class:`MendingStream` if its body is still unread (a body already read, or kept as
    bytes, has no pool clean-up left to cut)."""
    stream = response.stream
    if not response.is_stream_consumed and type(stream) is not httpx.ByteStream:
        assert isinstance(stream, httpx.AsyncByteStream)
        response.stream = MendingStream(stream, transport)


#: The attributes a response's stream keeps its inner stream in: retrysafe's own
#: (kept_body, MendingStream), then httpx's (its transport's response stream).
_INNER_STREAM = ("_inner", "_httpcore_stream")


def _pool_stream_of(stream: object) -> Any:
    """The stream of httpcore's pool that ``stream`` (a response's) wraps, which keeps the
    pool's own record of the request it answers; None if not found. (Not found through
    the request: one ``httpx.Request`` sent twice at once is two records in the pool.)"""
    for _ in range(4):
        if stream is None:
            return None
        if getattr(stream, "_pool_request", None) is not None:
            return stream
        inner = None
        for name in _INNER_STREAM:
            inner = getattr(stream, name, None)
            if inner is not None:
                break
        stream = inner
    return None
