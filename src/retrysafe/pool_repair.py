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


async def release_abandoned(transport: object, request: httpx.Request) -> None:
    """After an attempt of ``request`` through ``transport`` (httpx's own async transport)
    was cancelled from outside, and its response closed: take the request out of the
    pool's queue if a cut clean-up left it there, and close the connections no request
    uses that the pool would otherwise keep for ever."""
    pool: Any = getattr(transport, "_pool", None)
    queue = getattr(pool, "_requests", None)
    connections = getattr(pool, "_connections", None)
    if not isinstance(queue, list) or not isinstance(connections, list):
        return
    extensions = request.extensions  # (the dict httpx hands httpcore as it is)
    with pool._optional_thread_lock:  # (a no-op in httpcore's async pool)
        left = [queued for queued in queue if _extensions_of(queued) is extensions]
        for queued in left:
            queue.remove(queued)
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


def _extensions_of(queued: object) -> object:
    return getattr(getattr(queued, "request", None), "extensions", None)
