"""Which outcomes are kept for replay, which free the key, and which are refused for good.
Every test runs against every store."""

from __future__ import annotations

import logging

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
    mark_committed,
)

pytestmark = pytest.mark.anyio


async def test_a_handler_exception_releases_the_key(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        first = await client.post("/boom", json={}, headers=headers("k1"))
        second = await client.post("/boom", json={}, headers=headers("k1"))

    assert first.status_code == second.status_code == 500
    assert "idempotent-replayed" not in second.headers
    assert app.state.shop.runs["/boom"] == 2


@pytest.mark.parametrize("status", [500, 503])
async def test_a_5xx_is_not_kept_by_default(store: IdempotencyStore, status: int) -> None:
    app = build_app(store)
    path = f"/status/{status}"
    async with client_for(app) as client:
        first = await client.post(path, json={}, headers=headers("k1"))
        second = await client.post(path, json={}, headers=headers("k1"))

    assert first.status_code == second.status_code == status
    assert "idempotent-replayed" not in second.headers
    assert app.state.shop.runs[path] == 2


async def test_a_429_frees_the_key_since_nothing_was_processed(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        await client.post("/status/429", json={}, headers=headers("k1"))
        second = await client.post("/status/429", json={}, headers=headers("k1"))

    assert "idempotent-replayed" not in second.headers
    assert app.state.shop.runs["/status/429"] == 2


# 422 is not kept: it means the request was refused before any work (see
# test_idempotency_hardening.py), so a corrected body may reuse the key.
@pytest.mark.parametrize("status", [400, 404, 409])
async def test_a_4xx_is_kept_and_replayed(store: IdempotencyStore, status: int) -> None:
    app = build_app(store)
    path = f"/status/{status}"
    async with client_for(app) as client:
        first = await client.post(path, json={}, headers=headers("k1"))
        repeat = await client.post(path, json={}, headers=headers("k1"))

    assert first.status_code == repeat.status_code == status
    assert repeat.headers["idempotent-replayed"] == "true"
    assert repeat.json() == first.json()
    assert app.state.shop.runs[path] == 1


@pytest.mark.parametrize("status", [204, 304])
async def test_a_bodiless_status_is_replayed_without_a_body(
    store: IdempotencyStore, status: int
) -> None:
    """204 and 304 never carry a body nor a Content-Length (RFC 9110)."""
    app = build_app(store)
    path = f"/status/{status}"
    async with client_for(app) as client:
        await client.post(path, json={}, headers=headers("k1"))
        repeat = await client.post(path, json={}, headers=headers("k1"))

    assert repeat.status_code == status
    assert repeat.headers["idempotent-replayed"] == "true"
    assert repeat.content == b""
    assert "content-length" not in repeat.headers


async def test_mark_committed_keeps_a_5xx_for_replay(store: IdempotencyStore) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        first = await client.post("/commit-then-fail", json={}, headers=headers("k1"))
        repeat = await client.post("/commit-then-fail", json={}, headers=headers("k1"))

    assert first.status_code == repeat.status_code == 500
    assert repeat.headers["idempotent-replayed"] == "true"
    assert repeat.json() == first.json()
    assert app.state.shop.runs["/commit-then-fail"] == 1


async def test_an_exception_after_mark_committed_is_never_run_again(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    async with client_for(app) as client:
        first = await client.post("/commit-then-raise", json={}, headers=headers("k1"))
        repeat = await client.post("/commit-then-raise", json={}, headers=headers("k1"))

    assert first.status_code == 500
    assert repeat.status_code == 409
    assert repeat.json()["type"] == PROBLEM_TYPE_PREFIX + "result-not-replayable"
    assert app.state.shop.runs["/commit-then-raise"] == 1


async def test_a_response_too_large_to_keep_is_refused_later_not_rerun(
    store: IdempotencyStore, caplog: pytest.LogCaptureFixture
) -> None:
    app = build_app(store, max_response_size=1000)
    caplog.set_level(logging.WARNING, logger="retrysafe.idempotency")
    async with client_for(app) as client:
        first = await client.post("/big?size=5000", json={}, headers=headers("k1"))
        repeat = await client.post("/big?size=5000", json={}, headers=headers("k1"))
        small = await client.post("/big?size=1000", json={}, headers=headers("k2"))
        small_repeat = await client.post("/big?size=1000", json={}, headers=headers("k2"))

    assert first.status_code == 200
    assert len(first.content) == 5000
    assert repeat.status_code == 409
    assert repeat.headers["content-type"] == "application/problem+json"
    assert repeat.json()["type"] == PROBLEM_TYPE_PREFIX + "result-not-replayable"
    assert "retry-after" not in repeat.headers
    assert small_repeat.headers["idempotent-replayed"] == "true"
    assert small_repeat.content == small.content
    assert app.state.shop.runs["/big"] == 2
    # The operators learn of it once, when it happens: the key's repeats get 409 for a day.
    warned = [r.getMessage() for r in caplog.records if "not kept for replay" in r.getMessage()]
    assert len(warned) == 1
    assert "'k1'" in warned[0]
    assert "larger than max_response_size (1000 bytes)" in warned[0]


async def test_a_committed_handler_that_raises_is_logged_as_not_replayable(
    store: IdempotencyStore, caplog: pytest.LogCaptureFixture
) -> None:
    app = build_app(store)
    caplog.set_level(logging.WARNING, logger="retrysafe.idempotency")
    async with client_for(app) as client:
        await client.post("/commit-then-raise", json={}, headers=headers("k9"))
    warned = [r.getMessage() for r in caplog.records if "not kept for replay" in r.getMessage()]
    assert len(warned) == 1
    assert "'k9'" in warned[0]
    assert "stopped before its response was whole" in warned[0]


async def test_mark_committed_says_whether_there_was_a_keyed_request_to_mark() -> None:
    """A handler may check the answer: ``False`` means no key guards this request, so
    nothing stops a retry from running it again."""
    answers: list[bool] = []

    async def create(request: Request) -> Response:
        answers.append(mark_committed(request))
        return JSONResponse({}, status_code=201)

    app = Starlette(
        routes=[Route("/orders", create, methods=["POST"])],
        middleware=[
            Middleware(
                IdempotencyMiddleware, store=MemoryStore(), scope=lambda r: "alice", required=False
            )
        ],
    )
    async with client_for(app) as client:
        await client.post("/orders", json={}, headers={"Idempotency-Key": "k1"})
        await client.post("/orders", json={})

    assert answers == [True, False]
