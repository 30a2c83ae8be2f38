"""A keyed write the app redirects with a 307 or 308 is one operation, followed under its
key: each hop runs once, and a repeat of the whole chain replays every hop. A different
request under the key is still refused, at the redirect's target as anywhere else.

Before, the 307 was kept as the key's outcome and the request at its target, whose path
differs, was refused as the key reused (422): such a write never succeeded under its key
(trial92). Every test runs against every store.
"""

from __future__ import annotations

import collections

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import retrysafe
from retrysafe.idempotency import PROBLEM_TYPE_PREFIX, IdempotencyMiddleware, IdempotencyStore

pytestmark = pytest.mark.anyio

#: Where each moved path now lives (a 307 or 308 with the same method and body).
MOVED = {
    "/v1/payments": (308, "/v2/payments"),
    "/v2/payments": (307, "/v3/payments?region=eu"),
    "/old-orders": (307, "http://shop.test/orders"),
}


def _app(store: IdempotencyStore) -> tuple[Starlette, collections.Counter[str]]:
    runs: collections.Counter[str] = collections.Counter()

    async def moved(request: Request) -> Response:
        runs[request.url.path] += 1
        status, location = MOVED[request.url.path]
        return Response(status_code=status, headers={"location": location})

    async def create(request: Request) -> Response:
        runs[request.url.path] += 1
        body = await request.json()
        return JSONResponse({"n": sum(runs.values()), **body}, status_code=201)

    app = Starlette(
        routes=[
            *(Route(path, moved, methods=["POST"]) for path in MOVED),
            Route("/v3/payments", create, methods=["POST"]),
            Route("/orders", create, methods=["POST"]),
            Route("/elsewhere", create, methods=["POST"]),
        ],
        middleware=[
            Middleware(IdempotencyMiddleware, store=store, scope=lambda _: "alice", required=True)
        ],
    )
    return app, runs


def _client(app: Starlette) -> retrysafe.AsyncClient:
    return retrysafe.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://shop.test", follow_redirects=True
    )


def _bare_client(app: Starlette) -> httpx.AsyncClient:
    """httpx alone, following nothing: each hop is sent by the test, key header and all."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shop.test")


async def test_a_keyed_write_followed_through_a_307_runs_once_per_hop(
    store: IdempotencyStore,
) -> None:
    app, runs = _app(store)
    async with _client(app) as client:
        first = await client.post("/old-orders", json={"item": "tea"}, idempotency_key="k-307")
        again = await client.post("/old-orders", json={"item": "tea"}, idempotency_key="k-307")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert runs == {"/old-orders": 1, "/orders": 1}


async def test_a_chain_of_redirects_is_followed_and_replayed_hop_by_hop(
    store: IdempotencyStore,
) -> None:
    app, runs = _app(store)
    async with _client(app) as client:
        first = await client.post("/v1/payments", json={"cents": 5}, idempotency_key="k-chain")
        again = await client.post("/v1/payments", json={"cents": 5}, idempotency_key="k-chain")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert [str(hop.url) for hop in again.history] == [
        "http://shop.test/v1/payments",
        "http://shop.test/v2/payments",
    ]
    assert runs == {"/v1/payments": 1, "/v2/payments": 1, "/v3/payments": 1}


async def test_another_request_under_the_key_at_the_redirects_target_is_refused(
    store: IdempotencyStore,
) -> None:
    app, runs = _app(store)
    async with _bare_client(app) as client:
        headers = {"Idempotency-Key": "k-other"}
        moved = await client.post("/old-orders", json={"item": "tea"}, headers=headers)
        hop = await client.post("/orders", json={"item": "tea"}, headers=headers)
        other_body = await client.post("/orders", json={"item": "cake"}, headers=headers)
        same_hop = await client.post("/orders", json={"item": "tea"}, headers=headers)
    assert (moved.status_code, hop.status_code) == (307, 201)
    assert other_body.status_code == 422
    assert other_body.json()["type"] == PROBLEM_TYPE_PREFIX + "key-reused"
    assert same_hop.headers["idempotent-replayed"] == "true"
    assert runs == {"/old-orders": 1, "/orders": 1}


async def test_a_request_under_the_key_where_no_redirect_led_is_refused_and_claims_nothing(
    store: IdempotencyStore,
) -> None:
    app, runs = _app(store)
    async with _bare_client(app) as client:
        headers = {"Idempotency-Key": "k-astray"}
        assert (await client.post("/v1/payments", json={}, headers=headers)).status_code == 308
        astray = await client.post("/elsewhere", json={}, headers=headers)
        # The hop the chain does lead to is still free to run (nothing was left claimed
        # on the way: /v2/payments was never sent).
        onward = await client.post("/v2/payments", json={}, headers=headers)
    assert astray.status_code == 422
    assert astray.json()["type"] == PROBLEM_TYPE_PREFIX + "key-reused"
    assert onward.status_code == 307
    assert runs == {"/v1/payments": 1, "/v2/payments": 1}
