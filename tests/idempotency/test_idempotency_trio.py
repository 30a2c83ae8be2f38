"""The middleware is anyio code: with an anyio-friendly store it runs on trio too."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from idempotency_app import Shop, build_app, client_for, headers
from idempotency_stores import InterposedStore

from retrysafe.idempotency import IdempotencyStore, MemoryStore, SQLiteStore
from retrysafe.testing import FakeClock

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["trio"])]


@pytest.fixture(params=["memory", "sqlite"])
def trio_store(request: pytest.FixtureRequest, tmp_path: Path) -> IdempotencyStore:
    if request.param == "memory":
        return MemoryStore()
    return SQLiteStore(tmp_path / "store.sqlite3")


async def test_a_repeat_replays_on_trio(trio_store: IdempotencyStore) -> None:
    app = build_app(trio_store)
    async with client_for(app) as client:
        first = await client.post("/orders", json={}, headers=headers("k1"))
        repeat = await client.post("/orders", json={}, headers=headers("k1"))

    assert repeat.headers["idempotent-replayed"] == "true"
    assert repeat.content == first.content
    await trio_store.close()


async def test_concurrent_duplicates_run_once_on_trio(trio_store: IdempotencyStore) -> None:
    app = build_app(trio_store, shop=Shop(handler_delay=0.05))
    async with client_for(app) as client, trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(lambda: client.post("/orders", json={}, headers=headers("k1")))

    assert app.state.shop.runs["/orders"] == 1
    await trio_store.close()


async def test_a_long_handler_renews_its_lease_on_trio(trio_store: IdempotencyStore) -> None:
    clock = FakeClock()
    watched = InterposedStore(trio_store)
    app = build_app(watched, clock=clock, lease=0.3)
    shop = app.state.shop
    results: dict[str, httpx.Response] = {}
    async with client_for(app) as client:

        async def first() -> None:
            results["first"] = await client.post("/slow", json={}, headers=headers("k1"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            await shop.entered[1].wait()
            for _ in range(4):
                clock.advance(0.25)
                await watched.renewal(at_or_after=clock.time())
            during = await client.post("/slow", json={}, headers=headers("k1"))
            shop.gates[1].set()

    assert during.status_code == 409
    assert results["first"].json() == {"run": 1}
    assert shop.runs["/slow"] == 1
    await trio_store.close()
