"""Idempotency hardening (issue 10, items 5, 7 and 10).

5. A lease starts when the claim is held, not when the middleware began waiting for the
   store; a lease not longer than the store's own timeout is refused.
7. A request refused for its content (422, as FastAPI's validation answers) is not kept,
   so the corrected body can be sent under the same key; the middleware's own 422 says
   it is the middleware's.
10. A caller scope that works when authentication is a dependency that runs after the
    middleware (FastAPI): derived from the credential header.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from idempotency_app import build_app, client_for, headers
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from retrysafe.idempotency import (
    PROBLEM_TYPE_PREFIX,
    Claimed,
    IdempotencyMiddleware,
    IdempotencyRecord,
    MemoryStore,
    RedisStore,
    SQLiteStore,
    StoreUnavailable,
)
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio


# --- 5: the lease starts when the claim is held ----------------------------------------


class SlowClaimStore(MemoryStore):
    """A MemoryStore whose ``claim`` takes ``delay`` seconds of ``clock`` time, like a
    claim that waited for another process's write lock."""

    def __init__(self, clock: FakeClock, delay: float) -> None:
        super().__init__()
        self._clock = clock
        self._delay = delay

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, now: float, lease: float
    ) -> Claimed | IdempotencyRecord:
        self._clock.advance(self._delay)
        return await super().claim(scope, key, fingerprint, now=now, lease=lease)


async def test_a_claim_that_waited_longer_than_the_lease_still_holds_the_key() -> None:
    clock = FakeClock()
    app = build_app(SlowClaimStore(clock, delay=2.0), clock=clock, lease=1.0)
    shop = app.state.shop
    shop.gates[2].set()  # a second run, if there is one, must not hang the test
    async with client_for(app) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: client.post("/slow", json={}, headers=headers("k1")))
        await shop.entered[1].wait()
        retry = await client.post("/slow", json={}, headers=headers("k1"))
        shop.gates[1].set()

    assert retry.status_code == 409
    # The retry's own claim waited too, past the lease it read: still a wait of >= 1 s.
    assert retry.headers["retry-after"] == "1"
    assert shop.runs["/slow"] == 1


async def test_a_claim_that_waited_for_the_sqlite_lock_holds_a_full_lease(
    tmp_path: Path,
) -> None:
    # Real time, real lock: another connection holds the write lock for 1.8 s, the lease
    # is 2 s. Stamped before the wait, the claim would lapse 0.2 s after it was written,
    # while the first renewal is due only lease/3 after the handler started.
    path = tmp_path / "locked.sqlite3"
    store = SQLiteStore(path, busy_timeout=1.9)
    app = build_app(store, lease=2.0)
    shop = app.state.shop
    shop.gates[2].set()
    try:
        async with client_for(app) as client:
            warm = await client.post("/orders", json={}, headers=headers("warm"))
            assert warm.status_code == 201
            blocker = sqlite3.connect(path, isolation_level=None)
            try:
                blocker.execute("BEGIN IMMEDIATE")
                started = time.monotonic()
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(lambda: client.post("/slow", json={}, headers=headers("k1")))
                    await anyio.sleep(1.8)
                    blocker.execute("COMMIT")
                    with anyio.fail_after(5):
                        await shop.entered[1].wait()
                    await anyio.sleep(max(0.0, started + 2.2 - time.monotonic()))
                    retry = await client.post("/slow", json={}, headers=headers("k1"))
                    shop.gates[1].set()
            finally:
                blocker.close()
    finally:
        await store.close()

    assert retry.status_code == 409
    assert shop.runs["/slow"] == 1


class TakenOverWhileClaimingStore(MemoryStore):
    """A MemoryStore whose first ``claim`` is written so late that its lease has already
    lapsed and another server's request has taken the key over, before it returns."""

    def __init__(self, clock: FakeClock, lease: float) -> None:
        super().__init__()
        self._clock = clock
        self._lease = lease
        self.claims = 0

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, now: float, lease: float
    ) -> Claimed | IdempotencyRecord:
        self.claims += 1
        outcome = await super().claim(scope, key, fingerprint, now=now, lease=lease)
        if self.claims == 1:
            self._clock.advance(2 * self._lease)
            taken = await super().claim(
                scope, key, fingerprint, now=self._clock.time(), lease=lease
            )
            assert isinstance(taken, Claimed)
        return outcome


async def test_a_claim_taken_over_while_it_was_written_does_not_run() -> None:
    """The other request now owns the key: this one gets the in-flight 409 (with the
    configured Retry-After, rounded up) and its handler never runs."""
    clock = FakeClock()
    app = build_app(
        TakenOverWhileClaimingStore(clock, lease=1.0),
        clock=clock,
        lease=1.0,
        in_flight_retry_after=2.5,
    )
    async with client_for(app) as client:
        response = await client.post("/orders", json={}, headers=headers("k1"))

    assert response.status_code == 409
    assert response.json()["type"] == PROBLEM_TYPE_PREFIX + "request-in-flight"
    assert response.headers["retry-after"] == "3"
    assert app.state.shop.runs["/orders"] == 0


class LateClaimThenDownStore(MemoryStore):
    """A MemoryStore whose claims take ``delay`` of ``clock`` time and which is down for
    the first lease renewal after such a claim."""

    def __init__(self, clock: FakeClock, delay: float) -> None:
        super().__init__()
        self._clock = clock
        self._delay = delay
        self.failing_extends = 1

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, now: float, lease: float
    ) -> Claimed | IdempotencyRecord:
        self._clock.advance(self._delay)
        return await super().claim(scope, key, fingerprint, now=now, lease=lease)

    async def extend(self, scope: str, key: str, token: str, *, now: float, lease: float) -> bool:
        if self.failing_extends:
            self.failing_extends -= 1
            raise StoreUnavailable("LateClaimThenDownStore", "connection reset (injected)")
        return await super().extend(scope, key, token, now=now, lease=lease)


async def test_a_late_claim_whose_lease_cannot_be_restarted_is_503_and_frees_the_key() -> None:
    """The handler did not run, so the key is released: the client's retry runs at once
    instead of waiting out a lease on a claim nobody holds."""
    clock = FakeClock()
    app = build_app(LateClaimThenDownStore(clock, delay=0.5), clock=clock, lease=1.0)
    async with client_for(app) as client:
        refused = await client.post("/orders", json={}, headers=headers("k1"))
        retry = await client.post("/orders", json={}, headers=headers("k1"))

    assert refused.status_code == 503
    assert refused.json()["type"] == PROBLEM_TYPE_PREFIX + "store-unavailable"
    assert retry.status_code == 201
    assert "idempotent-replayed" not in retry.headers
    assert app.state.shop.runs["/orders"] == 1


async def test_a_late_claim_is_given_a_whole_lease_from_when_it_was_written() -> None:
    """A claim the store took half a lease to write still holds the key for a whole
    lease after that, not just for what was left of the lease stamped before the wait."""
    clock = FakeClock()
    app = build_app(SlowClaimStore(clock, delay=0.5), clock=clock, lease=1.0)
    shop = app.state.shop
    shop.gates[2].set()
    async with client_for(app) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: client.post("/slow", json={}, headers=headers("k1")))
        await shop.entered[1].wait()
        # The retry claims 0.6 s after the first claim was written: past the lease
        # stamped before the store's wait, within the one restarted after it.
        clock.advance(0.6)
        retry = await client.post("/slow", json={}, headers=headers("k1"))
        shop.gates[1].set()

    assert retry.status_code == 409
    assert shop.runs["/slow"] == 1


def _noop_app() -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
        raise AssertionError("not called")

    return app


def test_a_lease_not_longer_than_the_sqlite_busy_timeout_is_refused(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "x.sqlite3", busy_timeout=5.0)
    with pytest.raises(ValueError, match=r"lease=1\b.*busy_timeout=5\b"):
        IdempotencyMiddleware(_noop_app(), store, scope=lambda r: "x", required=True, lease=1)
    with pytest.raises(ValueError, match="lease=5"):
        IdempotencyMiddleware(_noop_app(), store, scope=lambda r: "x", required=True, lease=5)
    IdempotencyMiddleware(_noop_app(), store, scope=lambda r: "x", required=True, lease=6)


def test_a_lease_not_longer_than_the_redis_timeout_is_refused() -> None:
    store = RedisStore("redis://127.0.0.1:1/0", timeout=10.0)
    with pytest.raises(ValueError, match=r"lease=10\b.*timeout=10\b"):
        IdempotencyMiddleware(_noop_app(), store, scope=lambda r: "x", required=True, lease=10)


# --- 7: a request refused for its content is not kept -----------------------------------


def _validating_app() -> tuple[Starlette, dict[str, int]]:
    """A Starlette app whose handler validates the body itself and answers 422."""
    counts = {"created": 0, "refused": 0}

    async def create(request: Request) -> Response:
        payload = await request.json()
        if not isinstance(payload.get("amount"), int):
            counts["refused"] += 1
            return JSONResponse({"detail": "amount must be a whole number"}, status_code=422)
        counts["created"] += 1
        return JSONResponse({"order": counts["created"]}, status_code=201)

    app = Starlette(
        routes=[Route("/orders", create, methods=["POST"])],
        middleware=[
            Middleware(
                IdempotencyMiddleware, store=MemoryStore(), scope=lambda r: "alice", required=True
            )
        ],
    )
    return app, counts


async def test_a_corrected_body_after_a_starlette_422_runs_under_the_same_key() -> None:
    app, counts = _validating_app()
    key = {"Idempotency-Key": "k1"}
    async with client_for(app) as client:
        bad = await client.post("/orders", json={"amount": "ten"}, headers=key)
        good = await client.post("/orders", json={"amount": 10}, headers=key)
        again = await client.post("/orders", json={"amount": 10}, headers=key)

    assert bad.status_code == 422
    assert good.status_code == 201, good.text
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert counts == {"created": 1, "refused": 1}


try:
    import fastapi
    import pydantic
except ImportError:  # pragma: no cover - fastapi is in the dev extra
    fastapi = None

#: The FastAPI app's bearer tokens and the users they stand for.
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}

if fastapi is not None:

    class Order(pydantic.BaseModel):
        item: str
        amount: int

    def current_user(request: fastapi.Request) -> str:
        """Dependency-based authentication: runs inside the route, after all middleware."""
        authorization = request.headers.get("authorization", "")
        user = TOKENS.get(authorization.removeprefix("Bearer "))
        if user is None:
            raise fastapi.HTTPException(status_code=401, detail="unknown token")
        return user

    CurrentUser = fastapi.Depends(current_user)


def _fastapi_app(**middleware_options: Any) -> tuple[Any, dict[str, Any]]:
    """A FastAPI app: a validated body model, authentication as a dependency."""
    if fastapi is None:
        pytest.skip("fastapi is not installed")
    seen: dict[str, Any] = {"runs": 0, "by": []}
    app = fastapi.FastAPI()

    @app.post("/orders", status_code=201)
    async def create(order: Order, user: str = CurrentUser) -> dict[str, Any]:
        seen["runs"] += 1
        seen["by"].append(user)
        return {"order": seen["runs"], "user": user, "item": order.item}

    middleware_options.setdefault("required", True)
    app.add_middleware(IdempotencyMiddleware, store=MemoryStore(), **middleware_options)
    return app, seen


async def test_a_corrected_body_after_a_fastapi_validation_422_runs_under_the_same_key() -> None:
    app, seen = _fastapi_app(scope=lambda request: "alice")
    key = {"Idempotency-Key": "k1", "Authorization": "Bearer tok-alice"}
    async with client_for(app) as client:
        bad = await client.post("/orders", json={"item": "tea", "amount": "ten"}, headers=key)
        good = await client.post("/orders", json={"item": "tea", "amount": 10}, headers=key)
        again = await client.post("/orders", json={"item": "tea", "amount": 10}, headers=key)

    assert bad.status_code == 422
    assert good.status_code == 201, good.text
    assert again.headers["idempotent-replayed"] == "true"
    assert seen["runs"] == 1


async def test_the_middlewares_key_reused_422_is_told_apart_from_the_apps_422() -> None:
    app, _ = _validating_app()
    key = {"Idempotency-Key": "k1"}
    async with client_for(app) as client:
        apps = await client.post("/orders", json={"amount": "ten"}, headers=key)
        await client.post("/orders", json={"amount": 10}, headers=key)
        reused = await client.post("/orders", json={"amount": 11}, headers=key)

    assert apps.status_code == reused.status_code == 422
    assert "idempotency-problem" not in apps.headers
    assert reused.headers["idempotency-problem"] == "key-reused"
    assert reused.headers["content-type"] == "application/problem+json"
    assert reused.json()["type"] == PROBLEM_TYPE_PREFIX + "key-reused"


async def test_a_handler_that_committed_keeps_its_422(tmp_path: Path) -> None:
    from retrysafe.idempotency import mark_committed

    runs = 0

    async def create(request: Request) -> Response:
        nonlocal runs
        runs += 1
        mark_committed(request)
        return JSONResponse({"run": runs}, status_code=422)

    app = Starlette(
        routes=[Route("/orders", create, methods=["POST"])],
        middleware=[
            Middleware(
                IdempotencyMiddleware, store=MemoryStore(), scope=lambda r: "alice", required=True
            )
        ],
    )
    async with client_for(app) as client:
        await client.post("/orders", json={}, headers={"Idempotency-Key": "k1"})
        repeat = await client.post("/orders", json={}, headers={"Idempotency-Key": "k1"})

    assert repeat.headers["idempotent-replayed"] == "true"
    assert runs == 1


# --- 10: a scope that works with dependency-based authentication ------------------------


async def test_a_credential_scope_works_with_fastapi_dependency_auth() -> None:
    from retrysafe.idempotency.middleware import credential_scope

    app, seen = _fastapi_app(scope=credential_scope())
    alice = {"Idempotency-Key": "k1", "Authorization": "Bearer tok-alice"}
    bob = {"Idempotency-Key": "k1", "Authorization": "Bearer tok-bob"}
    async with client_for(app) as client:
        first = await client.post("/orders", json={"item": "tea", "amount": 1}, headers=alice)
        # Bob sends exactly Alice's request under her key: it is his own, and runs.
        other = await client.post("/orders", json={"item": "tea", "amount": 1}, headers=bob)
        same = await client.post("/orders", json={"item": "tea", "amount": 1}, headers=bob)
        retry = await client.post("/orders", json={"item": "tea", "amount": 1}, headers=alice)
        keyless_caller = await client.post(
            "/orders", json={"item": "tea", "amount": 1}, headers={"Idempotency-Key": "k2"}
        )

    assert first.status_code == 201, first.text
    assert first.json()["user"] == "alice"
    assert other.status_code == 201
    assert "idempotent-replayed" not in other.headers
    assert other.json()["user"] == "bob"
    assert same.headers["idempotent-replayed"] == "true"
    assert same.json() == other.json()
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json() == first.json()
    assert seen["by"] == ["alice", "bob"]
    assert keyless_caller.status_code == 401
    assert keyless_caller.json()["type"] == PROBLEM_TYPE_PREFIX + "caller-unknown"


async def test_a_credential_scope_keeps_no_record_for_a_refused_credential() -> None:
    from retrysafe.idempotency.middleware import credential_scope

    app, seen = _fastapi_app(scope=credential_scope())
    wrong = {"Idempotency-Key": "k1", "Authorization": "Bearer tok-nobody"}
    async with client_for(app) as client:
        first = await client.post("/orders", json={"item": "tea", "amount": 1}, headers=wrong)
        second = await client.post("/orders", json={"item": "tea", "amount": 1}, headers=wrong)

    assert first.status_code == second.status_code == 401
    assert "idempotent-replayed" not in second.headers
    assert seen["runs"] == 0


def test_a_credential_scope_does_not_reveal_the_credential() -> None:
    from retrysafe.idempotency.middleware import credential_scope

    scope = credential_scope()
    keyed = credential_scope(secret=b"shared by the servers")
    request = httpx.Request("POST", "http://x/", headers={"Authorization": "Bearer tok-alice"})
    starlette_request = Request(
        {
            "type": "http",
            "method": "POST",
            "path": "/",
            "headers": [(k.lower().encode(), v.encode()) for k, v in request.headers.items()],
        }
    )
    plain = scope(starlette_request)
    hashed = keyed(starlette_request)
    assert isinstance(plain, str)
    assert isinstance(hashed, str)
    assert "tok-alice" not in plain
    assert plain != hashed
    # The secret keys the digest: another secret gives another caller id.
    assert credential_scope(secret=b"another secret")(starlette_request) != hashed
    assert scope(Request({"type": "http", "method": "POST", "path": "/", "headers": []})) is None


def _request_with(*authorizations: bytes) -> Request:
    fields = [(b"authorization", value) for value in authorizations]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": fields})


def test_a_credential_scope_identifies_nobody_from_two_credential_headers() -> None:
    """Which of two credentials the app will verify is the app's choice; keying on
    either could put the request in another caller's key space."""
    from retrysafe.idempotency.middleware import credential_scope

    scope = credential_scope()

    assert scope(_request_with(b"Bearer tok-alice", b"Bearer tok-bob")) is None
    assert scope(_request_with(b"   ")) is None
    assert scope(_request_with(b"Bearer tok-alice")) is not None


def test_a_credential_scope_tells_credentials_apart_by_letter_case() -> None:
    """Tokens are case-sensitive: two that differ only in case are two callers."""
    from retrysafe.idempotency.middleware import credential_scope

    for scope in (credential_scope(), credential_scope(secret=b"shared by the servers")):
        assert scope(_request_with(b"Bearer tok-Alice")) != scope(
            _request_with(b"Bearer tok-alice")
        )
        assert scope(_request_with(b" Bearer tok-alice ")) == scope(
            _request_with(b"Bearer tok-alice")
        )
