"""Leases and retention: in-flight repeats wait, dead claims are taken over and fenced,
kept responses lapse after the TTL. Time is a FakeClock. Every test runs on every store."""

from __future__ import annotations

import logging
import time

import anyio
import httpx
import pytest
from idempotency_app import build_app, client_for, headers
from idempotency_stores import InterposedStore
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from retrysafe.idempotency import (
    PROBLEM_TYPE_PREFIX,
    IdempotencyMiddleware,
    IdempotencyStore,
    MemoryStore,
    StoreUnavailable,
)
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


async def test_a_handler_that_outlives_its_lease_keeps_the_key_by_renewing_it(
    store: IdempotencyStore,
) -> None:
    clock = FakeClock()
    watched = InterposedStore(store)
    app = build_app(watched, clock=clock, lease=0.3)  # renewed every 0.1 s of real time
    shop = app.state.shop
    results: dict[str, httpx.Response] = {}
    async with client_for(app) as client:

        async def first() -> None:
            results["first"] = await client.post("/slow", json={}, headers=headers("k1"))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first)
            await shop.entered[1].wait()
            for _ in range(4):  # one step stays inside a lease; four run far past the first
                clock.advance(0.25)
                await watched.renewal(at_or_after=clock.time())
            during = await client.post("/slow", json={}, headers=headers("k1"))
            shop.gates[1].set()
        after = await client.post("/slow", json={}, headers=headers("k1"))

    assert during.status_code == 409
    assert results["first"].json() == {"run": 1}
    assert after.headers["idempotent-replayed"] == "true"
    assert after.json() == {"run": 1}
    assert shop.runs["/slow"] == 1


class BlinkingRenewalsStore(InterposedStore):
    """An InterposedStore that is unavailable for the first ``failing_extends`` renewals."""

    def __init__(self, inner: IdempotencyStore, *, failing_extends: int) -> None:
        super().__init__(inner)
        self.failing_extends = failing_extends

    async def extend(self, scope: str, key: str, token: str, *, now: float, lease: float) -> bool:
        if self.failing_extends:
            self.failing_extends -= 1
            raise StoreUnavailable("BlinkingRenewalsStore", "connection reset (injected)")
        return await super().extend(scope, key, token, now=now, lease=lease)


async def test_a_renewal_the_store_refuses_once_is_tried_again_and_the_key_kept(
    store: IdempotencyStore,
) -> None:
    """A blip at one renewal must not end renewing: the next one still holds the key."""
    clock = FakeClock()
    blinking = BlinkingRenewalsStore(store, failing_extends=1)
    app = build_app(blinking, clock=clock, lease=0.6)  # renewed every 0.2 s of real time
    shop = app.state.shop
    async with client_for(app) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: client.post("/slow", json={}, headers=headers("k1")))
        await shop.entered[1].wait()
        for _ in range(4):
            clock.advance(0.5)
            await blinking.renewal(at_or_after=clock.time())
        during = await client.post("/slow", json={}, headers=headers("k1"))
        shop.gates[1].set()

    assert blinking.failing_extends == 0
    assert during.status_code == 409
    assert shop.runs["/slow"] == 1


async def test_a_claim_lost_while_its_handler_runs_is_logged_as_an_error_without_secrets(
    store: IdempotencyStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    slow_store = InterposedStore(store)
    slow_store.hold_first_claims_renewals()  # the store stalls: the first lease runs out
    # (the lease is on the fake clock, which jumps past it; Redis also lets an unrenewed
    # key lapse after the lease in real time, which only the first claim's is meant to:
    # the takeover's renewals go through, or on a busy machine it lost its key as well and
    # logged a second loss: it did with a 0.9 s lease, renewed every 0.3 s, in a full run;
    # a 3 s lease renewed every second leaves that room)
    app = build_app(slow_store, clock=clock, lease=3.0)
    shop = app.state.shop
    results: dict[str, httpx.Response] = {}
    async with client_for(app) as client:

        async def post(name: str) -> None:
            results[name] = await client.post("/slow", json={}, headers=headers("k1"))

        with caplog.at_level(logging.WARNING, logger="retrysafe.idempotency"):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(post, "stale")
                await shop.entered[1].wait()
                clock.advance(4)
                tasks.start_soon(post, "takeover")
                await shop.entered[2].wait()
                slow_store.release_renewals()
                await slow_store.renewal(at_or_after=0, renewed=False)
                shop.gates[1].set()
                shop.gates[2].set()
        later = await client.post("/slow", json={}, headers=headers("k1"))

    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "was lost" in errors[0].getMessage()
    assert "'k1'" in errors[0].getMessage()
    assert "'alice'" in errors[0].getMessage()
    assert all(token not in caplog.text for token in slow_store.tokens)
    assert results["stale"].json() == {"run": 1}  # its handler ran on to the end
    assert results["takeover"].json() == {"run": 2}
    assert later.json() == {"run": 2}


async def test_a_lost_claim_is_not_renewed_again() -> None:
    """Once another request owns the key, renewing with the old token can only fail:
    renewal stops, rather than logging the loss again every third of a lease."""
    clock = FakeClock()
    watched = InterposedStore(MemoryStore())
    app = build_app(watched, clock=clock, lease=0.3)  # renewed every 0.1 s of real time
    shop = app.state.shop
    async with client_for(app) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: client.post("/slow", json={}, headers=headers("k1")))
        await shop.entered[1].wait()
        clock.advance(1)
        tasks.start_soon(lambda: client.post("/slow", json={}, headers=headers("k1")))
        await shop.entered[2].wait()
        await watched.renewal(at_or_after=0, renewed=False)
        await anyio.sleep(0.35)  # three more renewal periods
        lost = [now for now, renewed in watched.renewals if not renewed]
        shop.gates[1].set()
        shop.gates[2].set()

    assert len(lost) == 1


async def test_the_lease_is_renewed_well_before_it_ends(store: IdempotencyStore) -> None:
    """A renewal due only as the lease ends races the lease: it comes a third of the way
    in. (A wall-clock bound with a whole third of the lease as slack.)"""
    watched = InterposedStore(store)
    app = build_app(watched, lease=3.0)
    shop = app.state.shop
    async with client_for(app) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: client.post("/slow", json={}, headers=headers("k1")))
        await shop.entered[1].wait()
        started = time.monotonic()
        await watched.renewal(at_or_after=0)
        elapsed = time.monotonic() - started
        shop.gates[1].set()

    assert elapsed < 2.0


async def test_renewal_stops_once_the_outcome_is_kept_though_the_app_runs_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Background tasks run after the response went out: the claim is finished by then,
    so it is not renewed, nor reported lost, while they run."""
    watched = InterposedStore(MemoryStore())

    async def after_the_response() -> None:
        await anyio.sleep(0.35)  # three renewal periods

    async def create(request: Request) -> Response:
        return JSONResponse({}, status_code=201, background=BackgroundTask(after_the_response))

    app = Starlette(
        routes=[Route("/orders", create, methods=["POST"])],
        middleware=[
            Middleware(
                IdempotencyMiddleware,
                store=watched,
                scope=lambda r: "alice",
                required=True,
                lease=0.3,  # renewed every 0.1 s of real time
            )
        ],
    )
    with caplog.at_level(logging.WARNING, logger="retrysafe.idempotency"):
        async with client_for(app) as client:
            response = await client.post("/orders", json={}, headers={"Idempotency-Key": "k1"})

    assert response.status_code == 201
    assert [renewed for _, renewed in watched.renewals if not renewed] == []
    assert caplog.records == []


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
