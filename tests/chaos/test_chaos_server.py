"""ChaosServer's lifecycle, its control plane, and the pytest fixtures."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from retrysafe.chaos import ChaosServer, ChaosState, KeyedChaos, create_app
from retrysafe.testing.pytest_plugin import unique_key


def _open_request(server: ChaosServer, target: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=2)
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: chaos\r\n\r\n".encode())
    return sock


def test_start_and_stop_are_safe_to_repeat() -> None:
    server = ChaosServer()
    server.start()
    url = server.url
    server.start()
    assert server.url == url
    assert httpx.get(url + "/status/200").status_code == 200

    server.stop()
    server.stop()

    assert not server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/status/200")


def test_a_stopped_server_can_start_again_keeping_its_state() -> None:
    with ChaosServer() as server:
        httpx.get(server.url + "/fail/k")
    with server:
        second = httpx.get(server.url + "/fail/k")

    assert second.headers["x-attempt"] == "2"


def test_addresses_need_a_running_server() -> None:
    server = ChaosServer()

    with pytest.raises(RuntimeError, match="not running"):
        _ = server.url


def test_a_test_that_fakes_the_clock_does_not_hold_up_the_servers_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A test may patch ``time.monotonic`` (freezegun does) while a session's server runs
    on its thread: the server keeps its own clock, so it answers meanwhile, and its
    stop afterwards is as quick as ever (on the patched clock its idle tick would lie
    an hour away, and the stop would give up waiting for it after 10 s)."""
    real = time.monotonic
    server = ChaosServer().start()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(time, "monotonic", lambda: real() + 3600.0)
            time.sleep(0.3)  # (the server's loop sets its idle tick every 0.1 s)
            assert httpx.get(server.url + "/delay?ms=50").status_code == 200
        started = real()
        server.stop()
        elapsed = real() - started
    finally:
        server.stop()

    assert elapsed < 2.0


def test_stop_is_quick_even_with_hanging_connections() -> None:
    server = ChaosServer().start()
    held = [
        _open_request(server, "/hang"),
        _open_request(server, "/delay?ms=60000"),
        _open_request(server, "/drip?chunks=1000&interval_ms=1000"),
        _open_request(server, "/capacity/p?service_ms=60000"),
        _open_request(server, "/idempotent/r?fail_after_commit=hang"),
        socket.create_connection(("127.0.0.1", server.port)),  # connected, sends nothing
    ]
    parts = urlsplit(server.fault_url("accept_never_read"))
    assert parts.port is not None
    held.append(socket.create_connection(("127.0.0.1", parts.port)))
    time.sleep(0.1)

    started = time.monotonic()
    server.stop()
    elapsed = time.monotonic() - started

    assert elapsed < 1.0
    for sock in held:
        with sock:
            sock.settimeout(1)
            try:
                while sock.recv(65536):
                    pass
            except ConnectionResetError:
                pass  # closed either way: what matters is that recv did not time out


def test_serving_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    with ChaosServer() as server:
        httpx.get(server.url + "/status/500")
        httpx.get(server.url + "/status/100")
        with pytest.raises(httpx.ReadError):
            httpx.get(server.url + "/sequence/k?steps=reset")

    assert capfd.readouterr() == ("", "")


def test_stopping_with_an_apps_handler_still_running_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler of your own ``app=`` that outlasts the stop is cancelled, as the stop
    promises: that is no error of the app, and no traceback is logged for it (with no
    logging set up, Python prints such a record to stderr)."""

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(60)

    server = ChaosServer(app=slow).start()
    held = _open_request(server, "/")
    time.sleep(0.1)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 3.0
    held.close()
    assert [record.getMessage() for record in caplog.records] == []


def test_reset_clears_all_state() -> None:
    with ChaosServer() as server:
        httpx.get(server.url + "/fail/k")
        httpx.post(server.url + "/idempotent/orders?key=k", headers={"Idempotency-Key": "a"})

        server.reset()

        assert server.log() == []
        assert server.ledger("orders", "k") == {}
        assert httpx.get(server.url + "/fail/k").headers["x-attempt"] == "1"


def test_control_plane_resets_and_serves_the_log_unlogged() -> None:
    with ChaosServer() as server:
        httpx.get(server.url + "/fail/a")
        httpx.get(server.url + "/fail/b")

        log_a = httpx.get(server.url + "/_chaos/log", params={"key": "a"}).json()
        everything = httpx.get(server.url + "/_chaos/log").json()
        reset = httpx.post(server.url + "/_chaos/reset")

        assert [entry["key"] for entry in log_a] == ["a"]
        assert log_a[0]["action"] == "status:503"
        assert set(log_a[0]) == {
            "time",
            "method",
            "path",
            "query",
            "endpoint",
            "key",
            "attempt",
            "idempotency_key",
            "body_sha256",
            "action",
            "detail",
        }
        assert len(everything) == 2
        assert reset.status_code == 200
        assert server.log() == []


def test_chaos_fixture_builds_keyed_urls(chaos: KeyedChaos) -> None:
    url = chaos.url("/sequence/{key}", steps=[503, "reset", 200], flag=True, skipped=None)

    parts = urlsplit(url)
    assert url.startswith(chaos.base_url + f"/sequence/{chaos.key}?")
    assert parse_qs(parts.query) == {
        "steps": ["503,reset,200"],
        "flag": ["true"],
        "key": [chaos.key],
    }


def test_chaos_fixture_uses_a_given_key_everywhere(chaos: KeyedChaos) -> None:
    url = chaos.url("/fail/{key}", key="mine")

    assert urlsplit(url).path == "/fail/mine"
    assert parse_qs(urlsplit(url).query) == {"key": ["mine"]}


def test_chaos_fixture_urls_read_naturally_and_tuples_join_like_lists(chaos: KeyedChaos) -> None:
    """Commas and colons stay as typed; a tuple of steps is joined like a list."""
    url = chaos.url("/sequence/{key}", steps=(503, "reset", 200), code="503:1,200:3")

    assert url == (
        f"{chaos.base_url}/sequence/{chaos.key}?steps=503,reset,200&code=503:1,200:3"
        f"&key={chaos.key}"
    )


def test_chaos_fixture_a_key_of_none_means_its_own_key(chaos: KeyedChaos) -> None:
    url = chaos.url("/fail/{key}", key=None)

    assert urlsplit(url).path == f"/fail/{chaos.key}"
    assert parse_qs(urlsplit(url).query) == {"key": [chaos.key]}


def test_chaos_fixture_adds_a_missing_leading_slash(chaos: KeyedChaos) -> None:
    assert chaos.url("status/200") == chaos.url("/status/200")
    assert httpx.get(chaos.url("status/200")).status_code == 200


def test_chaos_fixture_key_names_the_test(chaos: KeyedChaos) -> None:
    assert chaos.key.startswith("test_chaos_fixture_key_names_the_test-")


def test_chaos_fixture_log_holds_only_this_tests_records(chaos: KeyedChaos) -> None:
    httpx.get(chaos.url("/status/200"))
    httpx.get(chaos.url("/status/200", key="someone-else"))

    assert [record.key for record in chaos.log()] == [chaos.key]


def test_unique_keys_are_url_safe_and_unique() -> None:
    keys = {unique_key("test_x[param/with spaces?]") for _ in range(100)}

    assert len(keys) == 100
    assert all(key.replace("-", "").replace("_", "").isalnum() for key in keys)


def test_importing_the_plugin_does_not_import_the_server() -> None:
    code = (
        "import sys, retrysafe.testing.pytest_plugin; "
        "print(sorted({'uvicorn', 'starlette'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )

    assert result.stdout.strip() == "[]"


@pytest.mark.anyio
async def test_without_the_chaos_protocol_socket_faults_answer_501() -> None:
    state = ChaosState()
    transport = httpx.ASGITransport(app=create_app(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://chaos") as client:
        reset = await client.get("/sequence/k?steps=reset,200")
        after = await client.get("/sequence/k?steps=reset,200")

    assert reset.status_code == 501
    assert after.status_code == 200
    assert [record.action for record in state.log()] == ["status:501", "status:200"]


@pytest.mark.parametrize("key", ["", "team/a"])
def test_a_key_that_is_not_one_path_segment_is_refused(chaos_server: ChaosServer, key: str) -> None:
    with pytest.raises(ValueError, match="no '/'"):
        chaos_server.for_key(key)
    # Also as a URL's own key= (its URL would answer 404, not fail on purpose)
    with pytest.raises(ValueError, match="no '/'"):
        chaos_server.for_key("mine").url("/fail/{key}", key=key)


def test_a_reset_forgets_the_fake_stripes_stored_replies() -> None:
    with ChaosServer() as server:  # (its own: a reset forgets every key's state)
        url = f"{server.url}/stripe/k/0/503/v1/customers"
        headers = {"Idempotency-Key": "idem-1"}
        form = {"email": "a@example.com"}
        first = httpx.post(url, data=form, headers=headers)
        assert first.headers.get("idempotent-replayed") is None
        assert httpx.post(url, data=form, headers=headers).headers["idempotent-replayed"] == "true"
        server.reset()
        again = httpx.post(url, data={"email": "b@example.com"}, headers=headers)
        assert again.headers.get("idempotent-replayed") is None
        assert again.json()["email"] == "b@example.com"
