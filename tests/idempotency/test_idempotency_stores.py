"""The store protocol itself: atomic claims, fenced writes, lapsed records. Every store."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from idempotency_stores import StoreFactory

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

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000.0
RESPONSE = StoredResponse(
    201,
    (("content-type", "application/octet-stream"), ("x-note", "caf\u00e9")),
    bytes(range(256)),
)


async def claim(store: IdempotencyStore, *, now: float = NOW, fingerprint: str = "fp") -> str:
    outcome = await store.claim("alice", "k1", fingerprint, now=now, lease=10)
    assert isinstance(outcome, Claimed)
    return outcome.token


async def test_a_free_key_is_claimed_and_then_held(store: IdempotencyStore) -> None:
    await claim(store)

    held = await store.claim("alice", "k1", "fp2", now=NOW + 1, lease=10)

    assert held == IdempotencyRecord("in_flight", "fp", NOW + 10)


async def test_keys_are_kept_apart_per_caller_scope(store: IdempotencyStore) -> None:
    await claim(store)

    other = await store.claim("bob", "k1", "fp", now=NOW, lease=10)

    assert isinstance(other, Claimed)


async def test_a_completed_claim_keeps_the_response_byte_for_byte(
    store: IdempotencyStore,
) -> None:
    token = await claim(store)

    assert await store.complete("alice", "k1", token, RESPONSE, now=NOW + 1, ttl=100)
    kept = await store.claim("alice", "k1", "fp", now=NOW + 2, lease=10)

    assert kept == IdempotencyRecord("completed", "fp", NOW + 101, RESPONSE)


async def test_completing_without_a_response_leaves_it_not_replayable(
    store: IdempotencyStore,
) -> None:
    token = await claim(store)

    assert await store.complete("alice", "k1", token, None, now=NOW, ttl=100)
    kept = await store.claim("alice", "k1", "fp", now=NOW + 1, lease=10)

    assert kept == IdempotencyRecord("not_replayable", "fp", NOW + 100)


async def test_a_released_key_can_be_claimed_again(store: IdempotencyStore) -> None:
    token = await claim(store)

    assert await store.release("alice", "k1", token)

    await claim(store, now=NOW + 1)


async def test_another_token_can_neither_complete_nor_release(store: IdempotencyStore) -> None:
    await claim(store)

    assert not await store.complete("alice", "k1", "not-the-owner", RESPONSE, now=NOW, ttl=9)
    assert not await store.release("alice", "k1", "not-the-owner")
    held = await store.claim("alice", "k1", "fp", now=NOW, lease=10)
    assert isinstance(held, IdempotencyRecord)
    assert held.state == "in_flight"


async def test_a_lapsed_claim_is_taken_over_and_its_old_token_fenced_off(
    store: IdempotencyStore,
) -> None:
    stale = await claim(store)
    fresh = await claim(store, now=NOW + 10, fingerprint="fp-new")

    assert fresh != stale
    assert not await store.complete("alice", "k1", stale, RESPONSE, now=NOW + 11, ttl=100)
    assert not await store.release("alice", "k1", stale)
    assert await store.complete("alice", "k1", fresh, RESPONSE, now=NOW + 11, ttl=100)


async def test_a_renewed_claim_holds_the_key_until_its_new_lease_ends(
    store: IdempotencyStore,
) -> None:
    token = await claim(store)

    assert await store.extend("alice", "k1", token, now=NOW + 8, lease=10)
    held = await store.claim("alice", "k1", "fp", now=NOW + 15, lease=10)

    assert held == IdempotencyRecord("in_flight", "fp", NOW + 18)
    assert await store.complete("alice", "k1", token, RESPONSE, now=NOW + 16, ttl=100)


async def test_a_kept_response_is_not_released_even_by_the_token_that_kept_it(
    store: IdempotencyStore,
) -> None:
    # release frees an in-flight claim only: a stray one must not drop a kept outcome and
    # let the next retry run the handler again.
    token = await claim(store)
    assert await store.complete("alice", "k1", token, RESPONSE, now=NOW + 1, ttl=100)

    assert not await store.release("alice", "k1", token)
    kept = await store.claim("alice", "k1", "fp", now=NOW + 2, lease=10)
    assert isinstance(kept, IdempotencyRecord)
    assert (kept.state, kept.response) == ("completed", RESPONSE)


async def test_the_memory_stores_sweep_removes_only_lapsed_records() -> None:
    # MemoryStore sweeps lapsed records as claims go by (every 256 claims).
    store = MemoryStore()
    running = await store.claim("alice", "running", "fp", now=NOW, lease=60)
    assert isinstance(running, Claimed)
    done = await store.claim("alice", "done", "fp", now=NOW, lease=60)
    assert isinstance(done, Claimed)
    assert await store.complete("alice", "done", done.token, RESPONSE, now=NOW, ttl=600)
    lapsed = await store.claim("alice", "lapsed", "fp", now=NOW - 100, lease=10)
    assert isinstance(lapsed, Claimed)
    for number in range(600):
        await store.claim("bob", f"k{number}", "fp", now=NOW + 1, lease=0.5)

    still_running = await store.claim("alice", "running", "fp", now=NOW + 2, lease=60)
    assert still_running == IdempotencyRecord("in_flight", "fp", NOW + 60)
    kept = await store.claim("alice", "done", "fp", now=NOW + 2, lease=60)
    assert isinstance(kept, IdempotencyRecord)
    assert kept.response == RESPONSE
    assert ("alice", "lapsed") not in store._entries  # (a sweep did run)


async def test_another_token_cannot_renew_a_claim(store: IdempotencyStore) -> None:
    await claim(store)

    assert not await store.extend("alice", "k1", "not-the-owner", now=NOW + 8, lease=10)
    held = await store.claim("alice", "k1", "fp", now=NOW + 1, lease=10)
    assert held == IdempotencyRecord("in_flight", "fp", NOW + 10)


async def test_a_taken_over_claim_cannot_be_renewed_by_its_old_owner(
    store: IdempotencyStore,
) -> None:
    stale = await claim(store)
    await claim(store, now=NOW + 10, fingerprint="fp-new")

    assert not await store.extend("alice", "k1", stale, now=NOW + 11, lease=10)
    held = await store.claim("alice", "k1", "fp", now=NOW + 12, lease=10)
    assert held == IdempotencyRecord("in_flight", "fp-new", NOW + 20)


async def test_a_finished_claim_cannot_be_renewed(store: IdempotencyStore) -> None:
    kept = await claim(store)
    await store.complete("alice", "k1", kept, RESPONSE, now=NOW, ttl=100)
    released = await store.claim("bob", "k1", "fp", now=NOW, lease=10)
    assert isinstance(released, Claimed)
    await store.release("bob", "k1", released.token)

    assert not await store.extend("alice", "k1", kept, now=NOW + 1, lease=10)
    assert not await store.extend("bob", "k1", released.token, now=NOW + 1, lease=10)
    record = await store.claim("alice", "k1", "fp", now=NOW + 2, lease=10)
    assert record == IdempotencyRecord("completed", "fp", NOW + 100, RESPONSE)


async def test_completing_again_with_the_same_token_succeeds_and_changes_nothing(
    store: IdempotencyStore,
) -> None:
    token = await claim(store)
    await store.complete("alice", "k1", token, RESPONSE, now=NOW, ttl=100)

    assert await store.complete("alice", "k1", token, RESPONSE, now=NOW + 5, ttl=100)
    assert not await store.complete("alice", "k1", token, None, now=NOW + 5, ttl=100)
    kept = await store.claim("alice", "k1", "fp", now=NOW + 6, lease=10)
    assert kept == IdempotencyRecord("completed", "fp", NOW + 100, RESPONSE)


async def test_a_kept_response_lapses_after_its_ttl(store: IdempotencyStore) -> None:
    token = await claim(store)
    await store.complete("alice", "k1", token, RESPONSE, now=NOW, ttl=100)

    kept = await store.claim("alice", "k1", "fp", now=NOW + 99.9, lease=10)
    assert isinstance(kept, IdempotencyRecord)
    assert kept.response == RESPONSE
    assert isinstance(await store.claim("alice", "k1", "fp", now=NOW + 100, lease=10), Claimed)


async def test_a_released_key_cannot_be_completed(store: IdempotencyStore) -> None:
    token = await claim(store)
    await store.release("alice", "k1", token)

    assert not await store.complete("alice", "k1", token, RESPONSE, now=NOW, ttl=100)


async def test_a_closed_store_is_unavailable(store: IdempotencyStore) -> None:
    await store.close()

    with pytest.raises(StoreUnavailable) as caught:
        await store.claim("alice", "k1", "fp", now=NOW, lease=10)

    assert caught.value.store == type(store).__name__


async def test_an_unreachable_store_is_unavailable(stores: StoreFactory) -> None:
    store = stores.make_down()
    if stores.kind == "memory":
        await store.close()

    with pytest.raises(StoreUnavailable):
        await store.claim("alice", "k1", "fp", now=NOW, lease=10)


async def test_two_stores_on_one_backend_share_their_records(stores: StoreFactory) -> None:
    first, second = stores.make(), stores.make()
    token = await claim(first)
    await first.complete("alice", "k1", token, RESPONSE, now=NOW, ttl=100)

    kept = await second.claim("alice", "k1", "fp", now=NOW + 1, lease=10)

    assert kept == IdempotencyRecord("completed", "fp", NOW + 100, RESPONSE)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_sql_stores_purge_lapsed_records(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    factory = StoreFactory(kind, request, tmp_path)
    store = factory.make()
    assert isinstance(store, SQLiteStore | PostgresStore)
    try:
        token = await claim(store)
        await store.complete("alice", "k1", token, RESPONSE, now=NOW, ttl=100)
        await store.claim("alice", "k2", "fp", now=NOW, lease=10)

        assert await store.purge_expired(now=NOW + 50) == 1
        assert await store.purge_expired(now=NOW + 50) == 0
        kept = await store.claim("alice", "k1", "fp", now=NOW + 51, lease=10)
        assert isinstance(kept, IdempotencyRecord)
    finally:
        await factory.close()


def test_a_missing_redis_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)

    with pytest.raises(ImportError, match=r"pip install 'retrysafe\[redis\]'"):
        RedisStore("redis://127.0.0.1:1/0")


def test_a_missing_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)

    with pytest.raises(ImportError, match=r"pip install 'retrysafe\[postgres\]'"):
        PostgresStore("postgresql://127.0.0.1:1/postgres")


@pytest.mark.parametrize("table", ["", "1table", "drop table x;", "a-b", "t" * 64])
def test_sql_table_names_must_be_plain_identifiers(table: str) -> None:
    with pytest.raises(ValueError, match="identifier"):
        SQLiteStore(":memory:", table=table)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback port that accepts connections and never answers: a hung server."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


@pytest.mark.parametrize("kind", ["redis", "postgres"])
async def test_a_hung_server_fails_closed_within_the_timeout(kind: str, silent_server: str) -> None:
    store: IdempotencyStore
    if kind == "redis":
        store = RedisStore(f"redis://{silent_server}/0", timeout=0.3)
    else:
        store = PostgresStore(f"postgresql://postgres@{silent_server}/postgres", timeout=0.3)
    started = time.monotonic()

    with pytest.raises(StoreUnavailable, match="TimeoutError"):
        await store.claim("alice", "k1", "fp", now=NOW, lease=10)

    assert time.monotonic() - started < 2
    await store.close()


async def test_scopes_and_keys_that_join_to_the_same_text_stay_apart(
    store: IdempotencyStore,
) -> None:
    # A scope is the caller (an API client's id, a tenant): one caller's record must never
    # answer another's request, whatever characters their scopes and keys hold.
    first = await store.claim("tenant", "a:b", "fp", now=NOW, lease=10)
    assert isinstance(first, Claimed)

    for scope, key in (("tenant:a", "b"), ("tenant:a:b", "k"), ("tenant", "a%3Ab")):
        outcome = await store.claim(scope, key, "fp", now=NOW, lease=10)
        assert isinstance(outcome, Claimed), (scope, key)
