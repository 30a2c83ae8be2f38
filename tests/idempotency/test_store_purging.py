"""The SQL stores remove lapsed records on their own, a bounded batch at a time.

Nothing has to call ``purge_expired()``: ordinary claims purge now and then (every so
many claims, or once enough of the store's ``now`` has passed), and one purge deletes
at most ``purge_limit`` rows, so no single claim pays for a huge backlog. Real SQLite
files and the session's real PostgreSQL server.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from idempotency_stores import new_namespace

from retrysafe.idempotency import (
    Claimed,
    IdempotencyStore,
    PostgresStore,
    SQLiteStore,
    StoreUnavailable,
)

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000.0
LATER = NOW + 10  # every record seeded at NOW with lease 1 has lapsed by then

Opener = Callable[..., IdempotencyStore]


class SqlBackend:
    """Opens stores of one kind on one private backend and counts its lapsed rows."""

    def __init__(self, kind: str, location: str, table: str) -> None:
        self.kind = kind
        self.location = location
        self.table = table
        self.opened: list[IdempotencyStore] = []

    def open(self, **options: Any) -> IdempotencyStore:
        store: IdempotencyStore
        if self.kind == "sqlite":
            store = SQLiteStore(self.location, table=self.table, **options)
        else:
            store = PostgresStore(self.location, table=self.table, pool_size=2, **options)
        self.opened.append(store)
        return store

    def lapsed_rows(self, now: float) -> int:
        query = f"SELECT count(*) FROM {self.table} WHERE expires_at <= "
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.location)) as db:
                count: int = db.execute(query + "?", (now,)).fetchone()[0]
                return count
        import psycopg

        with psycopg.connect(self.location) as db:
            row = db.execute(query + "%s", (now,)).fetchone()
            assert row is not None
            return int(row[0])


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqlBackend]:
    if request.param == "sqlite":
        location = str(tmp_path / "idempotency.sqlite3")
    else:
        location = str(request.getfixturevalue("postgres_dsn"))
    opened = SqlBackend(str(request.param), location, new_namespace())
    yield opened
    for store in opened.opened:
        await store.close()


async def seed_lapsed(store: IdempotencyStore, count: int) -> None:
    """``count`` claims made at NOW with a one-second lease: all lapsed by LATER."""
    for index in range(count):
        outcome = await store.claim("alice", f"old-{index}", "fp", now=NOW, lease=1)
        assert isinstance(outcome, Claimed)


async def fresh_claim(store: IdempotencyStore, index: int, *, now: float = LATER) -> None:
    outcome = await store.claim("alice", f"new-{index}", "fp", now=now, lease=100)
    assert isinstance(outcome, Claimed)


async def test_lapsed_records_are_removed_by_ordinary_claims_without_purge_expired(
    backend: SqlBackend,
) -> None:
    store = backend.open()  # the defaults, as an application would open it
    await seed_lapsed(store, 1000)
    assert backend.lapsed_rows(LATER) == 1000

    for index in range(300):
        await fresh_claim(store, index)

    assert backend.lapsed_rows(LATER) == 0


async def test_one_claim_never_deletes_more_than_the_purge_limit(backend: SqlBackend) -> None:
    store = backend.open(purge_every=1, purge_limit=7)
    await seed_lapsed(store, 100)

    deleted_per_claim = []
    for index in range(20):
        before = backend.lapsed_rows(LATER)
        await fresh_claim(store, index)
        deleted_per_claim.append(before - backend.lapsed_rows(LATER))

    assert deleted_per_claim == [7] * 14 + [2] + [0] * 5


async def test_purging_by_time_follows_the_stores_now(backend: SqlBackend) -> None:
    store = backend.open(purge_every=None, purge_interval=60.0, purge_limit=10_000)
    await seed_lapsed(store, 50)  # the first claim purges (nothing lapsed yet) at NOW

    await fresh_claim(store, 0, now=NOW + 59)
    assert backend.lapsed_rows(LATER) == 50  # a minute of `now` has not passed

    await fresh_claim(store, 1, now=NOW + 60)
    assert backend.lapsed_rows(LATER) == 0


async def test_purge_expired_stays_public_and_can_be_bounded(backend: SqlBackend) -> None:
    store = backend.open(purge_every=None, purge_interval=None)
    await seed_lapsed(store, 30)

    assert await store.purge_expired(now=LATER, limit=20) == 20  # type: ignore[attr-defined]
    assert await store.purge_expired(now=LATER) == 10  # type: ignore[attr-defined]
    assert backend.lapsed_rows(LATER) == 0


@pytest.mark.parametrize(
    "options",
    [{"purge_limit": 0}, {"purge_every": 0}, {"purge_interval": 0.0}, {"purge_interval": -1.0}],
)
def test_purge_settings_that_could_never_purge_are_refused(
    options: dict[str, Any], tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="purge_"):
        SQLiteStore(tmp_path / "x.sqlite3", **options)
    with pytest.raises(ValueError, match="purge_"):
        PostgresStore("postgresql://127.0.0.1:1/none", **options)


async def test_a_record_is_purged_from_the_moment_it_lapses(backend: SqlBackend) -> None:
    """A claim takes a record over once ``now`` reaches its expiry; a purge at that same
    ``now`` deletes it too, and one a moment earlier does not."""
    store = backend.open(purge_every=None, purge_interval=None)
    await seed_lapsed(store, 3)  # each expires at NOW + 1

    assert await store.purge_expired(now=NOW + 0.5) == 0  # type: ignore[attr-defined]
    assert await store.purge_expired(now=NOW + 1, limit=2) == 2  # type: ignore[attr-defined]
    assert await store.purge_expired(now=NOW + 1) == 1  # type: ignore[attr-defined]


async def test_postgres_finds_lapsed_records_through_an_index_on_their_expiry(
    postgres_dsn: str,
) -> None:
    # A purge asks for the oldest lapsed rows: without the index every purge scans the
    # whole table, and claims pay for it.
    import psycopg

    table = new_namespace()
    store = PostgresStore(postgres_dsn, table=table, purge_every=None, purge_interval=None)
    try:
        await fresh_claim(store, 0)
    finally:
        await store.close()
    with psycopg.connect(postgres_dsn) as db:
        definitions = [
            row[0]
            for row in db.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", (table,))
        ]
    assert any(definition.endswith("(expires_at)") for definition in definitions), definitions


async def test_purging_by_count_comes_round_again_every_purge_every_claims(
    backend: SqlBackend,
) -> None:
    await seed_lapsed(backend.open(purge_every=None, purge_interval=None), 50)
    store = backend.open(purge_every=3, purge_interval=None, purge_limit=1)

    for index in range(9):
        await fresh_claim(store, index)

    assert backend.lapsed_rows(LATER) == 50 - 3  # the 3rd, 6th and 9th claims purged one each


async def test_a_purge_that_fails_leaves_the_claim_made_and_is_logged(
    backend: SqlBackend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim is committed before it purges: failing it then would leave the key held
    by a request told the store is down, and its retries refused as in flight."""
    store = backend.open(purge_every=1, purge_interval=None)

    async def purge_fails(*, now: float, limit: int | None = None) -> int:
        raise StoreUnavailable(type(store).__name__, "the purge timed out (injected)")

    monkeypatch.setattr(store, "purge_expired", purge_fails)

    with caplog.at_level(logging.WARNING, logger="retrysafe.idempotency"):
        await fresh_claim(store, 0)

    assert "purging lapsed idempotency records failed" in caplog.text
    assert "the purge timed out (injected)" in caplog.text
