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

from typing import Any

import httpx

__all__ = ["release_abandoned", "stranded"]


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
    pool: Any = getattr(transport, "_pool", None)
    queue = getattr(pool, "_requests", None)
    connections = getattr(pool, "_connections", None)
    if not isinstance(queue, list) or not isinstance(connections, list):
        return
    with pool._optional_thread_lock:  # (a no-op in httpcore's async pool)
        ours = _pool_request_of(response)
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


#: The attributes a response's stream keeps its inner stream in: retrysafe's own
#: (kept_body), then httpx's (its transport's response stream).
_INNER_STREAM = ("_inner", "_httpcore_stream")


def _pool_request_of(response: httpx.Response | None) -> object:
    """The pool's own record of the request ``response`` answers (httpcore's pool stream
    keeps it), found through the streams wrapping it; None if not found. (Not by the
    request: one ``httpx.Request`` sent twice at once is two records in the pool.)"""
    stream: object = response.stream if response is not None else None
    for _ in range(4):
        if stream is None:
            return None
        pool_request = getattr(stream, "_pool_request", None)
        if pool_request is not None:
            return pool_request
        stream = next(
            (inner for name in _INNER_STREAM if (inner := getattr(stream, name, None))), None
        )
    return None
