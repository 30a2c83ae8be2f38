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
"""

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
from retrysafe.idempotency.middleware import CallerScope, IdempotencyMiddleware
from retrysafe.idempotency.postgres_store import PostgresStore
from retrysafe.idempotency.problems import PROBLEM_TYPE_PREFIX
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

__all__ = [
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
    "StoredResponse",
    "WallClock",
    "current_request",
    "mark_committed",
    "request_fingerprint",
]
