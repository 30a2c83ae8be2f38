"""PostgresStore: idempotency records in a PostgreSQL table, shared by every server."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import unquote

import anyio

from retrysafe.idempotency.postgres_pool import ConnectionPool
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
from retrysafe.idempotency.store import StoreUnavailable, new_token

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["PostgresStore"]

_T = TypeVar("_T")
_Work = Callable[["AsyncConnection[tuple[Any, ...]]"], Awaitable[_T]]


class PostgresStore:
    """Records in a PostgreSQL table (psycopg 3, async), claimed with one
    ``INSERT … ON CONFLICT … DO UPDATE … WHERE lapsed`` statement.

    Every server pointing at the same database shares the records; the table is created
    on first use. Keep it in the database your handlers write to and the record lives
    beside the side effects it guards.

    Needs the ``postgres`` extra: ``pip install 'retrysafe[postgres]'``.

    Args:
        dsn: a libpq connection string or URL.
        table: the table's name.
        pool_size: most connections open at once.
        timeout: seconds a connection attempt or one operation may take before failing
            closed with :class:`StoreUnavailable`.
        purge_every: after this many claims, the next claim also deletes lapsed records
            (``None``: not by count). Each claim adds at most one row, so with
            ``purge_limit`` above ``purge_every`` purging outpaces claiming.
        purge_interval: a claim also purges when its ``now`` is this many seconds past
            the last purge (``None``: not by time). The first claim purges too.
        purge_limit: most rows one purge deletes, so no claim pays for a large backlog;
            the rest go in later purges. :meth:`purge_expired` remains for a cron job.
            Several servers purge side by side without waiting on each other's rows.
    """

    def __init__(
        self,
        dsn: str,
        *,
        table: str = DEFAULT_TABLE,
        pool_size: int = 10,
        timeout: float = 5.0,
        purge_every: int | None = DEFAULT_PURGE_EVERY,
        purge_interval: float | None = DEFAULT_PURGE_INTERVAL,
        purge_limit: int = DEFAULT_PURGE_LIMIT,
    ) -> None:
        self._purges = PurgeSchedule(every=purge_every, interval=purge_interval, limit=purge_limit)
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "PostgresStore needs psycopg 3: pip install 'retrysafe[postgres]'"
            ) from exc
        self._table = check_table_name(table)
        self._timeout = timeout
        #: What the DSN holds that must not reach a message (psycopg quotes a DSN it
        #: cannot parse): its passwords.
        self._secrets = _passwords_in(dsn)
        _check_parses(dsn, self._secrets)
        self._pool = ConnectionPool(
            dsn, size=pool_size, connect_timeout=timeout, prepare=self._create_table
        )
        self._closed = False

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, now: float, lease: float
    ) -> Claimed | IdempotencyRecord:
        token = new_token()
        take = (
            f"INSERT INTO {self._table} AS held"
            " (scope, key, state, fingerprint, token, expires_at)"
            " VALUES (%s, %s, 'in_flight', %s, %s, %s)"
            " ON CONFLICT (scope, key) DO UPDATE SET state = 'in_flight',"
            " fingerprint = EXCLUDED.fingerprint, token = EXCLUDED.token,"
            " expires_at = EXCLUDED.expires_at, status = NULL, headers = NULL, body = NULL"
            " WHERE held.expires_at <= %s OR held.token = EXCLUDED.token"
            " RETURNING held.token"
        )
        look = f"SELECT {RECORD_COLUMNS} FROM {self._table} WHERE scope = %s AND key = %s"

        async def work(connection: AsyncConnection[tuple[Any, ...]]) -> Claimed | IdempotencyRecord:
            # A live record blocks the insert; it is read next, unless it was released in
            # between, in which case the insert is tried again. A record with this claim's
            # own token is its own (the insert reached the server, its answer was lost,
            # and the pool ran it again): taken again, not read as someone else's.
            while True:
                cursor = await connection.execute(
                    take, (scope, key, fingerprint, token, now + lease, now), prepare=True
                )
                if await cursor.fetchone() is not None:
                    return Claimed(token)
                cursor = await connection.execute(look, (scope, key), prepare=True)
                row = await cursor.fetchone()
                if row is not None:
                    return record_from_fields(row)

        outcome = await self._run(work)
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
        statement = (
            f"UPDATE {self._table}"
            " SET state = %s, status = %s, headers = %s, body = %s, expires_at = %s"
            " WHERE scope = %s AND key = %s AND token = %s AND state = 'in_flight'"
        )

        # Completed already by this claim (an earlier try whose answer was lost)?
        done_before = (
            f"SELECT 1 FROM {self._table}"
            " WHERE scope = %s AND key = %s AND token = %s AND state = %s"
        )

        async def work(connection: AsyncConnection[tuple[Any, ...]]) -> bool:
            cursor = await connection.execute(
                statement, (*values, now + ttl, scope, key, token), prepare=True
            )
            if cursor.rowcount == 1:
                return True
            cursor = await connection.execute(done_before, (scope, key, token, values[0]))
            return await cursor.fetchone() is not None

        return await self._run(work)

    async def extend(self, scope: str, key: str, token: str, *, now: float, lease: float) -> bool:
        statement = (
            f"UPDATE {self._table} SET expires_at = %s"
            " WHERE scope = %s AND key = %s AND token = %s AND state = 'in_flight'"
        )

        async def work(connection: AsyncConnection[tuple[Any, ...]]) -> bool:
            cursor = await connection.execute(
                statement, (now + lease, scope, key, token), prepare=True
            )
            return cursor.rowcount == 1

        return await self._run(work)

    async def release(self, scope: str, key: str, token: str) -> bool:
        statement = (
            f"DELETE FROM {self._table}"
            " WHERE scope = %s AND key = %s AND token = %s AND state = 'in_flight'"
        )

        async def work(connection: AsyncConnection[tuple[Any, ...]]) -> bool:
            cursor = await connection.execute(statement, (scope, key, token), prepare=True)
            return cursor.rowcount == 1

        return await self._run(work)

    async def purge_expired(self, *, now: float, limit: int | None = None) -> int:
        """Delete records that lapsed by ``now``, at most ``limit`` of them (``None``: all);
        returns how many. Claims already purge in bounded batches (see ``purge_every``);
        call this from a maintenance job to clear a backlog at a time of your choosing."""
        check_purge_limit(limit)
        statement: str
        values: tuple[float | int, ...]
        if limit is None:
            statement, values = f"DELETE FROM {self._table} WHERE expires_at <= %s", (now,)
        else:
            # The batch is fetched by row address (a TID scan, never a table scan). Rows
            # another purge has locked are skipped, not waited for; a record a claim took
            # over in the meantime has a new address and a later expiry, and stays.
            statement = (
                f"DELETE FROM {self._table} WHERE ctid = ANY(ARRAY("
                f"SELECT ctid FROM {self._table} WHERE expires_at <= %s"
                " ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED))"
                " AND expires_at <= %s"
            )
            values = (now, limit, now)

        async def work(connection: AsyncConnection[tuple[Any, ...]]) -> int:
            cursor = await connection.execute(statement, values)
            return cursor.rowcount

        return await self._run(work)

    async def close(self) -> None:
        self._closed = True
        await self._pool.close()

    async def _run(self, work: _Work[_T]) -> _T:
        if self._closed:
            raise StoreUnavailable("PostgresStore", "the store is closed")
        import psycopg

        try:
            with anyio.fail_after(self._timeout):
                return await self._pool.run(work)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            reason = _without(str(exc).strip(), self._secrets) or "no answer in time"
            raise StoreUnavailable("PostgresStore", f"{type(exc).__name__}: {reason}") from exc

    async def _create_table(self, connection: AsyncConnection[tuple[Any, ...]]) -> None:
        # The advisory lock keeps two servers starting at once from racing to create it.
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._table,))
            await connection.execute(
                f"CREATE TABLE IF NOT EXISTS {self._table} ("
                " scope text NOT NULL, key text NOT NULL, state text NOT NULL,"
                " fingerprint text NOT NULL, token text NOT NULL,"
                " expires_at double precision NOT NULL,"
                " status integer, headers text, body bytea,"
                " PRIMARY KEY (scope, key))"
            )
            # Lets a purge find its batch of lapsed rows without scanning the table. Looked
            # up first: CREATE INDEX locks out writes even when the index already exists.
            index = f"{self._table}_expires_at"
            cursor = await connection.execute("SELECT to_regclass(%s)", (index,))
            found = await cursor.fetchone()
            if found is None or found[0] is None:
                await connection.execute(
                    f"CREATE INDEX IF NOT EXISTS {index} ON {self._table} (expires_at)"
                )

    def __repr__(self) -> str:
        return f"PostgresStore(table={self._table!r})"


#: A password in a DSN: a URL's ``user:password@`` (even a malformed URL's), or a
#: ``password=`` keyword, quoted or not; unquoted, up to the next ``keyword=`` (a password
#: typed with a space is refused by libpq, whose message then quotes the part after it).
_URL_PASSWORD: Final = re.compile(r":([^:@/\s]+)@")
_KEYWORD_PASSWORD: Final = re.compile(
    r"password\s*=\s*('(?:[^'\\]|\\.)*'?|.*?)(?=\s+\w+\s*=|\s*$)", re.IGNORECASE
)
#: A word of a password typed with spaces is scrubbed alone from this length on.
_MIN_WORD = 4


def _check_parses(dsn: str, secrets: tuple[str, ...]) -> None:
    """Refuse, at construction, a connection string psycopg cannot read: a typo there is
    a setting to fix, which the first request would only have shown as the store being
    down (503 ``store-unavailable``), for as long as the server ran. (A database that
    does not exist, or a wrong password, can only show when a connection is made.)"""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        fields = conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        reason = _without(_without_password_words(str(exc).strip(), dsn), secrets)
        raise ValueError(
            f"PostgresStore(dsn): the connection string cannot be read ({reason}); write it "
            "as 'postgresql://user:password@host:5432/dbname', percent-encoding special "
            "characters in the password, or as 'host=... port=... dbname=... user=...'"
        ) from None
    port = str(fields.get("port", ""))
    if port and not all(part.strip().isdigit() for part in port.split(",")):
        # (a '/' in a URL's password ends the host: the password is read as the port,
        # so the value is not quoted)
        raise ValueError(
            "PostgresStore(dsn): the connection string's port is not a number; in "
            "'postgresql://user:password@host:5432/dbname', percent-encode a '/', '?', '#' "
            "or '@' in the password (e.g. '/' as %2F)"
        )


def _without_password_words(message: str, dsn: str) -> str:
    """``message`` with every word of a keyword password (``password=two words``) taken
    out, however short: psycopg quotes the word it could not read."""
    for value in _KEYWORD_PASSWORD.findall(dsn):
        for word in value.strip("'").split():
            message = re.sub(rf'"{re.escape(word)}"', '"[REDACTED]"', message)
    return message


def _passwords_in(dsn: str) -> tuple[str, ...]:
    """The passwords ``dsn`` holds, as written and percent-decoded, longest first."""
    found = set(_URL_PASSWORD.findall(dsn))
    for value in _KEYWORD_PASSWORD.findall(dsn):
        found.add(value)
        found.add(value.strip("'"))
        found.update(word for word in value.strip("'").split() if len(word) >= _MIN_WORD)
    found |= {unquote(value) for value in found}
    return tuple(sorted((value for value in found if value), key=len, reverse=True))


def _without(message: str, secrets: tuple[str, ...]) -> str:
    """``message`` with every one of ``secrets`` in it replaced."""
    for secret in secrets:
        message = message.replace(secret, "[REDACTED]")
    return message
