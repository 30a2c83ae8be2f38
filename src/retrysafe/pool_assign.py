"""httpcore's pool matching requests with connections: cheap under load, fair to the
requests that waited longest, and closing no connection a request holds.

Whenever a request joins or leaves httpcore's pool, the pool matches its queued requests
with connections (``_assign_requests_to_connections``; under the pool's lock in a sync
pool). Under load that matching is where an async client's time goes, and this module
mends it for the pools retrysafe's transports wrap:

- **It scans every connection for every queued request**, each time, even when the pool
  is full and busy and none of them can be matched: with hundreds of requests queued,
  quadratic work each time one comes or goes. 400 async tasks on 100 connections spent
  most of a 51 s run there, the event loop lagging over a second (and so timing out
  connects). Here, once the pool is full with no connection idle and none available for
  an origin, the origin's other queued requests are passed over at once: nothing later
  in the same matching can change that.
- **Its keep-alive limit counts every connection, not the idle ones** (httpcore 1.0.9
  compares ``max_keepalive_connections`` with the number of connections): with more
  connections than the limit (httpx's default keeps 20 of 100), every connection that
  goes idle is closed, and the next request opens a new one. Here the idle connections
  are counted, as httpx documents the limit, and only once the queue has had its pick
  of them.
- **In an async pool, a free HTTP/1.1 connection goes to every waiting request of its
  origin.** All run to it; one gets it, and the others wait on its lock and then queue
  again, by then behind newer requests: with idle connections kept, that happens at each
  connection freed, and the requests that waited longest lose again and again (calls of
  0.5 s took 6 s; review50). Here it goes to the first waiting request only, and another
  request is not handed an HTTP/1.1 connection a request holds. (A sync pool keeps
  httpcore's way: there the first thread to run takes the connection, and handing it to
  one thread waiting for the interpreter was slower, in time and worst calls, under 200
  threads.) An HTTP/2 connection, which carries many requests at once, still goes to
  every request of its origin.
- **It may close a connection handed to a request that has not started on it** (which
  still looks idle): as surplus keep-alive, or to make room for another origin. That
  request then finds it closed and queues again, or, in a sync pool where its thread
  started on it meanwhile, waits on a closed socket until its read timeout
  (encode/httpcore#1110). Here no connection a request holds is closed as idle. (A
  request left in the pool's queue for good by a clean-up cut halfway, which retrysafe's
  shells repair, would hold its connection until it expires: keep-alive expiry, or the
  server closing it, still drops it.)

Every other rule stays httpcore's: closed and expired connections are dropped, a new
connection is made per request while the pool has room, and an idle connection of
another origin is closed to make room. A plain httpx client's pool keeps httpcore's
matching.
"""

from __future__ import annotations

from typing import Any

__all__ = ["match_cheaply"]

#: Marks httpcore's method once replaced, so it is replaced only once.
_REPLACED = "_retrysafe_matching"


def match_cheaply(pool_class: Any, pools: Any, *, exclusive_handover: bool) -> None:
    """Replace ``pool_class._assign_requests_to_connections`` (httpcore's sync or async
    pool, whose insides the caller checked) by :func:`matching`, for the pools in
    ``pools`` (a set-like of the pools retrysafe wraps; others keep httpcore's); once.
    ``exclusive_handover``: a free HTTP/1.1 connection goes to one queued request (async
    pools), not to every one of its origin (sync pools)."""
    original = pool_class._assign_requests_to_connections
    if getattr(original, _REPLACED, False):
        return

    def assign_requests_to_connections(self: Any) -> list[Any]:
        if self not in pools:
            return original(self)  # type: ignore[no-any-return]
        return matching(self, exclusive_handover=exclusive_handover)

    setattr(assign_requests_to_connections, _REPLACED, True)
    assign_requests_to_connections.__doc__ = original.__doc__
    pool_class._assign_requests_to_connections = assign_requests_to_connections


def matching(pool: Any, *, exclusive_handover: bool) -> list[Any]:
    """httpcore's matching of ``pool``'s queued requests with its connections, mended as
    the module's docstring says; the connections to close, as httpcore's returns them.
    ``exclusive_handover``: an HTTP/1.1 connection a request holds is not handed to
    another."""
    closing: list[Any] = []
    connections: list[Any] = pool._connections
    for connection in list(connections):
        if connection.is_closed():
            connections.remove(connection)
        elif connection.has_expired():
            connections.remove(connection)
            closing.append(connection)

    # A connection handed to a request that has not started on it yet looks idle (held:
    # worked out once a queued request or the keep-alive limit needs it).
    held: set[int] | None = None
    stuck: set[tuple[bytes, bytes, int]] = set()  # origins nothing can take in this pass
    for pool_request in list(pool._requests):
        if not pool_request.is_queued():
            continue
        if held is None:
            held = _held(pool)
        origin = pool_request.request.url.origin
        key = (origin.scheme, origin.host, origin.port)
        if key in stuck:
            continue
        available = None
        for connection in connections:
            if (
                connection.can_handle_request(origin)
                and connection.is_available()
                and not (
                    exclusive_handover and id(connection) in held and _one_at_a_time(connection)
                )
            ):
                available = connection
                break
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

    # Idle connections beyond the keep-alive limit, once the queue had its pick of them
    # (none while the pool has no more connections than the limit: the usual case).
    if len(connections) <= pool._max_keepalive_connections:
        return closing
    if held is None:
        held = _held(pool)
    idle_kept = 0
    for connection in list(connections):
        if connection.is_idle() and id(connection) not in held:
            idle_kept += 1
            if idle_kept > pool._max_keepalive_connections:
                connections.remove(connection)
                closing.append(connection)
    return closing


#: The names of httpcore's connections that carry one request at a time (HTTP/1.1),
#: sync and async; and of those that carry many at once (HTTP/2).
_ONE_AT_A_TIME = frozenset({"HTTP11Connection", "AsyncHTTP11Connection"})
_MANY_AT_ONCE = frozenset({"HTTP2Connection", "AsyncHTTP2Connection"})


def _one_at_a_time(connection: Any) -> bool:
    """Whether ``connection`` (a pool's, maybe through a proxy) speaks HTTP/1.1, one
    request at a time. Unknown (not connected yet, or a kind this does not know): no,
    as httpcore takes every connection, handing it to each request of its origin."""
    for _ in range(4):
        name = type(connection).__name__
        if name in _ONE_AT_A_TIME:
            return True
        if name in _MANY_AT_ONCE:
            return False
        connection = getattr(connection, "_connection", None)
        if connection is None:
            return False
    return False


def _held(pool: Any) -> set[int]:
    """The ids of the connections ``pool``'s requests hold, started on or not yet."""
    return {id(pool_request.connection) for pool_request in pool._requests}
