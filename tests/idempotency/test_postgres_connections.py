"""PostgresStore opens at most ``pool_size`` connections, however many requests wait; its
pool reuses them, and closes one whose state an error or a cancellation left unknown.

A database allows so many sessions (``max_connections``) for every server sharing it:
``pool_size`` is how an application keeps its share. The session's real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from retrysafe.idempotency import Claimed, PostgresStore
from retrysafe.idempotency.postgres_pool import ConnectionPool

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000.0


def sessions_named(dsn: str, name: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("pool_size", [1, 3])
async def test_concurrent_claims_share_at_most_pool_size_connections(
    postgres_dsn: str, pool_size: int
) -> None:
    # (its sessions are named, so only they are counted: other tests share the server)
    name = f"pool-bound-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(
        f"{postgres_dsn}?application_name={name}",
        table=f"t{uuid.uuid4().hex[:16]}",
        pool_size=pool_size,
        purge_every=None,
        purge_interval=None,
    )
    try:
        claims = [store.claim("s", f"k{i}", "fp", now=NOW, lease=60) for i in range(20)]
        outcomes = await asyncio.gather(*claims)

        assert all(isinstance(outcome, Claimed) for outcome in outcomes)
        assert sessions_named(postgres_dsn, name) == pool_size
    finally:
        await store.close()


@pytest.mark.parametrize("pool_size", [0, -1])
def test_a_pool_that_could_hold_no_connection_is_refused(pool_size: int) -> None:
    with pytest.raises(ValueError, match="size must be >= 1"):
        PostgresStore("postgresql://127.0.0.1:1/none", pool_size=pool_size)


async def _prepare_nothing(connection: object) -> None:
    """A pool's ``prepare`` for tests that create no table."""


def named_pool(postgres_dsn: str, size: int) -> tuple[ConnectionPool, str]:
    """A pool whose sessions carry a name of their own (so only they are counted)."""
    name = f"pool-{uuid.uuid4().hex[:8]}"
    pool = ConnectionPool(
        f"{postgres_dsn}?application_name={name}",
        size=size,
        connect_timeout=5,
        prepare=_prepare_nothing,
    )
    return pool, name


async def _open_both(pool: ConnectionPool) -> None:
    """Make the pool open two connections (two works at once), both idle afterwards."""
    arrived = 0
    both_running = asyncio.Event()

    async def hold(connection: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both_running.set()
        await asyncio.wait_for(both_running.wait(), 5)

    await asyncio.gather(pool.run(hold), pool.run(hold))


async def test_an_sql_error_on_a_reused_connection_is_not_run_again(postgres_dsn: str) -> None:
    # Only a connection that died while idle earns the work a second run on a fresh one
    # (and the other idle connections their closing): a statement the server refused on
    # a healthy connection would only be refused again.
    pool, name = named_pool(postgres_dsn, size=2)
    try:
        await _open_both(pool)
        assert sessions_named(postgres_dsn, name) == 2
        runs = 0

        async def divide_by_zero(connection: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
            nonlocal runs
            runs += 1
            await connection.execute("SELECT 1 / 0")

        with pytest.raises(psycopg.errors.DivisionByZero):
            await pool.run(divide_by_zero)

        assert runs == 1
        # The connection that saw the error is closed; the other one is kept for reuse.
        assert sessions_named(postgres_dsn, name) == 1
    finally:
        await pool.close()


async def test_a_cancelled_work_closes_its_connection(postgres_dsn: str) -> None:
    # A task cancelled mid-statement leaves its connection in an unknown state: it is
    # closed, not kept idle for the next task, nor left open for the collector.
    pool, _ = named_pool(postgres_dsn, size=1)
    borrowed: list[psycopg.AsyncConnection[tuple[object, ...]]] = []
    started = asyncio.Event()

    async def sleep_long(connection: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        borrowed.append(connection)
        started.set()
        await connection.execute("SELECT pg_sleep(5)")

    task = asyncio.create_task(pool.run(sleep_long))
    try:
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.sleep(0.05)  # (the statement is on its way)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert borrowed[0].closed
        # The next work gets a connection of its own, which works.

        async def select_one(connection: psycopg.AsyncConnection[tuple[object, ...]]) -> object:
            cursor = await connection.execute("SELECT 1")
            return await cursor.fetchone()

        assert await pool.run(select_one) == (1,)
    finally:
        await pool.close()


async def test_a_database_in_sql_ascii_replays_like_any_other(
    postgres_dsn: str,
) -> None:
    # Found in a user trial: on a database created without an encoding under the C locale
    # (SQL_ASCII), psycopg hands text columns back as bytes, and every repeat of a key
    # failed with a 500 (KeyError: b'in_flight').
    from idempotency_app import build_app, client_for, headers

    database = f"ascii_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(
            f"CREATE DATABASE {database} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"
            " TEMPLATE template0"
        )
    store = PostgresStore(
        psycopg.conninfo.make_conninfo(postgres_dsn, dbname=database), purge_every=None
    )
    try:
        app = build_app(store)
        async with client_for(app) as client:
            first = await client.post("/orders", json={"note": "café"}, headers=headers("k1"))
            again = await client.post("/orders", json={"note": "café"}, headers=headers("k1"))
        assert first.status_code == 201
        assert again.status_code == 201
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json() == first.json()
        assert app.state.shop.runs["/orders"] == 1
    finally:
        await store.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database}")
