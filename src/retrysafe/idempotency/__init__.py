"""Idempotency keys on the server: run each keyed write once per caller, replay it after.

:class:`IdempotencyMiddleware` guards an ASGI app (Starlette, FastAPI). It claims each
(caller, key) atomically in a store before the handler runs, replays the kept response to
repeats (``Idempotent-Replayed: true``), refuses a different request under a used key
(422) and a repeat while the first still runs (409), and fails closed (503) when the
store is down. Stores: :class:`MemoryStore` (one process), :class:`SQLiteStore` (one
host), :class:`RedisStore` and :class:`PostgresStore` (many hosts), all implementing
:class:`IdempotencyStore`. A handler calls :func:`mark_committed` once its side effect is
durable, so a failure after it is kept rather than run again.

On the client, :class:`Journal` keeps each named write's key on disk, so a retry
after a crash goes out under the same key instead of becoming a second write.

Each name is imported on first use (PEP 562): ``import retrysafe``, whose client needs only
the journal, loads neither the middleware nor any store nor their drivers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retrysafe.lazy_names import lazy_module_functions

if TYPE_CHECKING:
    from retrysafe.idempotency.commit import IdempotentRequest, current_request, mark_committed
    from retrysafe.idempotency.fingerprint import request_fingerprint
    from retrysafe.idempotency.held_claim import WallClock
    from retrysafe.idempotency.journal import (
        Journal,
        JournalConflict,
        JournalState,
        Operation,
        OperationDone,
    )
    from retrysafe.idempotency.memory_store import MemoryStore
    from retrysafe.idempotency.middleware import (
        CallerScope,
        IdempotencyMiddleware,
        credential_scope,
    )
    from retrysafe.idempotency.postgres_store import PostgresStore
    from retrysafe.idempotency.problems import PROBLEM_HEADER, PROBLEM_TYPE_PREFIX
    from retrysafe.idempotency.records import (
        Claimed,
        IdempotencyRecord,
        RecordState,
        StoredResponse,
    )
    from retrysafe.idempotency.redis_store import RedisStore
    from retrysafe.idempotency.replay import REPLAYED_HEADER
    from retrysafe.idempotency.settings import IdempotencySettings
    from retrysafe.idempotency.sqlite_store import SQLiteStore
    from retrysafe.idempotency.store import IdempotencyStore, StoreUnavailable

#: Each public name and the module defining it, imported when the name is first used.
_LAZY: dict[str, str] = {
    "IdempotentRequest": "retrysafe.idempotency.commit",
    "current_request": "retrysafe.idempotency.commit",
    "mark_committed": "retrysafe.idempotency.commit",
    "request_fingerprint": "retrysafe.idempotency.fingerprint",
    "WallClock": "retrysafe.idempotency.held_claim",
    "Journal": "retrysafe.idempotency.journal",
    "JournalConflict": "retrysafe.idempotency.journal",
    "JournalState": "retrysafe.idempotency.journal",
    "Operation": "retrysafe.idempotency.journal",
    "OperationDone": "retrysafe.idempotency.journal",
    "MemoryStore": "retrysafe.idempotency.memory_store",
    "CallerScope": "retrysafe.idempotency.middleware",
    "IdempotencyMiddleware": "retrysafe.idempotency.middleware",
    "credential_scope": "retrysafe.idempotency.middleware",
    "PostgresStore": "retrysafe.idempotency.postgres_store",
    "PROBLEM_HEADER": "retrysafe.idempotency.problems",
    "PROBLEM_TYPE_PREFIX": "retrysafe.idempotency.problems",
    "Claimed": "retrysafe.idempotency.records",
    "IdempotencyRecord": "retrysafe.idempotency.records",
    "RecordState": "retrysafe.idempotency.records",
    "StoredResponse": "retrysafe.idempotency.records",
    "RedisStore": "retrysafe.idempotency.redis_store",
    "REPLAYED_HEADER": "retrysafe.idempotency.replay",
    "IdempotencySettings": "retrysafe.idempotency.settings",
    "SQLiteStore": "retrysafe.idempotency.sqlite_store",
    "IdempotencyStore": "retrysafe.idempotency.store",
    "StoreUnavailable": "retrysafe.idempotency.store",
}

__all__ = [
    "PROBLEM_HEADER",
    "PROBLEM_TYPE_PREFIX",
    "REPLAYED_HEADER",
    "CallerScope",
    "Claimed",
    "IdempotencyMiddleware",
    "IdempotencyRecord",
    "IdempotencySettings",
    "IdempotencyStore",
    "IdempotentRequest",
    "Journal",
    "JournalConflict",
    "JournalState",
    "MemoryStore",
    "Operation",
    "OperationDone",
    "PostgresStore",
    "RecordState",
    "RedisStore",
    "SQLiteStore",
    "StoreUnavailable",
    "credential_scope",
    "StoredResponse",
    "WallClock",
    "current_request",
    "mark_committed",
    "request_fingerprint",
]


# Hidden from type checkers, which see the names through the TYPE_CHECKING imports above:
# a visible module __getattr__ would make them accept any misspelt name here.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_module_functions(__name__, _LAZY, globals(), __all__)
