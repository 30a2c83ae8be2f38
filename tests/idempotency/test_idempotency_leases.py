"""Leases and retention: in-flight repeats wait, dead claims are taken over and fenced,
kept responses lapse after the TTL. Time is a FakeClock. Every test runs on every store."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest
from idempotency_app import build_app, client_for, headers

from retrysafe.idempotency import PROBLEM_TYPE_PREFIX, IdempotencyStore
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio


async def test_a_repeat_while_the_first_runs_is_409_with_retry_after(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    shop = app.state.shop
    results: dict[str, httpx.Response] = {}
    async with client_for(app) as client:

        async def first() -> None:
            results["first"] = await client.post("/slow", json={}, headers=headers("k1"))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first)
            await shop.entered[1].wait()
            during = await client.post("/slow", json={}, headers=headers("k1"))
            different = await client.post("/slow", json={"x": 1}, headers=headers("k1"))
            shop.gates[1].set()
        after = await client.post("/slow", json={}, headers=headers("k1"))

    assert during.status_code == 409
    assert during.headers["retry-after"] == "1"
    assert during.json()["type"] == PROBLEM_TYPE_PREFIX + "request-in-flight"
    assert different.status_code == 422
    assert results["first"].status_code == 201
    assert after.headers["idempotent-replayed"] == "true"
    assert after.json() == results["first"].json() == {"run": 1}
    assert shop.runs["/slow"] == 1


async def test_retry_after_never_points_past_the_end_of_the_lease(
    store: IdempotencyStore,
) -> None:
    clock = FakeClock()
    app = build_app(store, clock=clock, lease=10, in_flight_retry_after=30)
    shop = app.state.shop
    async with client_for(app) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: client.post("/slow", json={}, headers=headers("k1")))
        await shop.entered[1].wait()
        clock.advance(7.5)
        during = await client.post("/slow", json={}, headers=headers("k1"))
        shop.gates[1].set()

    assert during.headers["retry-after"] == "3"


async def test_an_expired_lease_is_taken_over_and_the_late_owner_cannot_overwrite(
    store: IdempotencyStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    app = build_app(store, clock=clock, lease=10)
    shop = app.state.shop
    results: dict[str, httpx.Response] = {}
    async with client_for(app) as client:
        took_over = anyio.Event()

        async def post(name: str) -> None:
            results[name] = await client.post("/slow", json={}, headers=headers("k1"))
            if name == "takeover":
                took_over.set()

        with caplog.at_level(logging.WARNING, logger="retrysafe.idempotency"):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(post, "stale")
                await shop.entered[1].wait()
                clock.advance(11)  # the first claim's lease runs out
                tasks.start_soon(post, "takeover")
                await shop.entered[2].wait()
                shop.gates[2].set()
                await took_over.wait()
                shop.gates[1].set()  # the old owner finishes late
        later = await client.post("/slow", json={}, headers=headers("k1"))

    assert results["takeover"].json() == {"run": 2}
    assert results["stale"].json() == {"run": 1}  # its own client still gets its answer
    assert later.headers["idempotent-replayed"] == "true"
    assert later.json() == {"run": 2}
    assert shop.runs["/slow"] == 2
    assert "another request took the key over" in caplog.text


async def test_a_kept_response_outlives_the_lease(store: IdempotencyStore) -> None:
    clock = FakeClock()
    app = build_app(store, clock=clock, lease=10, ttl=100)
    async with client_for(app) as client:
        await client.post("/orders", json={}, headers=headers("k1"))
        clock.advance(50)
        repeat = await client.post("/orders", json={}, headers=headers("k1"))

    assert repeat.headers["idempotent-replayed"] == "true"
    assert app.state.shop.runs["/orders"] == 1


async def test_after_the_ttl_a_repeat_runs_as_new(store: IdempotencyStore) -> None:
    clock = FakeClock()
    app = build_app(store, clock=clock, ttl=100)
    async with client_for(app) as client:
        await client.post("/orders", json={}, headers=headers("k1"))
        clock.advance(99)
        within = await client.post("/orders", json={}, headers=headers("k1"))
        clock.advance(2)
        after = await client.post("/orders", json={}, headers=headers("k1"))
        after_repeat = await client.post("/orders", json={}, headers=headers("k1"))

    assert within.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in after.headers
    assert after.json()["order"] == 2
    assert after_repeat.json()["order"] == 2
    assert app.state.shop.runs["/orders"] == 2


async def test_after_the_ttl_the_key_may_carry_a_different_request(
    store: IdempotencyStore,
) -> None:
    clock = FakeClock()
    app = build_app(store, clock=clock, ttl=100)
    async with client_for(app) as client:
        await client.post("/orders", json={"item": "tea"}, headers=headers("k1"))
        clock.advance(101)
        other = await client.post("/orders", json={"item": "cake"}, headers=headers("k1"))

    assert other.status_code == 201
    assert other.json()["received"] == {"item": "cake"}
