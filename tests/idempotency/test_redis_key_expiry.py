"""Redis drops each record's key by itself once the record has lapsed, and not before.

A record's ``expires_at`` is compared with the middleware's clock; the key's own expiry
(PEXPIRE) only collects lapsed records, so nothing accumulates in Redis. That expiry runs
on Redis's real clock and must follow the record through every change: a key dropped
early loses a claim or a kept response, and a key never dropped stays for good. Real
time on the session's redis-server, with leases of a few tenths of a second.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
import redis
from idempotency_stores import new_namespace

from retrysafe.idempotency import Claimed, IdempotencyRecord, RedisStore, StoredResponse

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000.0  # the middleware's clock: it does not move in these tests
RESPONSE = StoredResponse(201, (("content-type", "text/plain"),), b"paid")
#: A lease short enough to wait out; the waits below are twice as long.
SHORT = 0.3


class RedisNamespace:
    """A store under a prefix no other test uses, and a look at the keys it wrote."""

    def __init__(self, url: str) -> None:
        self.prefix = f"{new_namespace()}:"
        self.store = RedisStore(url, prefix=self.prefix)
        self._admin = redis.Redis.from_url(url)

    def keys(self) -> list[bytes]:
        return list(self._admin.scan_iter(match=f"{self.prefix}*"))

    def milliseconds_left(self) -> list[int]:
        return [int(self._admin.pttl(key)) for key in self.keys()]

    async def close(self) -> None:
        await self.store.close()
        self._admin.close()


@pytest.fixture
async def redis_namespace(redis_url: str) -> AsyncIterator[RedisNamespace]:
    namespace = RedisNamespace(redis_url)
    yield namespace
    await namespace.close()


async def claim(store: RedisStore, *, lease: float) -> str:
    outcome = await store.claim("alice", "k1", "fp", now=NOW, lease=lease)
    assert isinstance(outcome, Claimed)
    return outcome.token


async def test_a_claim_keeps_its_key_in_redis_for_its_whole_lease(
    redis_namespace: RedisNamespace,
) -> None:
    await claim(redis_namespace.store, lease=60)

    await anyio.sleep(2 * SHORT)
    held = await redis_namespace.store.claim("alice", "k1", "fp2", now=NOW + 1, lease=60)

    assert held == IdempotencyRecord("in_flight", "fp", NOW + 60)
    [left] = redis_namespace.milliseconds_left()
    assert 50_000 < left <= 60_000


async def test_a_kept_response_outlives_the_lease_of_the_claim_that_kept_it(
    redis_namespace: RedisNamespace,
) -> None:
    store = redis_namespace.store
    token = await claim(store, lease=SHORT)
    assert await store.complete("alice", "k1", token, RESPONSE, now=NOW, ttl=3600)

    await anyio.sleep(2 * SHORT)
    kept = await store.claim("alice", "k1", "fp", now=NOW + 1, lease=60)

    assert kept == IdempotencyRecord("completed", "fp", NOW + 3600, RESPONSE)
    [left] = redis_namespace.milliseconds_left()
    assert 3_500_000 < left <= 3_600_000


async def test_a_renewed_claim_keeps_its_key_past_its_first_lease(
    redis_namespace: RedisNamespace,
) -> None:
    store = redis_namespace.store
    token = await claim(store, lease=SHORT)
    assert await store.extend("alice", "k1", token, now=NOW, lease=60)

    await anyio.sleep(2 * SHORT)
    held = await store.claim("alice", "k1", "fp", now=NOW + 1, lease=60)

    assert held == IdempotencyRecord("in_flight", "fp", NOW + 60)


@pytest.mark.parametrize("outcome", ["in_flight", "completed", "not_replayable"])
async def test_redis_drops_the_key_of_a_lapsed_record_by_itself(
    redis_namespace: RedisNamespace, outcome: str
) -> None:
    """Nobody claims the key again: Redis itself removes it once the record lapsed."""
    store = redis_namespace.store
    token = await claim(store, lease=SHORT)
    if outcome != "in_flight":
        response = RESPONSE if outcome == "completed" else None
        assert await store.complete("alice", "k1", token, response, now=NOW, ttl=SHORT)
    assert len(redis_namespace.keys()) == 1

    await anyio.sleep(2 * SHORT)
    assert redis_namespace.keys() == []
