"""httpcore's pool waits: given up cleanly, and in sync pools bounded by the attempt.

A request that finds every connection of httpcore's pool in use waits for one
(``PoolRequest.wait_for_connection``) with the pool timeout httpx gave it. Two things go
wrong there, and this module mends both, for the pools a retrysafe transport wraps:

- **The wait starts over** (mended in sync pools). When the connection a request is
  handed turns out taken by another request first, httpcore waits again, with the whole
  pool timeout again: under load (200 threads on 100 keep-alive connections) attempts
  of 0.5 s waited there for 2 s, and calls overran their deadline. The network backend
  (:mod:`retrysafe.bounded_backend`) bounds every read and write of an attempt, but
  that wait is none. So each wait gets only what the attempt in flight has left (nothing
  changes for a request made outside one); a wait that runs out ends in httpcore's own
  ``PoolTimeout``: never sent, a free retry.
- **A wait that ends without a connection can leak a connection slot**
  (encode/httpcore#1093), sync and async. Between the wait running out (or, async, being
  cancelled by the attempt's time limit) and httpcore taking the request out of its
  queue, another request ending may hand it a connection just made for it. Nobody ever
  opens that connection, and httpcore never reclaims it: it holds one of the pool's
  slots for ever, and once they are all held, every request fails with a pool timeout
  without being sent. (That happened before this module too, whenever a wait ran out or
  was cancelled under load; bounding the sync waits made it frequent.) Here a wait that
  ends without a connection gives up under the pool's lock:
  it takes itself out of the queue (nothing can be handed to it afterwards), and a
  connection made for it alone and never opened (directly or through a proxy) is
  dropped from the pool, where one that others can use is left to them.

(An async wait needs no bound of its own: the attempt's time limit cancels it. These are
patches of httpcore's two classes, each made once, when a retrysafe transport first wraps
such a pool; they change only the waits in the pools retrysafe wraps: a plain httpx
client's keep httpcore's, even when made inside an attempt. A plain-Python module, since
a compiled function assigned to a class is not a method.)
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any

from retrysafe.attempt_deadline import current_copy, lost_while_waiting, time_left
from retrysafe.bounded_backend import Withdrawn
from retrysafe.pool_assign import match_cheaply
from retrysafe.pool_repair import stranded

__all__ = ["bound_pool_waits"]

#: Marks httpcore's method once wrapped, so it is wrapped only once.
_WRAPPED = "_retrysafe_bounded"

#: The pools retrysafe's transports wrap (sync and async): a wait gives up cleanly there.
_pools: weakref.WeakSet[Any] = weakref.WeakSet()
_pools_lock = threading.Lock()


def bound_pool_waits(pool: object) -> bool:
    """Make a wait for a connection in ``pool`` (an httpcore pool, sync or async) that
    ends without one give up cleanly, and bound a sync pool's waits by the attempt in
    flight (see the module's docstring); and have the pool match its queued requests with
    connections as :mod:`retrysafe.pool_assign` does. False where httpcore's insides are
    not as expected (then left as they are)."""
    try:
        import httpcore
        from httpcore._async import connection_pool as async_pool
        from httpcore._sync import connection_pool as sync_pool

        sync_request: Any = sync_pool.PoolRequest
        async_request: Any = async_pool.AsyncPoolRequest
    except (ImportError, AttributeError):
        return False
    if not (
        isinstance(getattr(pool, "_requests", None), list)
        and isinstance(getattr(pool, "_connections", None), list)
        and hasattr(pool, "_optional_thread_lock")
    ):
        return False
    # (what pool_assign's matching uses besides: httpcore 1.0's)
    matches = all(
        isinstance(getattr(pool, name, None), int)
        for name in ("_max_connections", "_max_keepalive_connections")
    ) and all(
        callable(getattr(request_class, name, None))
        for request_class in (sync_request, async_request)
        for name in ("assign_to_connection", "is_queued")
    )
    if isinstance(pool, httpcore.AsyncConnectionPool):
        _wrap_once(async_request, _async_wait_for_connection)
        if matches:
            match_cheaply(async_pool.AsyncConnectionPool, _pools, exclusive_handover=True)
    else:
        _wrap_once(sync_request, _sync_wait_for_connection)
        if matches:
            match_cheaply(sync_pool.ConnectionPool, _pools, exclusive_handover=False)
    with _pools_lock:
        _pools.add(pool)
    return True


def _wrap_once(request_class: Any, wrap: Any) -> None:
    """Replace ``request_class.wait_for_connection`` by ``wrap(original)``, once."""
    original = request_class.wait_for_connection
    if getattr(original, _WRAPPED, False):
        return
    wrapped = wrap(original)
    setattr(wrapped, _WRAPPED, True)
    wrapped.__doc__ = original.__doc__
    request_class.wait_for_connection = wrapped


def _pool_queueing(request: Any) -> Any:
    """The pool retrysafe wraps whose queue holds ``request`` (a pool request about to
    wait), or None: a pool of its own (a plain httpx client's, even inside an attempt)
    keeps httpcore's own waits."""
    with _pools_lock:  # (another thread may be adding a pool)
        pools = list(_pools)
    return next((pool for pool in pools if request in pool._requests), None)


def _sync_wait_for_connection(original: Any) -> Any:
    """httpcore's sync ``PoolRequest.wait_for_connection``: in a pool retrysafe wraps,
    each wait bounded by the attempt in flight, and given up cleanly when it ends
    without a connection."""

    def wait_for_connection(self: Any, timeout: float | None = None) -> Any:
        connection = self.connection
        if connection is not None:  # handed one already (most requests): no wait
            return connection
        pool = _pool_queueing(self)
        if pool is None:
            return original(self, timeout)
        left, binds, _ = time_left(timeout)
        try:
            connection = original(self, left if binds else timeout)
            copy = current_copy.get()
            if copy is not None and not copy.may_send():
                raise lost_while_waiting("a connection in the pool")
            return connection
        except BaseException:  # (its pool timeout, mostly)
            dropped = _give_up(self, pool)
            if dropped is not None:
                with contextlib.suppress(Exception):  # (never opened: nothing to close)
                    dropped.close()
            raise

    return wait_for_connection


def _async_wait_for_connection(original: Any) -> Any:
    """httpcore's ``AsyncPoolRequest.wait_for_connection``: in a pool retrysafe wraps,
    given up cleanly when it ends without a connection, cancelled (by the attempt's
    time limit) or timed out. A plain function returning the awaitable, so that a
    request handed a connection already awaits no more coroutines than before."""

    async def waiting(self: Any, timeout: float | None, pool: Any) -> Any:
        try:
            connection = await original(self, timeout)
            copy = current_copy.get()
            if copy is not None and not await copy.may_send_async():
                raise lost_while_waiting("a connection in the pool")
            return connection
        except BaseException:  # cancelled, or its pool timeout
            _give_up(self, pool)  # (what it drops was never opened: nothing to close)
            raise

    def wait_for_connection(self: Any, timeout: float | None = None) -> Any:
        if self.connection is not None:  # handed one already (most requests): no wait
            return original(self, timeout)
        pool = _pool_queueing(self)
        if pool is None:
            return original(self, timeout)
        return waiting(self, timeout, pool)

    return wait_for_connection


def _give_up(waiting: Any, pool: Any) -> Any:
    """Mark ``waiting`` (a request whose wait in ``pool`` ended without a connection) as
    no longer queued, under the pool's lock (a no-op in an async pool, where nothing else
    runs meanwhile), so that nothing more is handed to it before httpcore takes it out of
    its queue; and drop from the pool the connection it was handed meanwhile if no other
    request can use it. That connection, or None."""
    with pool._optional_thread_lock:  # (a sync pool hands out connections under it)
        handed = waiting.connection
        waiting.connection = Withdrawn()
        if handed is None or handed not in pool._connections or not stranded(handed):
            return None  # nothing handed, or a connection others can use: left in the pool
        if any(other.connection is handed for other in pool._requests if other is not waiting):
            return None  # (another request holds it too: left for that one to open)
        pool._connections.remove(handed)
        return handed
