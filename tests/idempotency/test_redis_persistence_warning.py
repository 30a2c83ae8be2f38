"""A RedisStore on a Redis that keeps nothing across a restart says so, once.

Records live in Redis's memory: restarted without its append-only file or snapshots,
Redis forgets every key, and a repeat of a write that ran already runs it again (a
user trial charged twice that way). The store asks Redis once, at its first operation,
and warns. The session's redis-server runs with persistence off, as a cache would.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis
from idempotency_stores import new_namespace

from retrysafe.idempotency import RedisStore

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # (redis-py's asyncio client)


@pytest.fixture
def snapshots_on(redis_url: str) -> Iterator[None]:
    """The session's Redis with RDB snapshots on for the test (nothing is written before
    an hour has passed), and off again after it."""
    admin = redis.Redis.from_url(redis_url)
    admin.config_set("save", "3600 1")
    try:
        yield
    finally:
        admin.config_set("save", "")
        admin.close()


async def warnings_after_claims(
    redis_url: str, caplog: pytest.LogCaptureFixture, *keys: str
) -> list[str]:
    """The store's warnings about persistence, after claiming ``keys`` on a new store."""
    caplog.set_level(logging.WARNING, logger="retrysafe.idempotency")
    store = RedisStore(redis_url, prefix=f"{new_namespace()}:")
    try:
        for key in keys:
            await store.claim("alice", key, "fp", now=NOW, lease=5)
    finally:
        await store.close()
    return [r.getMessage() for r in caplog.records if "keeps nothing across" in r.getMessage()]


async def test_a_redis_that_forgets_on_restart_is_warned_of_once(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    warned = await warnings_after_claims(redis_url, caplog, "k1", "k2", "k3")
    assert len(warned) == 1
    assert "appendonly yes" in warned[0]
    assert redis_url.rsplit(":", 1)[-1].split("/")[0] not in warned[0]  # (no address)


@pytest.mark.usefixtures("snapshots_on")
async def test_a_redis_that_persists_is_not_warned_of(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert await warnings_after_claims(redis_url, caplog, "k1") == []
