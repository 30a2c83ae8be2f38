"""httpcore's sync pool waits, bounded by the attempt in flight.

A request that finds every connection of httpcore's sync pool in use waits for one
(``PoolRequest.wait_for_connection``) with the pool timeout httpx gave it. When the
connection it is then given turns out taken by another request first, httpcore waits
again, with the whole pool timeout again: under load (200 threads on 100 keep-alive
connections) attempts of 0.5 s waited there for up to 2 s, and calls overran their
deadline. The network backend (:mod:`retrysafe.bounded_backend`) bounds every read and
write of an attempt, but that wait is none. So its timeout is cut to what the attempt in
flight in this context has left (nothing changes for a request made outside one); a
wait that runs out ends in httpcore's own ``PoolTimeout``: never sent, a free retry.

(The async shell needs none of this: its time limit cancels such a wait. It is a patch
of httpcore's class, made once, when a retrysafe transport first wraps a sync pool; a
plain-Python module, since a compiled function assigned to a class is not a method.)
"""

from __future__ import annotations

from typing import Any

from retrysafe.attempt_deadline import time_left

__all__ = ["bound_pool_waits"]

#: Marks httpcore's method once wrapped, so it is wrapped only once.
_WRAPPED = "_retrysafe_bounded"


def bound_pool_waits() -> bool:
    """Bound httpcore's sync pool waits by the attempt in flight (see the module's
    docstring); False where httpcore's insides are not as expected (then left as is)."""
    try:
        from httpcore._sync import connection_pool

        request_class: Any = connection_pool.PoolRequest
        original = request_class.wait_for_connection
    except (ImportError, AttributeError):
        return False
    if getattr(original, _WRAPPED, False):
        return True

    def wait_for_connection(self: Any, timeout: float | None = None) -> Any:
        left, binds, _ = time_left(timeout)
        return original(self, left if binds else timeout)

    setattr(wait_for_connection, _WRAPPED, True)
    wait_for_connection.__doc__ = original.__doc__
    request_class.wait_for_connection = wait_for_connection
    return True
