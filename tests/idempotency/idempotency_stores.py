"""Opening each kind of store for the idempotency tests, in this process or another."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import anyio
import pytest
from store_servers import free_port

from retrysafe.idempotency import (
    Claimed,
    IdempotencyRecord,
    IdempotencyStore,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SQLiteStore,
    StoredResponse,
    StoreUnavailable,
)

#: Every store, in the order the suite runs them.
STORE_KINDS = ["memory", "sqlite", "redis", "postgres"]
#: Stores several processes can share.
SHARED_STORE_KINDS = ["sqlite", "redis", "postgres"]


def new_namespace() -> str:
    """A Redis prefix or PostgreSQL table name no other test uses."""
    return f"t{uuid.uuid4().hex[:16]}"


def open_store(kind: str, location: str, namespace: str) -> IdempotencyStore:
    """A shareable store: SQLite at the path ``location``, Redis or PostgreSQL at the
    URL ``location``, its records under ``namespace``."""
    if kind == "sqlite":
        return SQLiteStore(location)
    if kind == "redis":
        return RedisStore(location, prefix=f"{namespace}:")
    if kind == "postgres":
        return PostgresStore(location, table=namespace, pool_size=4)
    raise ValueError(f"{kind!r} stores cannot be shared")


class StoreFactory:
    """Makes stores of one kind that share one backend (a file, a prefix, a table),
    so a test can stand in for several servers; closes them all at the end."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.kind = kind
        self._request = request
        self._tmp_path = tmp_path
        self.namespace = new_namespace()
        self._made: list[IdempotencyStore] = []
        self._memory: MemoryStore | None = None

    def location(self) -> str:
        """The backend's address, as another process would be given it."""
        if self.kind == "sqlite":
            return str(self._tmp_path / "idempotency.sqlite3")
        if self.kind == "redis":
            return str(self._request.getfixturevalue("redis_url"))
        if self.kind == "postgres":
            return str(self._request.getfixturevalue("postgres_dsn"))
        raise ValueError(f"{self.kind} stores have no shared location")

    def make(self) -> IdempotencyStore:
        """A store on this test's backend (for memory: the one shared instance)."""
        if self.kind == "memory":
            if self._memory is None:
                self._memory = MemoryStore()
                self._made.append(self._memory)
            return self._memory
        store = open_store(self.kind, self.location(), self.namespace)
        self._made.append(store)
        return store

    def make_down(self) -> IdempotencyStore:
        """A store of this kind whose backend cannot be reached."""
        dead = f"127.0.0.1:{free_port()}"
        store: IdempotencyStore
        if self.kind == "memory":
            store = MemoryStore()
            self._made.append(store)
            return store  # closed by the caller: a closed store is the memory kind of "down"
        if self.kind == "sqlite":
            store = SQLiteStore(self._tmp_path / "no-such-directory" / "store.sqlite3")
        elif self.kind == "redis":
            store = RedisStore(f"redis://{dead}/0", timeout=1.0)
        else:
            store = PostgresStore(f"postgresql://postgres@{dead}/postgres", timeout=2.0)
        self._made.append(store)
        return store

    async def close(self) -> None:
        for store in self._made:
            with contextlib.suppress(Exception):
                await store.close()


class InterposedStore:
    """A real store behind a thin layer the test controls, standing in for a flaky or
    slow backend: it can fail the next ``complete`` calls, hold lease renewals back until
    the test lets them through, and notes every renewal and every owner token."""

    def __init__(self, inner: IdempotencyStore, *, failing_completes: int = 0) -> None:
        self.inner = inner
        self.failing_completes = failing_completes
        self.tokens: list[str] = []
        #: (``now`` passed in, whether the claim was renewed) for each renewal.
        self.renewals: list[tuple[float, bool]] = []
        self._renewals_held: anyio.Event | None = None
        self._renewal_seen: anyio.Event | None = None

    def hold_first_claims_renewals(self) -> None:
        """Make the first claim's renewals wait, as if the store were slow for it, until
        :meth:`release_renewals`. (Only the first claim's: a claim made later renews as
        usual, so a real store that lets an unrenewed key lapse in real time, as Redis
        does, never drops that one however long a busy machine takes.)"""
        self._renewals_held = anyio.Event()

    def release_renewals(self) -> None:
        if self._renewals_held is not None:
            self._renewals_held.set()

    async def renewal(self, *, at_or_after: float, renewed: bool = True) -> None:
        """Wait (at most 5 s) for a renewal made at ``now >= at_or_after`` that had the
        outcome ``renewed``."""
        with anyio.fail_after(5):
            while not any(
                now >= at_or_after and outcome == renewed for now, outcome in self.renewals
            ):
                if self._renewal_seen is None:
                    self._renewal_seen = anyio.Event()
                await self._renewal_seen.wait()

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, now: float, lease: float
    ) -> Claimed | IdempotencyRecord:
        outcome = await self.inner.claim(scope, key, fingerprint, now=now, lease=lease)
        if isinstance(outcome, Claimed):
            self.tokens.append(outcome.token)
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
        if self.failing_completes:
            self.failing_completes -= 1
            raise StoreUnavailable("InterposedStore", "connection reset (injected)")
        return await self.inner.complete(scope, key, token, response, now=now, ttl=ttl)

    async def extend(self, scope: str, key: str, token: str, *, now: float, lease: float) -> bool:
        if self._renewals_held is not None and self.tokens and token == self.tokens[0]:
            await self._renewals_held.wait()
        renewed = await self.inner.extend(scope, key, token, now=now, lease=lease)
        self.renewals.append((now, renewed))
        if self._renewal_seen is not None:
            self._renewal_seen.set()
            self._renewal_seen = None
        return renewed

    async def release(self, scope: str, key: str, token: str) -> bool:
        return await self.inner.release(scope, key, token)

    async def close(self) -> None:
        await self.inner.close()
