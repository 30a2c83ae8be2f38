"""IdempotencySettings refuses settings that cannot work, and normalises the rest."""

from __future__ import annotations

import math
import sys
from typing import Any

import httpx
import pytest

from retrysafe.idempotency import (
    IdempotencyMiddleware,
    IdempotencySettings,
    MemoryStore,
    credential_scope,
)


def test_defaults_guard_post_and_patch_for_a_day_with_a_minute_lease() -> None:
    settings = IdempotencySettings(required=True)

    assert settings.methods == frozenset({"POST", "PATCH"})
    assert settings.ttl == 86_400
    assert settings.lease == 60
    assert settings.header == "Idempotency-Key"
    assert settings.max_key_length == 255


def test_methods_are_upper_cased() -> None:
    assert IdempotencySettings(required=True, methods=frozenset({"post"})).methods == {"POST"}


def test_methods_take_any_collection_but_not_one_string() -> None:
    assert IdempotencySettings(required=True, methods=["post", "PUT"]).methods == {"POST", "PUT"}
    # ("POST" is a collection of letters: it would guard no request at all)
    with pytest.raises(TypeError, match=r"\{'POST'\}"):
        IdempotencySettings(required=True, methods="POST")


@pytest.mark.parametrize(
    "changes",
    [
        {"ttl": 0},
        {"ttl": -1.0},
        {"ttl": math.inf},
        {"lease": math.nan},
        {"in_flight_retry_after": 0},
        {"max_body_size": 0},
        {"max_response_size": 1.5},
        {"max_key_length": True},
        {"header": "Idempotency Key"},
        {"header": ""},
        {"methods": frozenset()},
        {"release_statuses": frozenset({99})},
    ],
)
def test_unworkable_settings_are_refused(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        IdempotencySettings(required=True, **changes)  # type: ignore[arg-type]


def test_required_must_be_decided_explicitly() -> None:
    with pytest.raises(TypeError):
        IdempotencySettings(required="yes")  # type: ignore[arg-type]


def test_the_middleware_validates_its_settings_when_built() -> None:
    async def app(scope: object, receive: object, send: object) -> None: ...

    with pytest.raises(ValueError, match="lease"):
        IdempotencyMiddleware(app, MemoryStore(), scope=lambda r: "x", required=True, lease=-5)


@pytest.mark.parametrize("scope", ["user_id", None, 42])
def test_a_scope_that_is_no_function_is_refused_when_the_middleware_is_built(
    scope: object,
) -> None:
    """``scope="user_id"`` is a likely slip: refused at once, saying what a scope is, where it
    would otherwise fail every keyed request with a 500."""

    async def app(scope: object, receive: object, send: object) -> None: ...

    with pytest.raises(TypeError, match="scope must be a function of the request") as caught:
        IdempotencyMiddleware(app, MemoryStore(), scope=scope, required=True)  # type: ignore[arg-type]
    assert "scope=credential_scope()" in str(caught.value)
    assert type(scope).__name__ in str(caught.value)


def test_credential_scope_given_uncalled_is_refused_saying_to_call_it() -> None:
    """``scope=credential_scope`` is callable, but it makes the scope: taken as one, every
    keyed request got a function for its caller and answered 500 (review104: the message
    above suggested writing it so)."""

    async def app(scope: object, receive: object, send: object) -> None: ...

    with pytest.raises(TypeError, match=r"call it, scope=credential_scope\(\)"):
        IdempotencyMiddleware(app, MemoryStore(), scope=credential_scope, required=True)  # type: ignore[arg-type]
    IdempotencyMiddleware(app, MemoryStore(), scope=credential_scope(), required=True)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_scope_that_returns_no_str_fails_naming_its_type_not_its_value() -> None:
    """The value may be the credential itself (bytes of a token): the error, which a server
    logs, names its type only."""

    async def created(scope: object, receive: object, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = IdempotencyMiddleware(
        created, MemoryStore(), scope=lambda request: b"Bearer s3cret-token", required=True
    )
    with pytest.raises(TypeError, match="must return a str or None, got bytes") as caught:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://shop.test"
        ) as client:
            await client.post("/orders", json={}, headers={"Idempotency-Key": "k1"})
    assert "s3cret" not in str(caught.value)


def test_a_missing_starlette_names_the_server_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "starlette.requests", None)

    async def app(scope: object, receive: object, send: object) -> None: ...

    with pytest.raises(ImportError, match=r"pip install 'retrysafe\[server\]'"):
        IdempotencyMiddleware(app, MemoryStore(), scope=lambda r: "x", required=True)
