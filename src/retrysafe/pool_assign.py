"""httpcore's pool matching requests with connections: cheap under load, and closing no
connection a request holds.

Whenever a request joins or leaves httpcore's pool, the pool matches its queued requests
with connections (``_assign_requests_to_connections``; under the pool's lock in a sync
pool). Under load that matching is where the time goes, for three reasons, and this
module mends them for the pools retrysafe's transports wrap:

- **It scans every connection for every queued request**, each time, even when the pool
  is full and busy and none of them can be matched. A free HTTP/1.1 connection is handed
  to every request waiting for its origin; all but one find it taken, queue again and
  match again. With hundreds of requests queued that is quadratic work each time one
  ends: 400 async tasks on 100 connections spent most of their run there, the event loop
  lagging over a second (and so timing out connects), and sync threads queue behind the
  lock the matching holds. Here, once the pool is full with no connection idle and none
  available for an origin, the origin's other queued requests are passed over at once:
  nothing later in the same matching can change that.
- **Its keep-alive limit counts every connection, not the idle ones** (httpcore 1.0.9
  compares ``max_keepalive_connections`` with the number of connections): with more
  connections than the limit (httpx's default keeps 20 of 100), every connection that
  goes idle is closed, and the next request opens a new one. Here the idle connections
  are counted, as httpx documents the limit: at most that many are kept idle.
- **It may close a connection handed to a request that has not started on it** (which
  still looks idle): as surplus keep-alive, or to make room for another origin. That
  request then finds it closed and queues again, or, in a sync pool where its thread
  started on it meanwhile, waits on a closed socket until its read timeout
  (encode/httpcore#1110). Here no connection a request holds is closed as idle.

Every other rule stays httpcore's: closed and expired connections are dropped, a
connection available for a request's origin is handed to it (to each request of that
origin, as httpcore does, the first to start on it using it), a new connection is made
per request while the pool has room, and an idle connection of another origin is
closed to make room. A plain httpx client's pool keeps httpcore's matching.
"""

from __future__ import annotations

from typing import Any

__all__ = ["match_cheaply"]

#: Marks httpcore's method once replaced, so it is replaced only once.
_REPLACED = "_retrysafe_matching"


def match_cheaply(pool_class: Any, pools: Any) -> None:
    """Replace ``pool_class._assign_requests_to_connections`` (httpcore's sync or async
    pool) by :func:`matching`, for the pools in ``pools`` (a set-like of the pools
    retrysafe wraps; others keep httpcore's); once."""
    original = pool_class._assign_requests_to_connections
    if getattr(original, _REPLACED, False):
        return

    def assign_requests_to_connections(self: Any) -> list[Any]:
        if self not in pools:
            return original(self)  # type: ignore[no-any-return]
        return matching(self)

    setattr(assign_requests_to_connections, _REPLACED, True)
    assign_requests_to_connections.__doc__ = original.__doc__
    pool_class._assign_requests_to_connections = assign_requests_to_connections


def matching(pool: Any) -> list[Any]:
    """httpcore's matching of ``pool``'s queued requests with its connections, mended as
    the module's docstring says; the connections to close, as httpcore's returns them."""
    closing: list[Any] = []
    connections: list[Any] = pool._connections
    # A connection handed to a request that has not started on it yet looks idle.
    held = {id(pool_request.connection) for pool_request in pool._requests}
    idle_kept = 0
    for connection in list(connections):
        if connection.is_closed():
            connections.remove(connection)
        elif connection.has_expired():
            connections.remove(connection)
            closing.append(connection)
        elif connection.is_idle() and id(connection) not in held:
            idle_kept += 1
            if idle_kept > pool._max_keepalive_connections:
                connections.remove(connection)
                closing.append(connection)

    stuck: set[tuple[bytes, bytes, int]] = set()  # origins nothing can take in this pass
    for pool_request in list(pool._requests):
        if not pool_request.is_queued():
            continue
        origin = pool_request.request.url.origin
        key = (origin.scheme, origin.host, origin.port)
        if key in stuck:
            continue
        available = next(
            (c for c in connections if c.can_handle_request(origin) and c.is_available()),
            None,
        )
        if available is not None:
            pool_request.assign_to_connection(available)
            held.add(id(available))
        elif len(connections) < pool._max_connections:
            connection = pool.create_connection(origin)
            connections.append(connection)
            pool_request.assign_to_connection(connection)
            held.add(id(connection))
        else:
            idle = next((c for c in connections if c.is_idle() and id(c) not in held), None)
            if idle is None:
                # Full, none idle, none available for this origin: no later request of
                # it can be matched in this pass either (nothing below makes room, or a
                # connection idle or available).
                stuck.add(key)
                continue
            connections.remove(idle)
            closing.append(idle)
            connection = pool.create_connection(origin)
            connections.append(connection)
            pool_request.assign_to_connection(connection)
            held.add(id(connection))
    return closing
