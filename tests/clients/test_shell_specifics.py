"""What the requests adapter and the aiohttp middleware add beyond the shared table.

Errors that are both retrysafe's and the client's own; one governor shared with httpx
clients; streaming bodies handed over unread; ``idempotency="auto"``;
``raise_on_status=False``; secrets kept out of errors. Over real sockets against the
chaos server.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json as jsonlib
import logging
import pickle
import socket
import threading
import time
import traceback
from types import SimpleNamespace
from typing import Any
from urllib.parse import urljoin

import aiohttp
import httpx
import pytest
import requests
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from urllib3.util import Timeout as Urllib3Timeout

import retrysafe
from local_http import serving
from retrysafe import Governor, RetryPolicy
from retrysafe.aiohttp import RetryMiddleware
from retrysafe.aiohttp import report_of as aiohttp_report_of
from retrysafe.chaos import KeyedChaos
from retrysafe.foreign_shell import RedirectTrail
from retrysafe.requests import RetryAdapter, report_of
from retrysafe.telemetry.otel import OpenTelemetry
from retrysafe.testing import FakeClock
from retrysafe.timing import Deadline

FAST = RetryPolicy(backoff_base=0.01, backoff_cap=0.05, retry_after_jitter=0.01)


def session_with(adapter: RetryAdapter) -> requests.Session:
    session = requests.Session()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


async def aiohttp_get(middleware: RetryMiddleware, url: str, **kwargs: Any) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(middlewares=(middleware,)) as session,
        session.get(url, **kwargs) as response,
    ):
        return response.status, await response.read()


# -- errors in both exception trees ---------------------------------------------------------


def test_requests_errors_are_retrysafes_and_requests_own(chaos: KeyedChaos) -> None:
    with session_with(RetryAdapter(policy=FAST)) as session:
        with pytest.raises(requests.HTTPError) as server:
            session.get(chaos.url("/status/503"))
        with pytest.raises(requests.ConnectionError) as refused:
            session.get(chaos.closed_port_url())
    short = RetryAdapter(policy=RetryPolicy(deadline=0.6, min_attempt_time=0.1))
    with session_with(short) as session, pytest.raises(requests.Timeout) as late:
        session.get(chaos.url("/hang"), timeout=5)
    assert isinstance(server.value, retrysafe.ServerError)
    assert server.value.status == 503
    assert server.value.response is not None
    assert server.value.response.status_code == 503  # the requests.Response
    assert isinstance(refused.value, retrysafe.TransportError)
    assert refused.value.sent == "no"
    assert isinstance(late.value, retrysafe.DeadlineExceeded)


def test_a_requests_timeout_handler_catches_a_timed_out_transport_error(
    chaos: KeyedChaos,
) -> None:
    policy = RetryPolicy(attempts=1, attempt_timeout=0.3)
    session = session_with(RetryAdapter(policy=policy))
    with session, pytest.raises(requests.Timeout) as caught:
        session.get(chaos.url("/hang"))
    assert isinstance(caught.value, retrysafe.TransportError)


@pytest.mark.parametrize(
    "timeout",
    [Urllib3Timeout(total=2), Urllib3Timeout(total=2, read=1), Urllib3Timeout(connect=1, read=1)],
    ids=repr,
)
def test_requests_takes_urllib3s_timeout_as_requests_does(
    chaos: KeyedChaos, timeout: Urllib3Timeout
) -> None:
    """urllib3's ``Timeout`` is a ``timeout=`` requests takes; with ``total`` set, it
    crashed the adapter before anything was sent (urllib3's TimeoutStateError, no
    RequestException: its read timeout needs a connect under way)."""
    with session_with(RetryAdapter(policy=FAST)) as session:
        assert session.get(chaos.url("/echo"), timeout=timeout).status_code == 200


def test_requests_urllib3s_default_read_is_the_socket_default(chaos: KeyedChaos) -> None:
    """A read left at urllib3's default waits as long as the socket default, as urllib3
    has it (given ``total``, the adapter had stopped bounding it at all)."""
    policy = RetryPolicy(attempts=1, attempt_timeout=5.0)
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(0.3)
    try:
        started = time.monotonic()
        with (
            session_with(RetryAdapter(policy=policy)) as session,
            pytest.raises(requests.Timeout),
        ):
            session.get(chaos.url("/hang"), timeout=Urllib3Timeout(connect=2))
    finally:
        socket.setdefaulttimeout(before)
    assert time.monotonic() - started < 2.0


def test_requests_urllib3s_total_bounds_each_read(chaos: KeyedChaos) -> None:
    """Before a connect, urllib3 bounds each read by the total, and so does each attempt."""
    policy = RetryPolicy(attempts=1, attempt_timeout=5.0)
    started = time.monotonic()
    with session_with(RetryAdapter(policy=policy)) as session, pytest.raises(requests.Timeout):
        session.get(chaos.url("/hang"), timeout=Urllib3Timeout(total=0.3))
    assert time.monotonic() - started < 2.0


def test_aiohttp_errors_are_retrysafes_and_aiohttps_own(chaos: KeyedChaos) -> None:
    async def run() -> tuple[BaseException, BaseException, BaseException]:
        caught = []
        for url, policy in [
            (chaos.url("/status/503"), FAST),
            (chaos.closed_port_url(), FAST),
            (chaos.url("/hang"), RetryPolicy(deadline=0.6, min_attempt_time=0.1)),
        ]:
            try:
                await aiohttp_get(RetryMiddleware(policy=policy), url)
            except aiohttp.ClientError as error:
                caught.append(error)
        return caught[0], caught[1], caught[2]

    server, refused, late = asyncio.run(run())
    assert isinstance(server, retrysafe.ServerError)
    assert isinstance(server, aiohttp.ClientResponseError)
    assert server.status == 503
    assert str(server).startswith("GET ")  # retrysafe's message, not aiohttp's
    assert isinstance(refused, retrysafe.TransportError)
    assert isinstance(refused, aiohttp.ClientConnectionError)
    assert isinstance(late, retrysafe.DeadlineExceeded)
    assert isinstance(late, asyncio.TimeoutError)


# -- one governor shared with httpx clients -------------------------------------------------


def test_a_429_seen_through_requests_pauses_an_httpx_client_on_the_same_governor(
    chaos: KeyedChaos,
) -> None:
    governor = Governor()
    adapter = RetryAdapter(policy=FAST, governor=governor)
    with session_with(adapter) as session, pytest.raises(retrysafe.RetryAfterTooLong):
        session.get(chaos.url("/status/429", retry_after=3600))
    client = retrysafe.Client(policy=FAST, governor=governor)
    with client, pytest.raises(retrysafe.CooldownActive) as caught:
        client.get(chaos.url("/echo"))
    assert caught.value.attempts == 0  # refused before sending
    assert [record.endpoint for record in chaos.log()] == ["status"]


def test_a_429_seen_through_httpx_pauses_aiohttp_calls_on_the_same_governor(
    chaos: KeyedChaos,
) -> None:
    governor = Governor()
    client = retrysafe.Client(policy=FAST, governor=governor)
    with client, pytest.raises(retrysafe.RetryAfterTooLong):
        client.get(chaos.url("/status/429", retry_after=3600))
    middleware = RetryMiddleware(policy=FAST, governor=governor)
    with pytest.raises(retrysafe.CooldownActive):
        asyncio.run(aiohttp_get(middleware, chaos.url("/echo")))
    assert [record.endpoint for record in chaos.log()] == ["status"]


# -- nesting: a call made inside another call's attempt ----------------------------------


def test_a_requests_call_nested_in_an_httpx_call_that_gives_up_is_not_retried_again(
    chaos: KeyedChaos,
) -> None:
    # The nested call retries (twice, the nested allowance) and gives up; the enclosing
    # call then does not send it all again: two requests reach the server, not 4 x 2.
    with session_with(RetryAdapter(policy=FAST, governor=Governor())) as session:

        def through_requests(request: httpx.Request) -> httpx.Response:
            try:
                session.get(chaos.url("/status/503"))
            except retrysafe.ApiError:
                return httpx.Response(503, text="the nested call gave up")
            return httpx.Response(200)

        outer = retrysafe.Client(
            transport=httpx.MockTransport(through_requests), policy=FAST, governor=Governor()
        )
        with outer, pytest.raises(retrysafe.ServerError):
            outer.get("https://outer.test/")
    assert len(chaos.log()) == 2


def test_an_aiohttp_call_nested_in_an_httpx_call_that_gives_up_is_not_retried_again(
    chaos: KeyedChaos,
) -> None:
    async def main() -> None:
        middleware = RetryMiddleware(policy=FAST, governor=Governor())

        async def through_aiohttp(request: httpx.Request) -> httpx.Response:
            try:
                await aiohttp_get(middleware, chaos.url("/status/503"))
            except retrysafe.ApiError:
                return httpx.Response(503, text="the nested call gave up")
            return httpx.Response(200)

        outer = retrysafe.AsyncClient(
            transport=httpx.MockTransport(through_aiohttp), policy=FAST, governor=Governor()
        )
        async with outer:
            with pytest.raises(retrysafe.ServerError):
                await outer.get("https://outer.test/")

    asyncio.run(main())
    assert len(chaos.log()) == 2


# -- streaming: the body is the caller's, unread, after the headers -------------------------


def test_requests_stream_hands_the_body_over_as_it_arrives(chaos: KeyedChaos) -> None:
    # 5 events 200 ms apart: about 0.8 s in all, longer than the attempt's 0.5 s.
    policy = RetryPolicy(attempt_timeout=0.5, min_attempt_time=0.1)
    url = chaos.url("/sse", events=5, interval_ms=200, fail_times=1)
    with session_with(RetryAdapter(policy=policy)) as session:
        started = time.monotonic()
        response = session.get(url, stream=True)
        headers_after = time.monotonic() - started
        lines = [line for line in response.iter_lines() if line.startswith(b"data:")]
        whole = time.monotonic() - started
    report = report_of(response)
    assert report is not None
    assert report.attempts == 2  # the 503 before the stream was retried
    assert len(lines) == 5
    assert headers_after < whole - 0.4  # the call returned well before the body ended
    assert whole >= 0.7  # and the stream outlived the attempt's 0.5 s uncut


def test_aiohttp_stream_hands_the_body_over_as_it_arrives(chaos: KeyedChaos) -> None:
    policy = RetryPolicy(attempt_timeout=0.5, min_attempt_time=0.1)
    url = chaos.url("/sse", events=5, interval_ms=200, fail_times=1)
    middleware = RetryMiddleware(policy=policy, stream=True)

    async def run() -> tuple[float, float, int, Any]:
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            started = time.monotonic()
            async with session.get(url) as response:
                headers_after = time.monotonic() - started
                events = 0
                async for line in response.content:
                    events += line.startswith(b"data:")
                return headers_after, time.monotonic() - started, events, response

    headers_after, whole, events, response = asyncio.run(run())
    report = aiohttp_report_of(response)
    assert report is not None
    assert report.attempts == 2
    assert events == 5
    assert headers_after < whole - 0.4
    assert whole >= 0.7


@pytest.mark.parametrize("stream", [False, True])
def test_aiohttp_a_body_read_for_the_engine_is_still_on_the_stream_for_the_caller(
    chaos: KeyedChaos, stream: bool
) -> None:
    """The middleware reads a success's body (unless it streams): the caller still finds
    it on ``response.content``, where ``content.read()``, ``iter_chunked()`` and stripe's
    AIOHTTPClient read it (it was empty there). (A failure its status judges, the 400 or
    the last 503, is the caller's unread, as aiohttp gives it.)"""
    middleware = RetryMiddleware(policy=FAST, stream=stream, raise_on_status=False)

    async def run() -> list[tuple[int, bytes, bytes]]:
        """(status, the body read from the stream, the body as read() gives it)."""
        seen = []
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            for path in ("/echo", "/status/400", "/status/503"):
                async with session.get(chaos.url(path)) as response:
                    from_stream = await response.content.read()
                    seen.append((response.status, from_stream, await response.read()))
            async with session.get(chaos.url("/echo")) as response:
                chunks = [chunk async for chunk in response.content.iter_chunked(7)]
                seen.append((response.status, b"".join(chunks), await response.read()))
        return seen

    seen = asyncio.run(run())
    assert [status for status, _, _ in seen] == [200, 400, 503, 200]
    for status, from_stream, read in seen:
        assert from_stream.startswith(b"{"), (status, from_stream)  # the JSON body, whole
        if status < 400 and not stream:  # (the bodies it read)
            assert from_stream == read, status


def test_aiohttp_total_timeout_ends_the_call_and_sends_nothing_more(chaos: KeyedChaos) -> None:
    """aiohttp's ClientTimeout(total=...) is around the whole call: when it runs out, the
    caller gets aiohttp's TimeoutError, and no attempt goes to the server after it."""
    middleware = RetryMiddleware(policy=RetryPolicy(deadline=10, backoff_base=0.01))

    async def run() -> float:
        timeout = aiohttp.ClientTimeout(total=0.5)
        async with aiohttp.ClientSession(middlewares=(middleware,), timeout=timeout) as session:
            started = time.monotonic()
            # (asyncio.TimeoutError: aiohttp's, not yet the builtin one on Python 3.10)
            with pytest.raises(asyncio.TimeoutError) as caught:
                await session.get(chaos.url("/hang"))
            assert not isinstance(caught.value, retrysafe.ApiError)
            return time.monotonic() - started

    assert 0.4 < asyncio.run(run()) < 2.0
    assert [record.endpoint for record in chaos.log()] == ["hang"]


# -- keys, raise_on_status, secrets ---------------------------------------------------------


def test_idempotency_auto_keys_a_post_with_one_key_for_every_attempt(chaos: KeyedChaos) -> None:
    adapter = RetryAdapter(policy=FAST, idempotency="auto")
    with session_with(adapter) as session:
        response = session.post(chaos.url("/fail/{key}", times=2, status=502), json={"n": 1})
    records = chaos.log()
    assert response.status_code == 200
    assert len(records) == 3
    keys = {record.idempotency_key for record in records}
    assert len(keys) == 1
    assert keys == {report_of(response).idempotency_key}  # type: ignore[union-attr]


def test_aiohttp_idempotency_auto_keys_a_post(chaos: KeyedChaos) -> None:
    middleware = RetryMiddleware(policy=FAST, idempotency="auto")

    async def run() -> int:
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as session,
            session.post(chaos.url("/fail/{key}", times=2, status=502), json={"n": 1}) as r,
        ):
            return r.status

    assert asyncio.run(run()) == 200
    keys = {record.idempotency_key for record in chaos.log()}
    assert len(keys) == 1
    assert None not in keys


def test_idempotency_auto_keys_a_patch_as_it_keys_a_post(chaos: KeyedChaos) -> None:
    """PATCH is no more safe to repeat than POST: "auto" keys both (the docs promise
    both), so the PATCH's 502s are retried under one key."""
    adapter = RetryAdapter(policy=FAST, idempotency="auto")
    url = chaos.url("/fail/{key}", key=f"{chaos.key}-r", times=2, status=502)
    with session_with(adapter) as session:
        response = session.patch(url, json={"n": 1})
    assert response.status_code == 200
    middleware = RetryMiddleware(policy=FAST, idempotency="auto")
    url = chaos.url("/fail/{key}", key=f"{chaos.key}-a", times=2, status=502)

    async def run() -> int:
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as session,
            session.patch(url, json={"n": 1}) as r,
        ):
            return r.status

    assert asyncio.run(run()) == 200
    for shell in ("r", "a"):
        records = chaos.server.log(f"{chaos.key}-{shell}")
        assert [record.method for record in records] == ["PATCH"] * 3, shell
        keys = {record.idempotency_key for record in records}
        assert len(keys) == 1, shell
        assert None not in keys, shell


@pytest.mark.parametrize("redirect", [307, 308])
def test_idempotency_auto_keeps_one_key_across_a_redirect_that_keeps_the_method(
    chaos: KeyedChaos, redirect: int
) -> None:
    """A 307 or 308 asks for the same write at another URL: the next hop is the same
    write, under the same key (requests and aiohttp each build a new request per hop)."""
    url = chaos.url("/redirect-chain/{key}", key=f"{chaos.key}-r", hops=2, redirect=redirect)
    with session_with(RetryAdapter(policy=FAST, idempotency="auto")) as session:
        assert session.post(url, json={"n": 1}).status_code == 200
    url = chaos.url("/redirect-chain/{key}", key=f"{chaos.key}-a", hops=2, redirect=redirect)

    async def run() -> int:
        middleware = RetryMiddleware(policy=FAST, idempotency="auto")
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as session,
            session.post(url, json={"n": 1}) as r,
        ):
            return r.status

    assert asyncio.run(run()) == 200
    for shell in ("r", "a"):
        records = chaos.server.log(f"{chaos.key}-{shell}")
        assert len(records) == 3, shell  # (hop 0, 1 and 2)
        keys = {record.idempotency_key for record in records}
        assert len(keys) == 1, (shell, keys)
        assert None not in keys, shell


@pytest.mark.parametrize("blank", ["", "   "])
def test_idempotency_auto_keys_a_post_whose_key_header_is_blank(
    chaos: KeyedChaos, blank: str
) -> None:
    # A blank header is no key (as on httpx): "auto" makes one, and the 502s are retried.
    # (requests refuses a value with leading whitespace itself, so it gets "" only.)
    if not blank:
        adapter = RetryAdapter(policy=FAST, idempotency="auto")
        url = chaos.url("/fail/{key}", key=f"{chaos.key}-r", times=2, status=502)
        with session_with(adapter) as session:
            answer = session.post(url, json={"n": 1}, headers={"Idempotency-Key": blank})
        assert answer.status_code == 200
    middleware = RetryMiddleware(policy=FAST, idempotency="auto")
    url = chaos.url("/fail/{key}", key=f"{chaos.key}-a", times=2, status=502)

    async def run() -> int:
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as session,
            session.post(url, json={"n": 1}, headers={"Idempotency-Key": blank}) as r,
        ):
            return r.status

    assert asyncio.run(run()) == 200
    for shell in ("r", "a") if not blank else ("a",):
        records = chaos.server.log(f"{chaos.key}-{shell}")
        assert len(records) == 3, shell
        keys = {record.idempotency_key for record in records}
        assert len(keys) == 1, shell
        assert all(key and key.strip() for key in keys), shell


def test_an_error_raised_further_down_the_aiohttp_chain_reaches_the_caller_as_it_is(
    chaos: KeyedChaos,
) -> None:
    # A raise_for_status() inside the chain is the caller's own decision about a
    # response, not a broken exchange: the 400 is sent once and its error is untouched.
    async def raising(request: Any, handler: Any) -> Any:
        response = await handler(request)
        response.raise_for_status()
        return response

    async def run() -> None:
        middlewares = (RetryMiddleware(policy=FAST), raising)
        async with aiohttp.ClientSession(middlewares=middlewares) as session:
            with pytest.raises(aiohttp.ClientResponseError) as caught:
                await session.get(chaos.url("/status/400"))
        assert caught.value.status == 400
        assert not isinstance(caught.value, retrysafe.ApiError)

    asyncio.run(run())
    assert len(chaos.log()) == 1


def test_two_retrying_aiohttp_middlewares_give_the_inner_ones_error(chaos: KeyedChaos) -> None:
    # The inner layer retries (nested: twice) and gives up with its ServerError; the
    # outer does not take it for a broken exchange, nor retry it again.
    async def run() -> None:
        middlewares = (RetryMiddleware(policy=FAST), RetryMiddleware(policy=FAST))
        async with aiohttp.ClientSession(middlewares=middlewares) as session:
            with pytest.raises(retrysafe.ServerError) as caught:
                await session.get(chaos.url("/status/503"))
        assert caught.value.status == 503

    asyncio.run(run())
    assert len(chaos.log()) == 2


def test_raise_on_status_false_returns_the_last_response_with_its_error(
    chaos: KeyedChaos,
) -> None:
    adapter = RetryAdapter(policy=RetryPolicy(attempts=2, backoff_base=0.01), raise_on_status=False)
    with session_with(adapter) as session:
        response = session.get(chaos.url("/status/503"))
    report = report_of(response)
    assert response.status_code == 503
    assert report is not None
    assert report.attempts == 2
    assert isinstance(report.error, retrysafe.ServerError)


def test_secrets_stay_out_of_the_error(chaos: KeyedChaos) -> None:
    url = chaos.url("/status/503", api_key="sk-live-secret-value")
    adapter = RetryAdapter(policy=RetryPolicy(attempts=1))
    with session_with(adapter) as session, pytest.raises(retrysafe.ServerError) as caught:
        session.get(url, headers={"Authorization": "Bearer tok-secret-123"})
    shown = str(caught.value) + repr(caught.value) + str(caught.value.body)
    assert "sk-live-secret-value" not in shown
    assert "tok-secret-123" not in shown


class _EchoesTheBodyIn400(http.server.BaseHTTPRequestHandler):
    """A validation API that quotes the request it refused: 400 with the body it got."""

    def do_POST(self) -> None:
        received = self.rfile.read(int(self.headers.get("content-length") or 0))
        reply = b'{"error": "invalid", "received": ' + received + b"}"
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *_: object) -> None:
        pass


LOGIN = {"user": "bob", "password": "hunter2-BODY-77"}


def _shown(error: retrysafe.ApiError) -> str:
    return str(error) + repr(error) + str(error.body)


@pytest.mark.parametrize("how", ["json", "data-bytes", "data-form"])
def test_the_requests_shell_scrubs_body_secrets_a_server_echoes(how: str) -> None:
    """As on httpx: a secret field of the request's body, quoted back in an error's body,
    stays out of the error's message and fields (the stand-in held no body before)."""
    sent: dict[str, Any] = {
        "json": {"json": LOGIN},
        "data-bytes": {"data": jsonlib.dumps(LOGIN).encode()},
        "data-form": {"data": LOGIN},  # (requests makes it a str: user=bob&password=...)
    }[how]
    with serving(_EchoesTheBodyIn400) as base:
        adapter = RetryAdapter(policy=RetryPolicy(attempts=1))
        with session_with(adapter) as session, pytest.raises(retrysafe.ClientError) as caught:
            session.post(f"{base}/login", **sent)
    assert "hunter2-BODY-77" not in _shown(caught.value)
    assert "[REDACTED]" in str(caught.value.body)


@pytest.mark.parametrize("how", ["json", "data-bytes", "data-form"])
def test_the_aiohttp_shell_scrubs_body_secrets_a_server_echoes(how: str) -> None:
    sent: dict[str, Any] = {
        "json": {"json": LOGIN},
        "data-bytes": {"data": jsonlib.dumps(LOGIN).encode()},
        "data-form": {"data": LOGIN},
    }[how]

    async def run(base: str) -> retrysafe.ApiError:
        middleware = RetryMiddleware(policy=RetryPolicy(attempts=1))
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            try:
                await session.post(f"{base}/login", **sent)
            except retrysafe.ApiError as error:
                return error
        raise AssertionError("no error")

    with serving(_EchoesTheBodyIn400) as base:
        error = asyncio.run(run(base))
    assert isinstance(error, retrysafe.ClientError)
    assert "hunter2-BODY-77" not in _shown(error)
    assert "[REDACTED]" in str(error.body)


def test_a_pickled_requests_error_leaves_the_requests_secrets_behind(chaos: KeyedChaos) -> None:
    """A pickled error may leave the process (a task queue's result store): requests' own
    response and request go with it, without the caller's credentials."""
    url = chaos.url("/status/400", api_key="sk-live-PICKLED-31", page="2")
    adapter = RetryAdapter(policy=RetryPolicy(attempts=1))
    with session_with(adapter) as session:
        session.cookies.set("sessionid", "COOKIE-PICKLED-31")
        with pytest.raises(retrysafe.ClientError) as caught:
            session.post(
                url, headers={"Authorization": "Bearer tok-PICKLED-31"}, data=b"pw=BODY-31"
            )
    blob = pickle.dumps(caught.value)
    for secret in (b"sk-live-PICKLED-31", b"tok-PICKLED-31", b"BODY-31", b"COOKIE-PICKLED-31"):
        assert secret not in blob
    copy = pickle.loads(blob)
    assert isinstance(copy, requests.HTTPError)
    assert copy.response.status_code == 400
    assert copy.request.headers["Authorization"] == "[REDACTED]"
    assert copy.response.request.headers["Authorization"] == "[REDACTED]"
    assert "page=2" in copy.request.url
    # the error in this process keeps what it was given
    assert caught.value.request.headers["Authorization"] == "Bearer tok-PICKLED-31"


def test_an_aiohttp_errors_request_info_shows_no_secret(chaos: KeyedChaos) -> None:
    """aiohttp's own ``ClientResponseError`` prints its ``request_info``: headers and URL."""
    url = chaos.url("/status/401", api_key="sk-live-INFO-32", page="2")

    async def run() -> BaseException:
        middleware = RetryMiddleware(policy=RetryPolicy(attempts=1))
        try:
            await aiohttp_get(middleware, url, headers={"Authorization": "Bearer tok-INFO-32"})
        except aiohttp.ClientResponseError as error:
            return error
        raise AssertionError("no error")

    error = asyncio.run(run())
    assert isinstance(error, aiohttp.ClientResponseError)
    # and pickled (it would not pickle at all: aiohttp's live response, read-only headers)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, retrysafe.ClientError)
    assert isinstance(copy, aiohttp.ClientResponseError)
    assert (copy.status, copy.response, str(copy)) == (401, None, str(error))
    assert copy.request_info.headers["Authorization"] == "[REDACTED]"
    shown = repr(error.request_info)
    assert "sk-live-INFO-32" not in shown
    assert "tok-INFO-32" not in shown
    assert error.request_info.headers["Authorization"] == "[REDACTED]"
    assert error.request_info.method == "GET"
    assert "page=2" in str(error.request_info.url)


@pytest.mark.parametrize("mode", ["always", "on", "Auto", "true"])
def test_bad_settings_are_refused_with_what_to_do(mode: str) -> None:
    """A mode that is not one of the two is refused: a near miss ("on", "Auto") must not
    quietly run as "off" and leave every POST unkeyed."""
    with pytest.raises(ValueError, match="idempotency must be 'off' or 'auto'"):
        RetryAdapter(idempotency=mode)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="idempotency must be 'off' or 'auto'"):
        retrysafe.Client(idempotency=mode)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"policy must be a retrysafe\.RetryPolicy"):
        RetryMiddleware(policy={"attempts": 3})  # type: ignore[arg-type]


def test_a_redirect_not_followed_leaves_nothing_for_the_next_call(chaos: KeyedChaos) -> None:
    """The redirect trail continues a chain only into the hop the redirect points to."""
    policy = RetryPolicy(attempts=2, backoff_base=0.01)
    with session_with(RetryAdapter(policy=policy)) as session:
        url = chaos.url("/redirect-chain/{key}", hops=1, fail_times=1, fail_status=503)
        hop = session.get(url, allow_redirects=False)
        assert hop.status_code == 302
        assert report_of(hop).attempts == 2  # type: ignore[union-attr]  # the retry is spent
        # An unrelated call next: a fresh call with its own two attempts, not the
        # chain's leftover allowance of one.
        response = session.get(chaos.url("/fail/{key}", times=1, status=503))
    report = report_of(response)
    assert response.status_code == 200
    assert report is not None
    assert report.attempts == 2


def test_each_attempt_tells_the_server_its_time_in_the_deadline_header(chaos: KeyedChaos) -> None:
    policy = RetryPolicy(attempt_timeout=2, deadline=5)
    adapter = RetryAdapter(policy=policy, deadline_header="Request-Timeout")
    with session_with(adapter) as session:
        sent = session.get(chaos.url("/echo")).json()["headers"]
    middleware = RetryMiddleware(policy=policy, deadline_header="Request-Timeout")

    async def run() -> Any:
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as session,
            session.get(chaos.url("/echo")) as response,
        ):
            return (await response.json())["headers"]

    for headers in (sent, asyncio.run(run())):
        assert 1.5 < float(headers["request-timeout"]) <= 2.0


def test_a_requests_retry_tells_the_server_the_time_it_has_left() -> None:
    # The first attempt takes 0.5 s of the 2 s deadline (on the fake clock) and gets a
    # 503; the retry's header says what is left, not the first attempt's 2 s again.
    clock = FakeClock(randoms=[0.0])  # (no backoff wait)
    sent: list[float] = []

    class SlowFirstRefusal(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            sent.append(float(self.headers["Request-Timeout"]))
            if len(sent) == 1:
                clock.advance(0.5)
            self.send_response(503 if len(sent) == 1 else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowFirstRefusal)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    policy = RetryPolicy(deadline=2.0, attempt_timeout=10.0, retry_after_jitter=0.0)
    adapter = RetryAdapter(policy=policy, clock=clock, deadline_header="Request-Timeout")
    try:
        with session_with(adapter) as session:
            assert session.get(f"http://127.0.0.1:{server.server_address[1]}/").status_code == 200
    finally:
        server.shutdown()
        server.server_close()
    assert sent == [2.0, 1.5]


def test_a_session_keeps_working_after_the_watchdog_cut_an_attempt(chaos: KeyedChaos) -> None:
    """The cut socket is the attempt's own: the pool hands the next call a working one."""
    policy = RetryPolicy(attempts=1, attempt_timeout=0.5, min_attempt_time=0.1)
    with session_with(RetryAdapter(policy=policy)) as session:
        with pytest.raises(retrysafe.TransportError):
            session.get(chaos.url("/drip", chunks=20, interval_ms=100))
        statuses = [session.get(chaos.url("/echo")).status_code for _ in range(3)]
    assert statuses == [200, 200, 200]


@pytest.mark.parametrize(
    ("path", "params"), [("/status/503", {"retry_after": 1}), ("/delay", {"ms": 2000})]
)
def test_aiohttp_a_session_closed_during_a_call_ends_it_with_aiohttps_error(
    chaos: KeyedChaos, path: str, params: dict[str, Any]
) -> None:
    """The caller closes the session in a wait between attempts (a 503 asking for a
    second), or while an attempt waits for its answer: the call ends with an
    ``aiohttp.ClientConnectionError``, at once or when its wait is over, and sends
    nothing more (the next attempt went through aiohttp's handler on the closed
    session, and failed with a bare ``AssertionError``)."""
    policy = RetryPolicy(attempts=4, backoff_base=0.3, backoff_cap=0.3, deadline=5.0)

    async def run() -> tuple[BaseException, float, int]:
        session = aiohttp.ClientSession(middlewares=(RetryMiddleware(policy=policy),))

        async def call() -> int:
            async with session.get(chaos.url(path, **params)) as response:
                return response.status

        task = asyncio.create_task(call())
        await asyncio.sleep(0.15)
        await session.close()
        closed = time.monotonic()
        sent_before_the_close = len(chaos.log())
        with pytest.raises(aiohttp.ClientConnectionError) as caught:
            await task
        return caught.value, time.monotonic() - closed, sent_before_the_close

    error, seconds, sent_before_the_close = asyncio.run(run())
    assert seconds < 1.25 + 0.5, error  # (a wait is not cut short: 1 s, jittered)
    time.sleep(0.4)  # (long enough for a late attempt to reach the server)
    assert len(chaos.log()) == sent_before_the_close  # and none sent


@pytest.mark.parametrize("shell", [RetryAdapter, RetryMiddleware])
def test_a_hedging_policy_is_refused_with_what_to_use_instead(shell: Any) -> None:
    with pytest.raises(ValueError, match=r"hedge_after=None.*retrysafe\.Client"):
        shell(policy=RetryPolicy(hedge_after=0.05))


def test_a_later_request_to_a_redirects_location_is_a_call_of_its_own(
    chaos: KeyedChaos,
) -> None:
    """Code that follows a Location itself, after the redirect's chain ran out of time,
    gets a fresh call (its own deadline and attempts), not the old chain's leftovers."""
    policy = RetryPolicy(deadline=1.0, min_attempt_time=0.1, backoff_base=0.01)
    url = chaos.url("/redirect-chain/{key}", hops=2)
    with session_with(RetryAdapter(policy=policy)) as session:
        hop = session.get(url, allow_redirects=False)
        assert hop.status_code == 302
        time.sleep(1.2)  # past the first call's deadline
        later = session.get(urljoin(url, hop.headers["location"]), allow_redirects=False)
    assert later.status_code == 302
    assert report_of(later).attempts == 1  # type: ignore[union-attr]

    middleware = RetryMiddleware(policy=policy)

    async def run() -> int:
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            async with session.get(url, allow_redirects=False) as first:
                location = urljoin(url, first.headers["location"])
            await asyncio.sleep(1.2)
            async with session.get(location, allow_redirects=False) as second:
                return second.status

    assert asyncio.run(run()) == 302


def test_a_redirect_hop_after_the_chains_deadline_continues_the_chain_and_fails() -> None:
    """The next hop of a chain whose time ran out (its head arrived within the attempt's
    grace) keeps that chain, so it fails with DeadlineExceeded, not as a new call."""
    trail = RedirectTrail("test_trail")
    expired = Deadline.after(0.0)  # (no time left)
    chain = SimpleNamespace(deadline=expired)
    hop = httpx.Request("GET", "http://api.test/a", extensions={"retrysafe.chain": chain})
    trail.leave(hop, "http://api.test/b")
    assert trail.take("http://api.test/b", "GET")[0] is chain


class _TrickledRedirects(http.server.BaseHTTPRequestHandler):
    """``/hop/N``: a 302 to the next hop whose body trickles (``body_bytes`` bytes, one
    every ``gap`` seconds: 0.5 s here), then at N = ``hops`` a 200."""

    protocol_version = "HTTP/1.1"
    hops = 4
    body_bytes = 10
    gap = 0.05

    def do_GET(self) -> None:
        number = int(self.path.rsplit("/", 1)[1])
        if number >= self.hops:
            self.send_response(200)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"done")
            return
        self.send_response(302)
        self.send_header("Location", f"/hop/{number + 1}")
        self.send_header("Content-Length", str(self.body_bytes))
        self.end_headers()
        try:
            for _ in range(self.body_bytes):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(self.gap)
        except (BrokenPipeError, ConnectionResetError):  # (the client gave up: the point)
            self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


def _seconds_to_give_up(handler: type[_TrickledRedirects], deadline: float) -> float:
    """How long a streamed GET of ``handler``'s chain took to fail with DeadlineExceeded."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        policy = RetryPolicy(deadline=deadline, min_attempt_time=0.05, backoff_base=0.01)
        with session_with(RetryAdapter(policy=policy)) as session:
            started = time.monotonic()
            with pytest.raises(retrysafe.DeadlineExceeded):
                session.get(f"http://127.0.0.1:{server.server_address[1]}/hop/0", stream=True)
            return time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()


def test_a_streamed_requests_call_reads_each_redirect_body_within_the_chains_deadline() -> None:
    """requests reads a redirect's body before it follows it: under stream=True that read
    is the chain's time too, so a chain of slow redirect bodies ends at the deadline."""
    took = _seconds_to_give_up(_TrickledRedirects, deadline=1.2)
    assert took < 1.2 + 0.4  # (four hops, 2 s of bodies, without the bound)


class _SlowRedirect(_TrickledRedirects):
    """One 302 whose 20-byte body takes 2 s (a byte every 0.1 s), then a 200."""

    hops = 1
    body_bytes = 20
    gap = 0.1


def test_a_streamed_requests_call_cuts_a_slow_redirect_body_at_the_deadline() -> None:
    """The redirect's body is read within its attempt, so the deadline ends that read:
    the call fails at its 0.6 s deadline, not after the 2 s body (which requests would
    read, uncut, before following the redirect)."""
    took = _seconds_to_give_up(_SlowRedirect, deadline=0.6)
    assert took < 1.5  # (the 2 s body, without the bound)


SECRET_QUERY_VALUE = "qk-" + "5e" * 8  # built at run time: never in a source line


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_exception_chain_of_a_transport_failure_holds_no_secret(chaos: KeyedChaos) -> None:
    """Tracebacks (what logger.exception and error trackers print) follow __cause__; the
    original requests/aiohttp exception, which names the URL with its query, is not on it."""
    policy = RetryPolicy(attempts=1)
    refused = f"http://127.0.0.1:{_unused_port()}/?api_key={SECRET_QUERY_VALUE}"
    with (
        session_with(RetryAdapter(policy=policy)) as session,
        pytest.raises(retrysafe.TransportError) as caught,
    ):
        session.get(refused)
    printed = "".join(traceback.format_exception(caught.value))
    assert SECRET_QUERY_VALUE not in printed
    assert "ConnectionError" in printed  # the original's class name is kept, to debug with

    garbage = chaos.fault_url("garbage_status_line") + f"?api_key={SECRET_QUERY_VALUE}"

    async def run() -> BaseException:
        middleware = RetryMiddleware(policy=policy)
        async with aiohttp.ClientSession(middlewares=(middleware,)) as client:
            try:
                async with client.get(garbage):
                    pass
            except retrysafe.ApiError as error:
                return error
        raise AssertionError("the call did not fail")

    error = asyncio.run(run())
    printed = "".join(traceback.format_exception(error))
    assert SECRET_QUERY_VALUE not in printed


def test_urllib3s_own_debug_log_shows_no_secret_query_value(
    chaos: KeyedChaos, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.DEBUG, logger="urllib3"),
        session_with(RetryAdapter()) as session,
    ):
        session.get(chaos.url("/status/200") + f"&api_key={SECRET_QUERY_VALUE}")
    pool_lines = [r.getMessage() for r in caplog.records if r.name == "urllib3.connectionpool"]
    assert any("api_key=[REDACTED]" in line for line in pool_lines), pool_lines
    assert not any(SECRET_QUERY_VALUE in line for line in pool_lines)


# -- challenge-answering auth ---------------------------------------------------------------


class _DigestHandler(http.server.BaseHTTPRequestHandler):
    """HTTP digest authentication (RFC 7616, MD5, qop=auth) for user ``ada``, password
    ``lovelace``: a 401 with the challenge, then a 200 to a request answering it."""

    protocol_version = "HTTP/1.1"
    realm, nonce = "api", "5f1c0ffee"

    def do_GET(self) -> None:
        if self._answered(self.headers.get("Authorization", "")):
            self._reply(200, {}, b"welcome")
        else:
            challenge = f'Digest realm="{self.realm}", nonce="{self.nonce}", qop="auth"'
            self._reply(401, {"WWW-Authenticate": challenge}, b"who are you?")

    def _answered(self, authorization: str) -> bool:
        if not authorization.startswith("Digest "):
            return False
        fields = dict(
            (name.strip(), value.strip().strip('"'))
            for name, _, value in (part.partition("=") for part in authorization[7:].split(","))
        )

        def md5(text: str) -> str:
            return hashlib.md5(text.encode()).hexdigest()

        known = md5(f"ada:{self.realm}:lovelace")
        expected = md5(
            f"{known}:{self.nonce}:{fields.get('nc')}:{fields.get('cnonce')}:auth:"
            + md5(f"GET:{fields.get('uri')}")
        )
        return fields.get("username") == "ada" and fields.get("response") == expected

    def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def digest_server() -> Any:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DigestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_requests_digest_auth_answers_its_challenge_through_the_adapter(
    digest_server: str,
) -> None:
    """requests' HTTPDigestAuth answers the 401 challenge from a response hook, which
    runs on what the adapter returns: the challenge goes back to it, though failures
    raise (the adapter raised the 401, and the handshake never got its second step)."""
    auth = requests.auth.HTTPDigestAuth("ada", "lovelace")
    with session_with(RetryAdapter(policy=FAST)) as session:
        response = session.get(f"{digest_server}/reports", auth=auth)
    assert (response.status_code, response.text) == (200, "welcome")
    assert [hop.status_code for hop in response.history] == [401]


def test_requests_digest_auth_with_wrong_credentials_still_raises(digest_server: str) -> None:
    """The answer to the challenge carries credentials: its 401 is a failure, raised."""
    auth = requests.auth.HTTPDigestAuth("ada", "babbage")
    with (
        session_with(RetryAdapter(policy=FAST)) as session,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        session.get(f"{digest_server}/reports", auth=auth)
    assert caught.value.status == 401


def test_aiohttp_digest_auth_answers_its_challenge_within_each_attempt(
    digest_server: str,
) -> None:
    """Listed first, the middleware runs outermost: aiohttp's DigestAuthMiddleware,
    listed after it, answers the challenge within the attempt (docs/clients.md)."""

    async def run() -> tuple[int, bytes]:
        middlewares = (
            RetryMiddleware(policy=FAST),
            aiohttp.DigestAuthMiddleware("ada", "lovelace"),
        )
        async with (
            aiohttp.ClientSession(middlewares=middlewares) as session,
            session.get(f"{digest_server}/reports") as response,
        ):
            return response.status, await response.read()

    assert asyncio.run(run()) == (200, b"welcome")


@pytest.mark.parametrize("hooked", [False, True], ids=["no hook", "a logging hook"])
def test_requests_a_challenge_no_auth_handler_answers_raises(
    digest_server: str, hooked: bool
) -> None:
    """Only an auth handler's hook answers a challenge: a 401 on a request with none
    raises, whatever other response hooks the request has."""
    seen: list[int] = []
    hooks = {"response": [lambda response, **_: seen.append(response.status_code)]}
    with (
        session_with(RetryAdapter(policy=FAST)) as session,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        session.get(f"{digest_server}/reports", hooks=hooks if hooked else None)
    assert caught.value.status == 401
    assert seen == []  # (the adapter raised: requests ran no hook)


# -- headers beyond ASCII -------------------------------------------------------------------


class _Utf8HeaderHandler(http.server.BaseHTTPRequestHandler):
    """Answers ``/<status>`` with that status and a Content-Disposition in raw UTF-8, as
    real servers send a file name; echoes the request's X-User-Name back, as bytes."""

    def do_GET(self) -> None:
        status = int(self.path.strip("/") or 200)
        name = 'attachment; filename="caf\u00e9.txt"'.encode()
        echoed = self.headers.get("X-User-Name", "").encode("latin-1")
        self.wfile.write(
            b"HTTP/1.1 %d X\r\nContent-Disposition: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (status, name, len(echoed), echoed)
        )

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def utf8_server() -> Any:
    with serving(_Utf8HeaderHandler) as url:
        yield url


def test_requests_takes_header_values_beyond_ascii(utf8_server: str) -> None:
    # (both ways: a response's UTF-8 file name, a request's latin-1 text; the
    # adapter only reads them, and requests sends and decodes them as it always does)
    with session_with(RetryAdapter(policy=FAST)) as session:
        answer = session.get(f"{utf8_server}/200", headers={"X-User-Name": "Jos\u00e9"})
        assert (answer.status_code, answer.content) == (200, "Jos\u00e9".encode("latin-1"))
        assert "caf" in answer.headers["Content-Disposition"]
        with pytest.raises(retrysafe.ClientError) as caught:
            session.get(f"{utf8_server}/404")
    assert caught.value.status == 404


def test_aiohttp_takes_header_values_beyond_ascii(utf8_server: str) -> None:
    async def run() -> None:
        middleware = RetryMiddleware(policy=FAST)
        status, body = await aiohttp_get(
            middleware, f"{utf8_server}/200", headers={"X-User-Name": "Jos\u00e9"}
        )
        assert status == 200
        assert body.decode("utf-8", "replace").startswith("Jos")
        with pytest.raises(retrysafe.ClientError) as caught:
            await aiohttp_get(middleware, f"{utf8_server}/404")
        assert caught.value.status == 404

    asyncio.run(run())


@pytest.mark.parametrize(
    "location",
    [
        "/next",
        "/next step",
        "/next?q=%7E",
        "/NEXT/%7euser",
        "next/../other",
        "//other.test/path",
        "http://other.test/a b?x=%41",
        "/caf\u00e9",
        "/with#fragment",
    ],
)
def test_the_adapter_expects_the_next_hop_where_requests_sends_it(location: str) -> None:
    # The chain carries over only to a request for exactly the redirect's target: it
    # must be the URL requests itself builds for the next hop (re-quoting included).
    from retrysafe.requests.adapter import _redirect_target

    response = requests.Response()
    response.status_code = 302
    response.url = "http://api.test/start/here?x=1"
    response.headers["Location"] = location.encode().decode("latin-1")  # as http.client reads it
    response._content = b""
    request = requests.Request("GET", response.url).prepare()
    response.request = request
    session = requests.Session()
    hop = next(iter(session.resolve_redirects(response, request, yield_requests=True)))
    target = _redirect_target(response)
    assert target is not None
    assert target.split("#")[0] == hop.url.split("#")[0]


def test_waiting_for_a_connection_of_a_full_blocking_pool_ends_at_the_deadline(
    chaos: KeyedChaos,
) -> None:
    # requests passes urllib3 no pool timeout: with pool_block=True and the pool's one
    # connection held by a streamed body, a call would wait for as long as it is held.
    policy = RetryPolicy(deadline=1.0, backoff_base=0.01)
    adapter = RetryAdapter(policy=policy, pool_maxsize=1, pool_block=True)
    with session_with(adapter) as session:
        held = session.get(chaos.url("/sse", events=10, interval_ms=400), stream=True)
        try:
            started = time.monotonic()
            with pytest.raises(retrysafe.DeadlineExceeded):
                session.get(chaos.url("/echo"))
            assert time.monotonic() - started < 2.0
        finally:
            held.close()


def test_each_attempt_sends_its_own_trace_context(api: Any, chaos: Any) -> None:
    """An OpenTelemetry hook's attempt span reaches the server as ``traceparent`` through
    these shells too, a fresh one on each attempt, as through retrysafe.Client."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    received: list[str | None] = []

    def rule(response: httpx.Response) -> retrysafe.Verdict | None:
        received.append(response.json()["headers"].get("traceparent"))
        return retrysafe.Verdict.retry("echo_refused") if len(received) < 2 else None

    policy = RetryPolicy(backoff_base=0.01, backoff_cap=0.02, rules=(rule,))
    hook = OpenTelemetry(tracer_provider=provider)
    api.request("GET", chaos.url("/echo"), policy=policy, client_options={"hooks": [hook]})
    attempts = [span for span in exporter.get_finished_spans() if span.parent is not None]
    sent = [
        f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-"
        f"{int(span.context.trace_flags):02x}"
        for span in attempts
    ]
    assert len(sent) == 2
    assert received == sent
