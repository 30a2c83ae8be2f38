"""SQLiteStore: idempotency records in a local SQLite file, shared by worker processes."""

from __future__ import annotations

import math
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Literal, TypeVar

import anyio
import anyio.to_thread

from retrysafe.idempotency.records import (
    Claimed,
    IdempotencyRecord,
    StoredResponse,
    record_from_fields,
)
from retrysafe.idempotency.sql import (
    DEFAULT_PURGE_EVERY,
    DEFAULT_PURGE_INTERVAL,
    DEFAULT_PURGE_LIMIT,
    DEFAULT_TABLE,
    RECORD_COLUMNS,
    PurgeSchedule,
    check_purge_limit,
    check_table_name,
)
from retrysafe.idempotency.sqlite_file import create_private
from retrysafe.idempotency.sqlite_wal import enter_wal_mode
from retrysafe.idempotency.store import StoreUnavailable, new_token

__all__ = ["SQLiteStore"]

_T = TypeVar("_T")


class SQLiteStore:
    """Records in a SQLite database file (stdlib ``sqlite3``, WAL mode).

    The embedded default: every worker process on one host that opens the same ``path``
    shares the records, and a claim is one ``BEGIN IMMEDIATE`` transaction, so exactly one
    process wins a key. Work runs in a thread so the event loop never blocks on disk.

    Args:
        path: the database file; created, with its table, on first use.
        table: the table's name.
        busy_timeout: seconds to wait for another process's write lock before failing
            closed with :class:`StoreUnavailable`.
        synchronous: SQLite's ``synchronous`` setting. ``"FULL"`` (the default) makes each
            claim durable before the handler runs; ``"NORMAL"`` is faster but a power cut
            may forget the last claims.
        purge_every: after this many claims, the next claim also deletes lapsed records
            (``None``: not by count). Each claim adds at most one row, so with
            ``purge_limit`` above ``purge_every`` purging outpaces claiming.
        purge_interval: a claim also purges when its ``now`` is this many seconds past
            the last purge (``None``: not by time). The first claim purges too.
        purge_limit: most rows one purge deletes, so no claim pays for a large backlog;
            the rest go in later purges. :meth:`purge_expired` remains for a cron job.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table: str = DEFAULT_TABLE,
        busy_timeout: float = 5.0,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        purge_every: int | None = DEFAULT_PURGE_EVERY,
        purge_interval: float | None = DEFAULT_PURGE_INTERVAL,
        purge_limit: int = DEFAULT_PURGE_LIMIT,
    ) -> None:
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)):
            raise TypeError(f"busy_timeout is a number of seconds, e.g. 5.0; got {busy_timeout!r}")
        if not 0 <= busy_timeout < math.inf:
            raise ValueError(
                f"busy_timeout must be a finite number of seconds >= 0, e.g. 5.0;"
                f" got {busy_timeout!r}"
            )
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self._purges = PurgeSchedule(every=purge_every, interval=purge_interval, limit=purge_limit)
        self._path = os.fspath(path)
        self._table = check_table_name(table)
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._closed = False

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, now: float, lease: float
    ) -> Claimed | IdempotencyRecord:
        def run(connection: sqlite3.Connection) -> Claimed | IdempotencyRecord:
            connection.execute("BEGIN IMMEDIATE")
            try:
                row = connection.execute(
                    f"SELECT {RECORD_COLUMNS} FROM {self._table} WHERE scope = ? AND key = ?",
                    (scope, key),
                ).fetchone()
                if row is not None and row[2] > now:
                    connection.execute("COMMIT")
                    return record_from_fields(row)
                token = new_token()
                connection.execute(
                    f"INSERT OR REPLACE INTO {self._table}"
                    " (scope, key, state, fingerprint, token, expires_at)"
                    " VALUES (?, ?, 'in_flight', ?, ?, ?)",
                    (scope, key, fingerprint, token, now + lease),
                )
                connection.execute("COMMIT")
                return Claimed(token)
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

        outcome = await self._run(run)
        await self._purges.purge_if_due(now, self.purge_expired)
        return outcome

    async def complete(
        self,
        scope: str,
        key: str,
        token: str,
        response: StoredResponse | None,
        *,
        now: float,
        ttl: float,
    ) -> bool:
        values = StoredResponse.columns(response)

        def run(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                f"UPDATE {self._table}"
                " SET state = ?, status = ?, headers = ?, body = ?, expires_at = ?"
                " WHERE scope = ? AND key = ? AND token = ? AND state = 'in_flight'",
                (*values, now + ttl, scope, key, token),
            )
            if cursor.rowcount == 1:
                return True
            # Completed already by this claim (an earlier try whose answer was lost)?
            row = connection.execute(
                f"SELECT 1 FROM {self._table} WHERE scope = ? AND key = ? AND token = ?"
                " AND state = ?",
                (scope, key, token, values[0]),
            ).fetchone()
            return row is not None

        return await self._run(run)

    async def extend(self, scope: str, key: str, token: str, *, now: float, lease: float) -> bool:
        def run(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                f"UPDATE {self._table} SET expires_at = ?"
                " WHERE scope = ? AND key = ? AND token = ? AND state = 'in_flight'",
                (now + lease, scope, key, token),
            )
            return cursor.rowcount == 1

        return await self._run(run)

    async def release(self, scope: str, key: str, token: str) -> bool:
        def run(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                f"DELETE FROM {self._table}"
                " WHERE scope = ? AND key = ? AND token = ? AND state = 'in_flight'",
                (scope, key, token),
            )
            return cursor.rowcount == 1

        return await self._run(run)

    async def purge_expired(self, *, now: float, limit: int | None = None) -> int:
        """Delete records that lapsed by ``now``, at most ``limit`` of them (``None``: all);
        returns how many. Claims already purge in bounded batches (see ``purge_every``);
        call this from a maintenance job to clear a backlog at a time of your choosing."""
        check_purge_limit(limit)
        statement: str
        values: tuple[float | int, ...]
        if limit is None:
            statement, values = f"DELETE FROM {self._table} WHERE expires_at <= ?", (now,)
        else:
            # The table has no rowid; the subquery picks the batch by primary key.
            statement = (
                f"DELETE FROM {self._table} WHERE (scope, key) IN"
                f" (SELECT scope, key FROM {self._table} WHERE expires_at <= ?"
                " ORDER BY expires_at LIMIT ?)"
            )
            values = (now, limit)

        def run(connection: sqlite3.Connection) -> int:
            return connection.execute(statement, values).rowcount

        return await self._run(run)

    async def close(self) -> None:
        def run() -> None:
            with self._lock:
                self._closed = True
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None

        await anyio.to_thread.run_sync(run)

    async def _run(self, operation: Callable[[sqlite3.Connection], _T]) -> _T:
        def locked() -> _T:
            with self._lock:
                if self._closed:
                    raise StoreUnavailable("SQLiteStore", "the store is closed")
                try:
                    return operation(self._open())
                except sqlite3.Error as exc:
                    raise StoreUnavailable("SQLiteStore", f"{self._path}: {exc}") from exc

        return await anyio.to_thread.run_sync(locked)

    def _open(self) -> sqlite3.Connection:
        if self._connection is not None:
            return self._connection
        create_private(self._path)
        connection = sqlite3.connect(
            self._path,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            enter_wal_mode(connection, within=self._busy_timeout)
            connection.execute(f"PRAGMA synchronous = {self._synchronous}")
            connection.execute(
                f"CREATE TABLE IF NOT EXISTS {self._table} ("
                " scope TEXT NOT NULL, key TEXT NOT NULL, state TEXT NOT NULL,"
                " fingerprint TEXT NOT NULL, token TEXT NOT NULL, expires_at REAL NOT NULL,"
                " status INTEGER, headers TEXT, body BLOB,"
                " PRIMARY KEY (scope, key)) WITHOUT ROWID"
            )
            # Lets a purge find its batch of lapsed rows without scanning the table.
            connection.execute(
                f"CREATE INDEX IF NOT EXISTS {self._table}_expires_at ON {self._table} (expires_at)"
            )
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return connection

    def __repr__(self) -> str:
        return f"SQLiteStore({self._path!r})"
