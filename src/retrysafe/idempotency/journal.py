"""Journal: the client's durable record of each logical write and its idempotency key.

Keys kept in memory die with the process: crash between two attempts and the
retry goes out under a new key, as a second payment. The journal writes the
operation (name, key, method, URL, body fingerprint, state) to SQLite *before*
the first send, so re-running the same named operation after a restart resumes
with the same key and the same bytes. An outcome that stays ambiguous (the
server may have acted) is handed to a reconciliation hook and listed by
:meth:`Journal.unresolved`; it is never re-sent under a new key.

States: ``pending`` (recorded, not yet sent) -> ``sent`` -> ``done`` |
``failed`` (the server surely did not act) | ``ambiguous`` (it may have).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import httpx

from retrysafe.clock import Clock, checked_clock
from retrysafe.errors import ApiError
from retrysafe.named_tuple import NamedTuple
from retrysafe.redact import redact_url
from retrysafe.request_facts import new_idempotency_key

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "Journal",
    "JournalConflict",
    "JournalState",
    "Operation",
    "OperationDone",
    "request_fingerprint_of",
    "state_after",
]

JournalState = Literal["pending", "sent", "done", "failed", "ambiguous"]
_UNRESOLVED: tuple[JournalState, ...] = ("pending", "sent", "ambiguous")

#: Seconds to wait for another process's lock on the file before failing.
_BUSY_TIMEOUT = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS retrysafe_operations (
    name        TEXT PRIMARY KEY,
    key         TEXT NOT NULL,
    method      TEXT NOT NULL,
    url         TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state       TEXT NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    last_status INTEGER,
    reason      TEXT,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
)
"""


class Operation(NamedTuple):
    """One logical write as the journal knows it. ``url`` is stored with secrets redacted.

    ``attempts``, ``last_status`` and ``reason`` are written when a run ends and say what
    that run did; a run that crashed leaves ``state`` at ``sent`` (its request may have gone
    out) with the counts of the run before it, 0 on the first. Read ``state``.

    (A named tuple: ``import retrysafe`` defines it, with the client's journal, and a
    frozen dataclass costs ten times as much to define.)
    """

    name: str
    key: str
    method: str
    url: str
    fingerprint: str
    state: JournalState
    attempts: int
    last_status: int | None
    reason: str | None
    created_at: float
    updated_at: float


class JournalConflict(ValueError):
    """An operation name was reused for a different request; nothing was sent."""


class OperationDone(ValueError):
    """The named operation already completed; running it again would be a second write."""


def request_fingerprint_of(request: httpx.Request) -> str:
    """The request's fingerprint as the idempotency middleware takes it
    (:func:`~retrysafe.idempotency.request_fingerprint`: its method, path, query, body and
    media type, none of their guessable secrets), over its URL without its userinfo: what
    must be identical on a resume.

    A hash of a guessable secret kept on disk would let whoever reads the file test
    guesses at it offline (a password in the query, a card number in the body). The query
    is read as the middleware reads it, so the two never disagree on whether two runs are
    the same request: a credential in it (a signature, an access token) counts by its
    name, and a URL signed again is the same operation; any other parameter by its value.
    """
    from retrysafe.idempotency.fingerprint import request_fingerprint

    url = request.url
    return request_fingerprint(
        request.method,
        # (scheme, host and path; userinfo redacted, the query apart)
        redact_url(url.copy_with(query=None, fragment=None)),
        url.query,
        request.read(),
        request.headers.get("content-type"),
    )


def state_after(error: ApiError) -> JournalState:
    """``ambiguous`` when any attempt may have been acted on by the server, else ``failed``.

    The engine tracks that across every attempt (``ApiError.processed``):
    a timeout on the first attempt followed by a refused connection is still
    ambiguous, and a 4xx answer after an earlier lost reply is too.
    """
    return "ambiguous" if error.processed == "maybe" else "failed"


class Journal:
    """A SQLite (WAL) journal of named write operations; thread-safe.

    Args:
        path: the database file (created if missing).
        on_ambiguous: called with the :class:`Operation` whenever an outcome is
            ambiguous, to reconcile it (e.g. look the payment up); the operation
            stays listed by :meth:`unresolved` until :meth:`resolve` is called.
        clock: wall time for the timestamps.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        on_ambiguous: Callable[[Operation], None] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.path = Path(path)
        self._on_ambiguous = on_ambiguous
        self._clock: Clock = checked_clock(clock)
        self._lock = threading.Lock()
        # Here, not at the top: `import retrysafe` stays light.
        import sqlite3

        from retrysafe.idempotency.sqlite_file import create_private
        from retrysafe.idempotency.sqlite_wal import enter_wal_mode

        create_private(self.path)
        self._db = sqlite3.connect(
            self.path, timeout=_BUSY_TIMEOUT, check_same_thread=False, isolation_level=None
        )
        self._db.row_factory = sqlite3.Row
        try:
            enter_wal_mode(self._db, within=_BUSY_TIMEOUT)
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(_SCHEMA)
        except BaseException:
            self._db.close()
            raise

    def begin(self, name: str, request: httpx.Request) -> Operation:
        """Record ``name`` for ``request`` before it is sent, or find it again after a restart.

        A new operation gets a fresh key; an unfinished one (pending, sent,
        ambiguous or failed) keeps its key, so re-sending it is guarded by the
        server's idempotency. Raises :class:`OperationDone` if it already
        completed, and :class:`JournalConflict` if ``name`` was recorded for a
        different method, URL or body. Processes sharing the file may begin the
        same name at once: one records it, and the others get its operation and key
        exactly as a later ``begin`` would.
        """
        if not name or not name.strip():
            raise ValueError("an operation name must be a non-empty string, e.g. 'pay-invoice-42'")
        fingerprint = request_fingerprint_of(request)
        with self._lock:
            existing = self._get(name)
            if existing is None:
                # Another process may record the same name between the read and this
                # insert; its row then stands, and is judged below like any earlier one.
                now = self._clock.time()
                self._db.execute(
                    "INSERT INTO retrysafe_operations (name, key, method, url, fingerprint, "
                    "state, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?) "
                    "ON CONFLICT (name) DO NOTHING",
                    (
                        name,
                        new_idempotency_key(),
                        request.method.upper(),
                        redact_url(request.url),
                        fingerprint,
                        now,
                        now,
                    ),
                )
                existing = self._get(name)
                assert existing is not None
        if existing.fingerprint != fingerprint:
            raise JournalConflict(
                f"operation {name!r} was recorded for a different request "
                f"({existing.method} {existing.url}); nothing was sent. Repeat it with "
                "the same method, URL and body, or use a new operation name"
            )
        if existing.state == "done":
            status = existing.last_status
            if status is not None and 200 <= status < 300:
                how = f"already completed (HTTP {status})"
            else:  # (settled by resolve() after an ambiguous outcome)
                last = "no answer" if status is None else f"HTTP {status}"
                how = f"was settled as done by resolve() (its last attempt got {last})"
            raise OperationDone(
                f"operation {name!r} {how}; nothing was sent. Use a new operation name for a "
                "new write"
            )
        return existing

    def mark_sent(self, name: str) -> None:
        """The operation is about to go out: from here its outcome may be unknown."""
        self._update(name, state="sent")

    def finish(
        self,
        name: str,
        *,
        state: JournalState,
        attempts: int,
        status: int | None,
        reason: str | None,
    ) -> Operation:
        """Record the outcome; an ambiguous one goes to the reconciliation hook."""
        operation = self._update(
            name, state=state, attempts=attempts, last_status=status, reason=reason
        )
        if state == "ambiguous" and self._on_ambiguous is not None:
            self._on_ambiguous(operation)
        return operation

    def resolve(self, name: str, state: Literal["done", "failed"]) -> Operation:
        """Settle an operation after reconciliation (its key is kept)."""
        return self._update(name, state=state)

    def get(self, name: str) -> Operation | None:
        """The operation called ``name``, or None."""
        with self._lock:
            return self._get(name)

    def unresolved(self) -> list[Operation]:
        """Operations not known to be done or failed: pending, sent or ambiguous."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT * FROM retrysafe_operations WHERE state IN ({', '.join('?' * 3)}) "
                "ORDER BY created_at",
                _UNRESOLVED,
            ).fetchall()
        return [_operation(row) for row in rows]

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _get(self, name: str) -> Operation | None:
        row = self._db.execute(
            "SELECT * FROM retrysafe_operations WHERE name = ?", (name,)
        ).fetchone()
        return None if row is None else _operation(row)

    def _update(self, name: str, **fields: object) -> Operation:
        columns = ", ".join(f"{column} = ?" for column in fields)
        with self._lock:
            cursor = self._db.execute(
                f"UPDATE retrysafe_operations SET {columns}, updated_at = ? WHERE name = ?",
                (*fields.values(), self._clock.time(), name),
            )
            if cursor.rowcount != 1:
                raise KeyError(f"no operation named {name!r} in the journal at {self.path}")
            operation = self._get(name)
        assert operation is not None
        return operation

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r})"


def _operation(row: sqlite3.Row) -> Operation:
    return Operation(
        name=row["name"],
        key=row["key"],
        method=row["method"],
        url=row["url"],
        fingerprint=row["fingerprint"],
        state=row["state"],
        attempts=row["attempts"],
        last_status=row["last_status"],
        reason=row["reason"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
