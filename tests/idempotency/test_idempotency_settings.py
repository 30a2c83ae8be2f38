"""IdempotencySettings refuses settings that cannot work, and normalises the rest."""

from __future__ import annotations

import math
import sys

import pytest

from retrysafe.idempotency import IdempotencyMiddleware, IdempotencySettings, MemoryStore


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
    assert "credential_scope" in str(caught.value)
    assert type(scope).__name__ in str(caught.value)


def test_a_missing_starlette_names_the_server_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "starlette.requests", None)

    async def app(scope: object, receive: object, send: object) -> None: ...

    with pytest.raises(ImportError, match=r"pip install 'retrysafe\[server\]'"):
        IdempotencyMiddleware(app, MemoryStore(), scope=lambda r: "x", required=True)
