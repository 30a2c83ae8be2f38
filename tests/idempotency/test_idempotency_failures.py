"""Concurrent duplicates, a store that is down, clients that leave, malformed keys.
Every test runs against every store."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
import store_servers
from idempotency_app import Shop, build_app, client_for, headers
from idempotency_stores import InterposedStore, StoreFactory
from starlette.requests import ClientDisconnect

from cancel_counts import count_after_a_cancel, end_of_a_timeout_cancelled_as_it_runs_out
from retrysafe.idempotency import (
    PROBLEM_TYPE_PREFIX,
    IdempotencyMiddleware,
    IdempotencyStore,
    MemoryStore,
    StoredResponse,
)
from retrysafe.idempotency.asgi import Message

pytestmark = pytest.mark.anyio


async def test_concurrent_duplicates_run_exactly_once(store: IdempotencyStore) -> None:
    app = build_app(store, shop=Shop(handler_delay=0.05))
    async with client_for(app) as client:
        responses = await asyncio.gather(
            *(client.post("/orders", json={"n": 1}, headers=headers("k1")) for _ in range(20))
        )

    fresh = [
        r for r in responses if r.status_code == 201 and "idempotent-replayed" not in r.headers
    ]
    others = collections.Counter(
        "replayed" if "idempotent-replayed" in r.headers else r.status_code
        for r in responses
        if r not in fresh
    )
    assert len(fresh) == 1
    assert set(others) <= {409, "replayed"}
    assert app.state.shop.runs["/orders"] == 1


async def post_with_the_store_down(stores: StoreFactory) -> tuple[httpx.Response, Any]:
    """POST a keyed order to the shop while its store cannot be reached."""
    store = stores.make_down()
    if stores.kind == "memory":
        await store.close()
    app = build_app(store)
    async with client_for(app) as client:
        response = await client.post("/orders", json={}, headers=headers("k1"))
    return response, app


async def test_a_store_that_is_down_gets_503_and_the_handler_does_not_run(
    stores: StoreFactory,
) -> None:
    response, app = await post_with_the_store_down(stores)

    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == PROBLEM_TYPE_PREFIX + "store-unavailable"
    assert app.state.shop.runs["/orders"] == 0


async def test_a_store_that_is_down_asks_the_client_to_retry_after_a_second(
    stores: StoreFactory,
) -> None:
    response, _ = await post_with_the_store_down(stores)

    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    "failing_writes",
    [
        1,  # a blip
        # Four failed writes take 2.3 s of waiting, past the quick tries for a blip (1.3 s):
        # given up then, the key would stay in flight with no outcome, and a retry after
        # the lease would run the handler again (a second charge). Within the lease it is
        # kept.
        4,
    ],
)
async def test_an_outcome_the_store_fails_to_keep_is_kept_by_trying_again(
    store: IdempotencyStore, failing_writes: int
) -> None:
    flaky = InterposedStore(store, failing_completes=failing_writes)
    app = build_app(flaky, lease=6.0)
    async with client_for(app) as client:
        first = await client.post("/orders", json={}, headers=headers("k1"))
        retry = await client.post("/orders", json={}, headers=headers("k1"))

    assert first.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json() == first.json()
    assert app.state.shop.runs["/orders"] == 1


async def test_an_outcome_the_store_never_keeps_is_logged_as_an_error_without_secrets(
    store: IdempotencyStore, caplog: pytest.LogCaptureFixture
) -> None:
    broken = InterposedStore(store, failing_completes=100)
    app = build_app(broken, lease=1.5)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="retrysafe.idempotency"):
        async with client_for(app) as client:
            response = await client.post("/orders", json={}, headers=headers("k1"))

    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert response.status_code == 201  # the client still gets its answer
    assert time.monotonic() - started >= 1.3  # tried until the lease ran out, not just once
    assert len(errors) == 1
    message = errors[0].getMessage()
    assert "could not be stored" in message
    # (the store renewed the lease all along: given up after one lease's length of tries,
    # the key is still held, until the lease it last renewed ends)
    assert "the key stays in flight until its lease ends, and a retry after that runs" in message
    assert "'k1'" in message
    assert "'alice'" in message
    assert broken.tokens
    assert all(token not in caplog.text for token in broken.tokens)


def _scope(key: str, path: str, *, spec_version: str = "2.4") -> dict[str, object]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"shop.test"),
            (b"content-type", b"application/json"),
            (b"authorization", b"Bearer alice"),
            (b"idempotency-key", key.encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("shop.test", 80),
        "state": {},
    }


def _body_then_silence() -> Any:
    """A server's ``receive``: the request's body ``{}``, then nothing (the client is
    still there, as far as the app can tell)."""
    incoming = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> Message:
        if incoming:
            return incoming.pop(0)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return receive


async def test_a_client_that_leaves_after_the_response_started_still_gets_it_kept(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    sent: list[Message] = []
    incoming = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            raise OSError("the client closed the connection")  # as ASGI 2.4 servers do
        sent.append(message)

    await app(_scope("k1", "/orders"), receive, send)
    async with client_for(app) as client:
        retry = await client.post("/orders", json={}, headers=headers("k1"))

    assert [m["type"] for m in sent] == ["http.response.start"]
    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["order"] == 1
    assert app.state.shop.runs["/orders"] == 1


async def test_a_client_that_leaves_mid_request_does_not_stop_the_handler(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    shop = app.state.shop
    incoming = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        raise OSError("the client closed the connection")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(app, _scope("k1", "/slow"), receive, send)
        await shop.entered[1].wait()
        shop.gates[1].set()
    async with client_for(app) as client:
        retry = await client.post("/slow", json={}, headers=headers("k1"))

    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json() == {"run": 1}
    assert shop.runs["/slow"] == 1


async def test_a_streamed_response_goes_out_whole_when_the_server_send_waits(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    sent: list[Message] = []
    receive = _body_then_silence()

    async def send(message: Message) -> None:
        await anyio.sleep(0.01)  # a server waiting for its socket to drain
        sent.append(message)

    # Before ASGI 2.4, Starlette streams while listening for a disconnect, and stops
    # streaming when it hears one.
    await app(_scope("k1", "/stream", spec_version="2.3"), receive, send)

    chunks = [message for message in sent if message["type"] == "http.response.body"]
    assert b"".join(message.get("body", b"") for message in chunks) == b"chunk0\nchunk1\nchunk2\n"
    assert not chunks[-1].get("more_body", False)


async def test_a_success_that_fails_mid_body_is_not_run_again(store: IdempotencyStore) -> None:
    """The 201 went out, and the work with it; the body then failed. A retry under the
    key must not run the work again: it gets the not-replayable 409."""
    app = build_app(store)
    async with client_for(app) as client:
        with contextlib.suppress(httpx.HTTPError):  # (the half body, as the server cut it)
            await client.post("/stream-then-fail", json={}, headers=headers("k1"))
        retry = await client.post("/stream-then-fail", json={}, headers=headers("k1"))

    assert app.state.shop.runs["/stream-then-fail"] == 1
    assert retry.status_code == 409
    assert retry.json()["type"] == PROBLEM_TYPE_PREFIX + "result-not-replayable"


async def test_a_failure_status_that_fails_mid_body_still_frees_the_key(
    store: IdempotencyStore,
) -> None:
    """A 5xx frees the key whole or cut: the corrected request runs under it."""
    incoming = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    async def fails_mid_body(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b"half", "more_body": True})
        raise RuntimeError("the body failed half-way")

    guarded = IdempotencyMiddleware(
        fails_mid_body, store=store, scope=lambda request: "alice", required=True
    )
    with pytest.raises(RuntimeError):
        await guarded(_scope("k1", "/orders"), receive, send)
    app_again = build_app(store)
    async with client_for(app_again) as client:
        retry = await client.post("/orders", json={}, headers=headers("k1"))
    assert retry.status_code == 201
    assert app_again.state.shop.runs["/orders"] == 1


async def test_an_endless_stream_stops_once_its_client_left_and_it_outgrew_the_copy(
    store: IdempotencyStore,
) -> None:
    """A stream that only ends when its client leaves runs on after the client left only
    while its copy may still be kept for a retry: once the copy is too large to keep, it
    stops as it would without the middleware, and the key is not run again."""
    events = await _run_a_feed_whose_client_leaves(store, max_response_size=200)

    # It ran on, past the client, until its copy outgrew the 200 bytes (17 events).
    assert events > 200 // len(b"data: tick\n\n")


async def test_an_endless_stream_stops_once_its_client_left_a_lease_ago() -> None:
    """Or once a lease has passed since the client left (a lease this short needs the
    memory store: the others refuse one shorter than their own timeouts)."""
    await _run_a_feed_whose_client_leaves(MemoryStore(), lease=0.3)


async def test_a_finite_stream_runs_to_its_end_after_its_client_left_however_long() -> None:
    """Only an event stream is cut a lease after its client left: a finite body that
    takes longer (1 s, against a 0.3 s lease) runs to its end, and the retry gets it."""
    app = build_app(MemoryStore(), lease=0.3)
    receive = _body_then_silence()

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            raise OSError("the client closed the connection")

    with anyio.fail_after(10):
        await app(_scope("k1", "/slow-stream"), receive, send)
    async with client_for(app) as client:
        retry = await client.post("/slow-stream", json={}, headers=headers("k1"))
    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.text == "".join(f"part{number}\n" for number in range(20))
    assert app.state.shop.runs["/slow-stream"] == 1


async def _run_a_feed_whose_client_leaves(store: IdempotencyStore, **options: Any) -> int:
    """Run ``/feed`` until its client leaves (after two events) and the middleware stops
    it; check it stopped for good and its retry is refused. The events it produced."""
    app = build_app(store, **options)
    shop = app.state.shop
    receive = _body_then_silence()

    delivered = 0

    async def send(message: Message) -> None:
        nonlocal delivered
        if message["type"] == "http.response.body":
            delivered += 1
            if delivered > 2:
                raise OSError("the client closed the connection")  # as ASGI 2.4 servers do

    # (Starlette turns the server's OSError into its ClientDisconnect, as without the
    # middleware)
    with anyio.fail_after(10), pytest.raises(ClientDisconnect):
        await app(_scope("k1", "/feed"), receive, send)
    events_when_stopped = shop.runs["/feed events"]
    await anyio.sleep(0.1)
    assert shop.runs["/feed events"] == events_when_stopped  # stopped for good
    async with client_for(app) as client:
        retry = await client.post("/feed", json={}, headers=headers("k1"))
    assert retry.status_code == 409
    assert retry.json()["type"] == PROBLEM_TYPE_PREFIX + "result-not-replayable"
    assert shop.runs["/feed"] == 1
    return events_when_stopped


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("k" * 256, "256 characters"),
        ("bad\x01key", "control character"),
        ("bad\x7fkey", "delete character"),
        ("clé", "non-ASCII"),
    ],
)
async def test_a_malformed_key_is_400(store: IdempotencyStore, key: str, reason: str) -> None:
    app = build_app(store)
    raw = [(b"authorization", b"Bearer alice"), (b"idempotency-key", key.encode("utf-8"))]
    async with client_for(app) as client:
        response = await client.post("/orders", json={}, headers=raw)

    assert response.status_code == 400, reason
    assert response.json()["type"] == PROBLEM_TYPE_PREFIX + "key-malformed"
    assert app.state.shop.runs["/orders"] == 0


async def test_a_key_sent_twice_is_400(store: IdempotencyStore) -> None:
    app = build_app(store)
    raw = [
        (b"authorization", b"Bearer alice"),
        (b"idempotency-key", b"k1"),
        (b"idempotency-key", b"k2"),
    ]
    async with client_for(app) as client:
        response = await client.post("/orders", json={}, headers=raw)

    assert response.status_code == 400
    assert app.state.shop.runs["/orders"] == 0


async def test_the_longest_key_and_every_printable_character_are_accepted(
    store: IdempotencyStore,
) -> None:
    app = build_app(store)
    printable = "".join(chr(code) for code in range(0x21, 0x7F))
    async with client_for(app) as client:
        longest = await client.post("/orders", json={}, headers=headers("k" * 255))
        symbols = await client.post("/orders", json={}, headers=headers(printable))

    assert longest.status_code == symbols.status_code == 201


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://app:pa%ss-hunter2@127.0.0.1:9/app",  # a '%' not percent-encoded
        "postgresql//app:hunter2@127.0.0.1:9/app",  # a typo psycopg quotes back
        "host=127.0.0.1 port=9 password='hunter2",  # an unterminated quote
        "host=127.0.0.1 port=9 password=pass hunter2 dbname=app",  # a space, unquoted
        "not a dsn at all",
    ],
)
def test_a_dsn_the_driver_cannot_read_is_refused_at_once_without_its_password(dsn: str) -> None:
    """A typo in the connection string is a setting to fix: refused as the store is made,
    saying how to write one, where the server would otherwise start and answer every keyed
    request 503 "store unavailable". psycopg quotes what it cannot read: the password is
    kept out."""
    from retrysafe.idempotency import PostgresStore

    with pytest.raises(ValueError, match="the connection string cannot be read") as caught:
        PostgresStore(dsn, timeout=2)
    assert "hunter2" not in str(caught.value)
    assert "postgresql://user:password@host:5432/dbname" in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


@pytest.mark.parametrize(
    "dsn",
    [
        "host=127.0.0.1 port=9 password=hunter2 sslmode=bogus",  # read, refused on connect
    ],
)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_dsn_the_driver_refuses_on_connect_keeps_its_password_out_of_the_error(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # psycopg quotes the part of a DSN it cannot use; the store's error, which the
    # middleware logs on every keyed request, must not carry the password with it.
    from retrysafe.idempotency import PostgresStore, StoreUnavailable

    store = PostgresStore(dsn, timeout=2)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await store.claim("scope", "key", "fp", now=1.0, lease=10)
    finally:
        await store.close()
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(caught.value)
    assert "PostgresStore is unavailable" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    ["127.0.0.1:6379", "localhost:6379/0", "http://127.0.0.1:6379", ":hunter2@127.0.0.1:6379"],
)
def test_a_redis_url_without_its_scheme_is_refused_naming_the_schemes(url: str) -> None:
    """The likeliest slip (``host:port``) gets its own fix, not the password's advice; a
    password typed before the host stays out of the message."""
    from retrysafe.idempotency import RedisStore

    with pytest.raises(ValueError, match="the URL needs a scheme, one of redis://") as caught:
        RedisStore(url)
    assert "percent-encode" not in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_redis_url_without_its_scheme_keeps_a_password_in_its_query_out_of_the_error() -> None:
    from retrysafe.idempotency import RedisStore

    with pytest.raises(ValueError, match="needs a scheme") as caught:
        RedisStore("127.0.0.1:6379/0?password=hunter2")  # (redis-py reads it there too)
    assert "hunter2" not in str(caught.value)
    with pytest.raises(TypeError, match="must be a str"):
        RedisStore(None)  # type: ignore[arg-type]


def test_a_postgres_url_whose_password_holds_a_slash_is_refused_without_it() -> None:
    """``/`` in a URL's password ends the host, and psycopg reads the password as the
    port: refused as the store is made, the password not quoted."""
    from retrysafe.idempotency import PostgresStore

    with pytest.raises(ValueError, match="port is not a number") as caught:
        PostgresStore("postgresql://app:hunter2/x@127.0.0.1:5432/orders")
    assert "hunter2" not in str(caught.value)
    assert "%2F" in str(caught.value)
    PostgresStore("host=127.0.0.1 port=5432,5433 dbname=app")  # (accepted: libpq's port list)


def test_a_short_word_of_a_password_with_spaces_is_kept_out_of_the_parse_error() -> None:
    from retrysafe.idempotency import PostgresStore

    with pytest.raises(ValueError, match="cannot be read") as caught:
        PostgresStore("host=127.0.0.1 password=hunter2 ab user=app")
    assert '"ab"' not in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_pooled_connections_the_server_ended_are_replaced_not_reported_down(
    postgres_dsn: str,
) -> None:
    # The server ends every idle session (a restart, a failover, idle_session_timeout):
    # the store is up, so no request may get 503 for connections that died while idle.
    import psycopg

    from retrysafe.idempotency import Claimed, PostgresStore

    # (its sessions are named, so only they are ended: other tests share the server)
    name = f"stale-pool-{uuid.uuid4().hex[:8]}"
    dsn = f"{postgres_dsn}?application_name={name}"
    store = PostgresStore(dsn, table="stale_pool", purge_every=None, purge_interval=None)
    try:
        warm = [store.claim("s", f"warm-{i}", "fp", now=1e9, lease=60) for i in range(6)]
        await asyncio.gather(*warm)  # six connections opened, now idle in the pool
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (name,),
            ).fetchone()
        assert ended == (6,)
        claims = [await store.claim("s", f"after-{i}", "fp", now=1e9, lease=60) for i in range(8)]
        first = claims[0]
        assert isinstance(first, Claimed)
        assert all(isinstance(claim, Claimed) for claim in claims)
        assert await store.complete("s", "after-0", first.token, None, now=1e9, ttl=60)
    finally:
        await store.close()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("kind", ["postgres", "redis"])
async def test_a_claim_run_again_after_its_answer_was_lost_takes_its_own_record(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The PostgreSQL pool runs a claim once more when its connection broke, and redis-py
    # runs a script again: if the first did reach the server, the record is this
    # claim's own (same token), not another request's.
    from retrysafe.idempotency import (
        Claimed,
        IdempotencyRecord,
        PostgresStore,
        RedisStore,
        postgres_store,
        redis_store,
    )

    store: IdempotencyStore
    if kind == "postgres":
        tokens: Any = postgres_store
        dsn = request.getfixturevalue("postgres_dsn")
        store = PostgresStore(dsn, table="claim_again", purge_every=None, purge_interval=None)
    else:
        tokens = redis_store
        prefix = f"claim-again-{uuid.uuid4().hex[:8]}:"
        store = RedisStore(request.getfixturevalue("redis_url"), prefix=prefix)
    try:
        monkeypatch.setattr(tokens, "new_token", lambda: "the-same-claim")
        first = await store.claim("s", "k", "fp", now=1e9, lease=60)
        again = await store.claim("s", "k", "fp", now=1e9, lease=60)
        assert first == again == Claimed("the-same-claim")
        monkeypatch.setattr(tokens, "new_token", lambda: "another-request")
        other = await store.claim("s", "k", "fp", now=1e9, lease=60)
        assert isinstance(other, IdempotencyRecord)
        assert other.state == "in_flight"
    finally:
        await store.close()


async def test_a_store_that_is_down_is_answered_without_raising_into_the_server() -> None:
    """The 503 is the whole answer: nothing is raised into the server after it, which
    would log a spurious error (or, before the response started, answer a bare 500)."""
    store = MemoryStore()
    await store.close()
    app = build_app(store)
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(_scope("k1", "/orders"), _body_then_silence(), send)

    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 503
    assert app.state.shop.runs["/orders"] == 0


async def test_a_client_that_leaves_while_sending_its_body_claims_nothing(
    store: IdempotencyStore,
) -> None:
    """Half a body is not the request: the handler does not run on it, nothing is
    answered or raised, and the key stays free for the client's retry."""
    app = build_app(store)
    incoming = [
        {"type": "http.request", "body": b'{"item": ', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    await app(_scope("k1", "/orders"), receive, send)
    async with client_for(app) as client:
        retry = await client.post("/orders", json={"item": "tea"}, headers=headers("k1"))

    assert sent == []
    assert retry.status_code == 201
    assert "idempotent-replayed" not in retry.headers
    assert retry.json()["received"] == {"item": "tea"}
    assert app.state.shop.runs["/orders"] == 1


async def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(
    store: IdempotencyStore,
) -> None:
    """A Content-Length over the limit gets its 413 at once: the middleware does not wait
    for (or buffer) a body it would refuse anyway."""
    app = build_app(store, max_body_size=64)
    scope = _scope("k1", "/orders")
    declared = scope["headers"]
    assert isinstance(declared, list)
    declared.append((b"content-length", b"1000000"))
    sent: list[Message] = []

    async def never_sent() -> Message:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    with anyio.fail_after(5):
        await app(scope, never_sent, send)

    assert sent[0]["status"] == 413
    assert app.state.shop.runs["/orders"] == 0


async def test_server_shortcuts_that_bypass_send_are_hidden_from_the_app(
    store: IdempotencyStore,
) -> None:
    """A file sent through ``pathsend`` or ``zerocopy`` never passes through ``send``, so
    it could not be kept; the app must not see them. Other extensions pass through."""
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope["extensions"])
        await receive()
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})

    guarded = IdempotencyMiddleware(app, store=store, scope=lambda request: "alice", required=True)
    scope = _scope("k1", "/files")
    scope["extensions"] = {
        "http.response.pathsend": {},
        "http.response.zerocopy": {},
        "http.response.trailers": {},
    }

    async def send(message: Message) -> None:
        pass

    await guarded(scope, _body_then_silence(), send)

    assert set(seen) == {"http.response.trailers"}


class CompleteHeldStore(InterposedStore):
    """An InterposedStore whose first ``complete`` waits until the test lets it go on."""

    def __init__(self, inner: IdempotencyStore) -> None:
        super().__init__(inner)
        self.completing = anyio.Event()
        self.go_on = anyio.Event()

    async def complete(
        self,
        scope: str,
        key: str,
        token: str,
        response: StoredResponse | None,
        *,
        now: float,
        ttl: float,
    ) -> bool:
        if not self.completing.is_set():
            self.completing.set()
            await self.go_on.wait()
            await anyio.lowlevel.checkpoint()  # a store round trip: cancellation lands here
        return await super().complete(scope, key, token, response, now=now, ttl=ttl)


async def test_a_request_cancelled_while_its_outcome_is_written_still_keeps_it(
    store: IdempotencyStore,
) -> None:
    """A server may cancel a request whose client left; the complete response is already
    being kept by then, and the write is finished, so the retry gets it replayed."""
    held = CompleteHeldStore(store)
    app = build_app(held)

    async def send(message: Message) -> None:
        pass

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(app, _scope("k1", "/orders"), _body_then_silence(), send)
        with anyio.fail_after(5):
            await held.completing.wait()
        tasks.cancel_scope.cancel()
        held.go_on.set()
    async with client_for(app) as client:
        retry = await client.post("/orders", json={}, headers=headers("k1"))

    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["order"] == 1
    assert app.state.shop.runs["/orders"] == 1


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling is 3.11+")
def test_a_request_cancelled_from_outside_stays_cancelled() -> None:
    """The server's cancel of a request (its client left, the server shuts down) is still
    counted once the middleware is done with it (``Task.cancelling``); lost, an
    ``asyncio.timeout`` around the request that ran out in the same turn takes the cancel
    for its own, and the request's task runs on. (The lease's renewal ran in a scope the
    request's task cancelled, and anyio took that cancel back from the request's task:
    every time.)"""

    async def send(message: Message) -> None:
        pass

    async def run() -> tuple[list[int], list[str]]:
        app = build_app(MemoryStore(), shop=Shop(handler_delay=10))

        def request(key: str) -> Callable[[], Awaitable[None]]:
            return lambda: app(_scope(key, "/orders"), _body_then_silence(), send)

        # (0.05 s: the handler runs)
        counts = [await count_after_a_cancel(request(f"c{n}"), 0.05) for n in range(3)]
        ended = [
            await end_of_a_timeout_cancelled_as_it_runs_out(request(f"t{n}"), 0.05)
            for n in range(3)
        ]
        return counts, ended

    counts, ended = asyncio.run(run())
    assert counts == [1, 1, 1]
    assert ended == ["CancelledError"] * 3


class _RestartableRedis:
    """A private redis-server that keeps its data on disk (append-only file, written on
    every command), so the test can stop it and start it again on the same port, as an
    outage of a real store."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (scripts/servers.sh installs it)")
        self.port = store_servers.free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._command = [
            binary,
            *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory)),
            *("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
        ]
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while not store_servers._redis_answers(self.port):  # (test support's own check)
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=10)


async def test_a_real_store_down_for_seconds_as_the_handler_ends_keeps_the_outcome(
    tmp_path: Path,
) -> None:
    # Found in a user trial: Redis went away while a charge ran and came back 5 s later.
    # The outcome's write was tried for 1.3 s and given up; a retry after the lease ran
    # the charge a second time. Now the response waits for the store, within the lease.
    from retrysafe.idempotency import RedisStore

    redis = _RestartableRedis(tmp_path)
    redis.start()
    store = RedisStore(redis.url, timeout=0.5)
    shop = Shop()
    app = build_app(store, shop=shop, lease=8.0)
    try:
        async with client_for(app) as client, anyio.create_task_group() as group:
            first: list[httpx.Response] = []

            async def charge() -> None:
                first.append(await client.post("/slow", json={}, headers=headers("k1")))

            group.start_soon(charge)
            with anyio.fail_after(10):
                await shop.entered[1].wait()
            redis.stop()  # down as the handler ends ...
            shop.gates[1].set()
            await anyio.sleep(2.5)
            assert not first  # (the response waits for the store)
            await anyio.to_thread.run_sync(redis.start)  # ... and back 2.5 s later
        async with client_for(app) as client:
            retry = await client.post("/slow", json={}, headers=headers("k1"))
    finally:
        await store.close()
        redis.stop()

    assert first[0].status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json() == first[0].json() == {"run": 1}
    assert shop.runs["/slow"] == 1
