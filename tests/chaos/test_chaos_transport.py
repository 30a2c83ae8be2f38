"""Slow and broken replies: /delay, /hang, /drip, /truncate, /malformed."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from retrysafe.chaos import KeyedChaos


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def _raw_get(url: str) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
    sock.sendall(f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: chaos\r\n\r\n".encode())
    return sock


def _read_until_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_delay_answers_200_after_the_delay(chaos: KeyedChaos, client: httpx.Client) -> None:
    started = time.monotonic()
    response = client.get(chaos.url("/delay", ms=200))

    assert response.status_code == 200
    assert time.monotonic() - started >= 0.2


def test_delay_longer_than_the_client_timeout_is_a_read_timeout(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    with pytest.raises(httpx.ReadTimeout):
        client.get(chaos.url("/delay", ms=2000), timeout=0.2)


@pytest.mark.anyio
async def test_delays_run_concurrently(chaos: KeyedChaos) -> None:
    url = chaos.url("/delay", ms=300)
    started = time.monotonic()

    async def call(client: httpx.AsyncClient) -> None:
        await client.get(url)

    async with httpx.AsyncClient(timeout=5) as client, anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(call, client)

    assert time.monotonic() - started < 1.2
    assert [r.action for r in chaos.log()] == ["status:200"] * 5


def test_hang_never_answers(chaos: KeyedChaos, client: httpx.Client) -> None:
    with pytest.raises(httpx.ReadTimeout):
        client.get(chaos.url("/hang"), timeout=0.3)

    assert [r.action for r in chaos.log()] == ["hang"]


def test_drip_sends_headers_at_once_and_the_body_slowly(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    started = time.monotonic()
    url = chaos.url("/drip", chunks=2, interval_ms=250, chunk_bytes=4)
    with client.stream("GET", url) as response:
        headers_after = time.monotonic() - started
        body = response.read()
    body_after = time.monotonic() - started

    assert response.headers["content-length"] == "8"
    assert body_after >= 0.5
    assert body_after - headers_after >= 0.4  # the headers did not wait for the body
    assert body == b"00001111"


def test_drip_slower_than_the_read_timeout_times_out_mid_body(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    with client.stream("GET", chaos.url("/drip", chunks=5, interval_ms=400), timeout=0.2) as r:
        assert r.status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            r.read()


def test_truncate_promises_more_than_it_sends_then_closes(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    with _raw_get(chaos.url("/truncate", promised=500, sent=20)) as sock:
        reply = _read_until_eof(sock)

    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"content-length: 500" in head.lower()
    assert b"x-attempt: 1" in head.lower()
    assert body == b"x" * 20


def test_truncate_is_a_protocol_error_for_httpx(chaos: KeyedChaos, client: httpx.Client) -> None:
    with pytest.raises(httpx.RemoteProtocolError, match="received 100 bytes, expected 1000"):
        client.get(chaos.url("/truncate"))


def test_truncate_requires_sending_less_than_promised(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/truncate", promised=10, sent=10))

    assert response.status_code == 400


def test_malformed_truncated_json_is_unparseable(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/malformed", kind="truncated-json"))

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_malformed_html_error_is_an_html_page(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/malformed", kind="html-error", status=502))

    assert response.status_code == 502
    assert response.headers["content-type"].startswith("text/html")
    assert response.text.startswith("<!DOCTYPE html>")


def test_malformed_empty_is_an_empty_json_reply(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/malformed", kind="empty"))

    assert response.headers["content-type"] == "application/json"
    assert response.content == b""


def test_malformed_wrong_content_type_labels_json_as_html(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/malformed", kind="wrong-content-type"))

    assert response.headers["content-type"].startswith("text/html")
    assert response.json() == {"ok": True}
    assert [r.action for r in chaos.log()] == ["malformed:wrong-content-type"]


def test_drip_defaults_to_five_chunks_of_eight_bytes(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/drip", interval_ms=0))

    assert response.headers["content-length"] == "40"
    assert response.content == b"".join(b"%d" % n * 8 for n in range(5))


def test_delay_defaults_to_one_second(chaos: KeyedChaos, client: httpx.Client) -> None:
    with pytest.raises(httpx.ReadTimeout):
        client.get(chaos.url("/delay"), timeout=0.3)

    assert [r.detail for r in chaos.log()] == ["after 1000 ms"]
