"""One store serves an app however many event loops run it, one after another.

The docs say to make a store once. A test suite then runs the same app on a new event
loop per test (Starlette's ``TestClient``, ``asyncio.run`` per test): every store must
answer on each loop as on the first. (A Redis connection works only on the loop that
opened it: RedisStore keeps one client per loop.)
"""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
import weakref
from pathlib import Path

import pytest
from idempotency_stores import SHARED_STORE_KINDS, new_namespace, open_store
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from retrysafe.idempotency import IdempotencyMiddleware, IdempotencyStore, RedisStore

pytestmark = pytest.mark.anyio


def _location(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return str(tmp_path / "store.sqlite3")
    return str(request.getfixturevalue("redis_url" if kind == "redis" else "postgres_dsn"))


@pytest.mark.parametrize("kind", SHARED_STORE_KINDS)
def test_an_app_keeps_its_store_across_test_clients(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store: IdempotencyStore = open_store(kind, _location(kind, request, tmp_path), new_namespace())
    runs: list[str] = []

    async def create(request: Request) -> JSONResponse:
        runs.append(request.headers["idempotency-key"])
        return JSONResponse({"created": len(runs)}, status_code=201)

    app = IdempotencyMiddleware(
        Starlette(routes=[Route("/things", create, methods=["POST"])]),
        store,
        scope=lambda request: "caller",
        required=True,
    )
    answers = []
    for key in ("a", "a", "b", "c"):  # a new event loop for every request
        with TestClient(app) as client:
            answer = client.post("/things", json={}, headers={"Idempotency-Key": key})
            answers.append(
                (answer.status_code, answer.json(), answer.headers.get("idempotent-replayed"))
            )
    assert answers == [
        (201, {"created": 1}, None),
        (201, {"created": 1}, "true"),
        (201, {"created": 2}, None),
        (201, {"created": 3}, None),
    ]
    assert runs == ["a", "b", "c"]
    asyncio.run(store.close())


def test_a_closed_redis_store_refuses_on_any_loop(redis_url: str) -> None:
    store = RedisStore(redis_url, prefix=f"{new_namespace()}:")
    asyncio.run(store.claim("s", "k", "f", now=1.0, lease=5.0))
    asyncio.run(store.close())
    with pytest.raises(Exception, match="closed"):
        asyncio.run(store.claim("s", "k2", "f", now=1.0, lease=5.0))


def test_a_redis_store_lets_go_of_loops_that_have_closed(redis_url: str) -> None:
    # A loop per test for a whole suite: the store keeps the client of the loop it runs
    # on, not one (and its Redis connection) for every loop it has ever seen.
    store = RedisStore(redis_url, prefix=f"{new_namespace()}:")
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def one(number: int) -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        await store.claim("s", f"k{number}", "f", now=1.0, lease=5.0)

    for number in range(5):
        asyncio.run(one(number))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # (their sockets, closed here)
        gc.collect()
    assert [ref() is not None for ref in loops] == [False, False, False, False, True]
    asyncio.run(store.close())


def test_closing_a_redis_store_closes_another_threads_loops_connections(redis_url: str) -> None:
    import redis

    admin = redis.Redis.from_url(redis_url)
    gc.collect()
    before = admin.info("clients")["connected_clients"]
    store = RedisStore(redis_url, prefix=f"{new_namespace()}:")
    other = asyncio.new_event_loop()
    runner = threading.Thread(target=other.run_forever, daemon=True)
    runner.start()
    try:
        asyncio.run_coroutine_threadsafe(
            store.claim("s", "k", "f", now=1.0, lease=5.0), other
        ).result(timeout=10)
        assert admin.info("clients")["connected_clients"] == before + 1
        asyncio.run(store.close())  # (on this thread's own loop)
        assert admin.info("clients")["connected_clients"] <= before
    finally:
        other.call_soon_threadsafe(other.stop)
        runner.join(timeout=10)
        other.close()
        admin.close()
