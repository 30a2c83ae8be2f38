"""PostgresStore opens at most ``pool_size`` connections, however many requests wait.

A database allows so many sessions (``max_connections``) for every server sharing it:
``pool_size`` is how an application keeps its share. The session's real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from retrysafe.idempotency import Claimed, PostgresStore

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
