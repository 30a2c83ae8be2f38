"""A keyed write runs once per caller; repeats get its response replayed; other requests
under the same key are refused. Every test runs against every store."""

from __future__ import annotations

import json

import pytest
from idempotency_app import build_app, client_for, headers
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from retrysafe.idempotency import (
    PROBLEM_TYPE_PREFIX,
    IdempotencyMiddleware,
    IdempotencyStore,
    MemoryStore,
)

pytestmark = pytest.mark.anyio


def assert_problem(response_status: int, document: dict[str, object], slug: str) -> None:
    assert document["type"] == PROBLEM_TYPE_PREFIX + slug
    assert document["status"] == response_status
    assert isinstance(document["title"], str)
    assert isinstance(document["detail"], str)
    assert document["title"]
    assert document["detail"]


async def test_first_request_runs_once_and_a_repeat_replays_it(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        first = await client.post("/orders", json={"item": "tea"}, headers=headers("k1"))
        repeat = await client.post("/orders", json={"item": "tea"}, headers=headers("k1"))

    assert first.status_code == repeat.status_code == 201
    assert "idempotent-replayed" not in first.headers
    assert repeat.headers["idempotent-replayed"] == "true"
    assert repeat.content == first.content
    assert app.state.shop.runs["/orders"] == 1


async def test_replay_keeps_safe_headers_but_never_set_cookie(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        first = await client.post("/orders", json={}, headers=headers("k1"))
        repeat = await client.post("/orders", json={}, headers=headers("k1"))

    assert "set-cookie" in first.headers
    assert "set-cookie" not in repeat.headers
    assert repeat.headers["x-order"] == first.headers["x-order"] == "1"
    assert repeat.headers["cache-control"] == "no-store"
    assert repeat.headers["content-type"] == "application/json"
    assert repeat.headers["content-length"] == str(len(first.content))


async def test_json_formatting_and_key_order_do_not_make_another_request(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    compact = b'{"a":1,"b":[1,2]}'
    spaced = b'{ "b" : [1, 2],\n  "a" : 1 }'
    content_type = {"Content-Type": "application/json"}
    async with client_for(app) as client:
        first = await client.post("/orders", content=compact, headers=headers("k1") | content_type)
        repeat = await client.post("/orders", content=spaced, headers=headers("k1") | content_type)

    assert repeat.status_code == 201
    assert repeat.headers["idempotent-replayed"] == "true"
    assert repeat.content == first.content
    assert app.state.shop.runs["/orders"] == 1


async def test_an_amount_that_differs_past_float_precision_is_a_different_request(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    content_type = {"Content-Type": "application/json"}
    async with client_for(app) as client:
        first = await client.post(
            "/orders",
            content=b'{"amount": 12345678901234567.89}',
            headers=headers("k1") | content_type,
        )
        other = await client.post(
            "/orders",
            content=b'{"amount": 12345678901234567.88}',
            headers=headers("k1") | content_type,
        )

    assert first.status_code == 201
    assert other.status_code == 422
    assert app.state.shop.runs["/orders"] == 1


async def test_a_different_body_is_422_and_the_original_still_replays(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        first = await client.post("/orders", json={"item": "tea"}, headers=headers("k1"))
        other = await client.post("/orders", json={"item": "cake"}, headers=headers("k1"))
        again = await client.post("/orders", json={"item": "tea"}, headers=headers("k1"))

    assert other.status_code == 422
    assert other.headers["content-type"] == "application/problem+json"
    assert_problem(422, other.json(), "key-reused")
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert app.state.shop.runs["/orders"] == 1


@pytest.mark.parametrize(
    ("first", "other"),
    [
        ({"auth_amount": 100, "currency": "usd"}, {"auth_amount": 99999, "currency": "usd"}),
        (
            {"payment_token": "tok_1N3T00LkdIwHu7ixAAAA"},
            {"payment_token": "tok_1N3T00LkdIwHu7ixBBBB"},
        ),
    ],
)
async def test_another_sum_or_card_token_under_the_same_key_is_422_not_a_replay(
    store: IdempotencyStore, first: dict[str, object], other: dict[str, object]
) -> None:
    """Fields named like credentials (``auth``, ``token``) count by their value: the first
    charge's 201 must not answer a request for another sum or another card (trial62)."""
    app = build_app(store)
    async with client_for(app) as client:
        await client.post("/orders", json=first, headers=headers("k1"))
        reused = await client.post("/orders", json=other, headers=headers("k1"))

    assert reused.status_code == 422
    assert_problem(422, reused.json(), "key-reused")
    assert app.state.shop.runs["/orders"] == 1


async def test_the_same_key_on_another_path_is_422(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        await client.post("/orders", json={}, headers=headers("k1"))
        other = await client.post("/orders/other", json={}, headers=headers("k1"))

    assert other.status_code == 422
    assert_problem(422, other.json(), "key-reused")
    assert app.state.shop.runs["/orders/other"] == 0


async def test_the_same_key_with_another_query_is_422(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        await client.post("/orders?express=1", json={}, headers=headers("k1"))
        other = await client.post("/orders?express=0", json={}, headers=headers("k1"))
        reordered = await client.post("/orders?express=1", json={}, headers=headers("k1"))

    assert other.status_code == 422
    assert reordered.headers["idempotent-replayed"] == "true"
    assert app.state.shop.runs["/orders"] == 1


async def test_the_same_key_with_another_method_is_422(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        await client.post("/orders", json={}, headers=headers("k1"))
        other = await client.patch("/orders", json={}, headers=headers("k1"))

    assert other.status_code == 422
    assert app.state.shop.runs["/orders"] == 1


async def test_another_caller_with_the_same_key_runs_separately(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        alice = await client.post("/orders", json={"who": "a"}, headers=headers("k1"))
        bob = await client.post("/orders", json={"who": "b"}, headers=headers("k1", caller="bob"))
        bob_again = await client.post(
            "/orders", json={"who": "b"}, headers=headers("k1", caller="bob")
        )

    assert bob.status_code == 201
    assert "idempotent-replayed" not in bob.headers
    assert bob.json()["received"] == {"who": "b"}
    assert bob.json()["order"] == 2
    assert alice.json()["order"] == 1
    assert bob_again.json() == bob.json()
    assert app.state.shop.runs["/orders"] == 2


async def test_a_keyed_request_without_a_verified_caller_is_401(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        response = await client.post("/orders", json={}, headers=headers("k1", caller=None))

    assert response.status_code == 401
    assert_problem(401, response.json(), "caller-unknown")
    assert app.state.shop.runs["/orders"] == 0


async def test_an_empty_caller_is_not_a_caller() -> None:
    """A scope that returns ``""`` (an unset user id) identifies nobody: pooling every
    such request under one caller would let strangers replay each other's responses."""
    runs = 0

    async def create(request: Request) -> Response:
        nonlocal runs
        runs += 1
        return JSONResponse({"run": runs}, status_code=201)

    app = Starlette(
        routes=[Route("/orders", create, methods=["POST"])],
        middleware=[
            Middleware(
                IdempotencyMiddleware, store=MemoryStore(), scope=lambda r: "", required=True
            )
        ],
    )
    async with client_for(app) as client:
        response = await client.post("/orders", json={}, headers={"Idempotency-Key": "k1"})

    assert response.status_code == 401
    assert_problem(401, response.json(), "caller-unknown")
    assert runs == 0


async def test_a_missing_key_is_400_where_required(store: IdempotencyStore) -> None:
    app = build_app(store, required=True)
    async with client_for(app) as client:
        response = await client.post("/orders", json={}, headers=headers())

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert_problem(400, response.json(), "key-missing")
    assert app.state.shop.runs["/orders"] == 0


async def test_a_missing_key_passes_through_where_optional(store: IdempotencyStore) -> None:
    app = build_app(store, required=False)
    async with client_for(app) as client:
        first = await client.post("/orders", json={}, headers=headers())
        second = await client.post("/orders", json={}, headers=headers())

    assert first.status_code == second.status_code == 201
    assert "idempotent-replayed" not in second.headers
    assert app.state.shop.runs["/orders"] == 2


async def test_get_ignores_keys(store: IdempotencyStore) -> None:
    app = build_app(store, required=True)
    async with client_for(app) as client:
        first = await client.get("/orders", headers=headers("k1"))
        second = await client.get("/orders", headers=headers("k1"))

    assert first.json() == {"listed": 1}
    assert second.json() == {"listed": 2}
    assert "idempotent-replayed" not in second.headers


async def test_put_is_not_guarded_by_default_and_patch_is(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        put = await client.put("/orders", json={}, headers=headers())
        patch = await client.patch("/orders", json={}, headers=headers())

    assert put.status_code == 201
    assert patch.status_code == 400


async def test_a_keyed_body_over_the_limit_is_413_and_the_handler_does_not_run(
    store: IdempotencyStore,
) -> None:
    app = build_app(store, max_body_size=64)
    async with client_for(app) as client:
        too_big = await client.post("/orders", json={"x": "y" * 100}, headers=headers("k1"))
        streamed = await client.post("/orders", content=_chunks(b"z" * 100), headers=headers("k2"))
        fits = await client.post("/orders", json={"x": "y"}, headers=headers("k1"))

    assert too_big.status_code == streamed.status_code == 413
    assert_problem(413, too_big.json(), "body-too-large")
    assert fits.status_code == 201
    assert app.state.shop.runs["/orders"] == 1


async def test_a_keyed_body_of_exactly_the_limit_is_accepted_and_one_byte_more_is_413(
    store: IdempotencyStore,
) -> None:
    """The limit is the largest body allowed, whether its length is declared or not."""
    app = build_app(store, max_body_size=64)
    body = b'{"x": "' + b"y" * 55 + b'"}'
    over = b'{"x": "' + b"y" * 56 + b'"}'
    assert (len(body), len(over)) == (64, 65)
    content_type = {"Content-Type": "application/json"}
    async with client_for(app) as client:
        declared = await client.post("/orders", content=body, headers=headers("k1") | content_type)
        streamed = await client.post(
            "/orders", content=_chunks(body), headers=headers("k2") | content_type
        )
        declared_over = await client.post(
            "/orders", content=over, headers=headers("k3") | content_type
        )
        streamed_over = await client.post(
            "/orders", content=_chunks(over), headers=headers("k4") | content_type
        )

    assert declared.status_code == streamed.status_code == 201
    assert declared_over.status_code == streamed_over.status_code == 413
    assert app.state.shop.runs["/orders"] == 2


async def test_a_body_that_is_not_json_is_compared_byte_for_byte(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    async with client_for(app) as client:
        await client.post("/status/201", content=b"a=1&b=2", headers=headers("k1") | form)
        same = await client.post("/status/201", content=b"a=1&b=2", headers=headers("k1") | form)
        reordered = await client.post(
            "/status/201", content=b"b=2&a=1", headers=headers("k1") | form
        )

    assert same.headers["idempotent-replayed"] == "true"
    assert reordered.status_code == 422


async def _chunks(data: bytes):  # type: ignore[no-untyped-def]
    """A streamed request body without Content-Length."""
    for start in range(0, len(data), 10):
        yield data[start : start + 10]


def test_problem_documents_are_plain_json() -> None:
    from retrysafe.idempotency.problems import key_reused

    document = key_reused("Idempotency-Key").document()

    assert json.loads(json.dumps(document)) == document
    assert set(document) == {"type", "title", "status", "detail"}


def test_hop_by_hop_headers_and_cookies_are_never_kept() -> None:
    from retrysafe.idempotency.replay import stored_response

    kept = stored_response(
        200,
        [
            (b"Content-Type", b"text/plain"),
            (b"Connection", b"keep-alive, X-Trace"),
            (b"X-Trace", b"per-connection"),
            (b"Keep-Alive", b"timeout=5"),
            (b"Transfer-Encoding", b"chunked"),
            (b"Set-Cookie", b"session=secret"),
            (b"Content-Length", b"2"),
            (b"Date", b"Tue, 14 Nov 2023 22:13:20 GMT"),
            (b"ETag", b'"v1"'),
        ],
        b"ok",
    )

    assert kept.headers == (("content-type", "text/plain"), ("etag", '"v1"'))
