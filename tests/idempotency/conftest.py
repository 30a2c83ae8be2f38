"""Fixtures for the idempotency middleware's suite: real Redis and PostgreSQL, every store.

Redis and PostgreSQL are started once per session on free loopback ports and stopped at
the end. Where one is not installed the tests needing it are skipped, except under CI
(the ``CI`` variable set), where a missing server is a failure.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from idempotency_stores import STORE_KINDS, StoreFactory
from store_servers import ServerNotInstalled, postgres_server, redis_server

from retrysafe.idempotency import IdempotencyStore


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: RedisStore and PostgresStore use asyncio clients (redis-py, psycopg).

    The middleware itself is anyio code; test_idempotency_trio.py runs it on trio.
    """
    return "asyncio"


def _start(server: Callable[[], contextlib.AbstractContextManager[str]]) -> Iterator[str]:
    try:
        with server() as url:
            yield url
    except ServerNotInstalled as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc}; under CI every store must be tested")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A private redis-server for the session."""
    yield from _start(redis_server)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A private PostgreSQL cluster for the session."""
    yield from _start(postgres_server)


@pytest.fixture(params=STORE_KINDS)
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """A factory of stores of each kind in turn."""
    factory = StoreFactory(str(request.param), request, tmp_path)
    yield factory
    await factory.close()


@pytest.fixture
def store(stores: StoreFactory) -> IdempotencyStore:
    """One store of each kind in turn, on a backend private to the test."""
    return stores.make()
