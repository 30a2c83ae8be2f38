"""What httpx gives its caller stays as httpx gives it, through retrysafe.

Over real sockets against the chaos server, sync and async (``api``: sync Client,
AsyncClient on asyncio and on trio), and through the drop-in transports:

- ``response.elapsed``: httpx sets it as it closes the stream it wraps the
  transport's response in. A body read within the attempt closed the response
  first, so httpx never set it, and reading it raised ``RuntimeError`` on every
  response of the clients (and on a final failure of the drop-in transports).
- A client enters and leaves its transport (``__enter__``/``__exit__``, async
  too); the transport a retrysafe shell wraps is entered and left with it (it was
  only closed).
- A response is closed once done with, a failed attempt's included.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.chaos import KeyedChaos

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(backoff_base=0.01, backoff_cap=0.05, retry_after_jitter=0.01)


def test_elapsed_is_the_calls_time_when_an_attempt_read_the_body(
    api: Any, chaos: KeyedChaos
) -> None:
    """A 503, then a 200 whose body the attempt reads: ``elapsed`` is the call's time,
    both attempts and the wait between them, as httpx counts it through a transport."""
    response = api.request("GET", chaos.url("/fail/{key}", times=1), policy=FAST)
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.attempts == 2
    assert isinstance(response.elapsed, datetime.timedelta)
    # the report's time, to timedelta's microsecond, and within the call as timed outside
    assert response.elapsed.total_seconds() == pytest.approx(report.elapsed, abs=1e-6)
    assert response.elapsed.total_seconds() <= api.seconds


def test_elapsed_is_set_on_a_drop_in_transports_final_failure(chaos: KeyedChaos) -> None:
    """The drop-in transport reads a failing response's body and returns the last one."""
    policy = RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.02)
    with httpx.Client(transport=retrysafe.RetryTransport(policy=policy)) as client:
        response = client.get(chaos.url("/status/503"))
    assert response.status_code == 503
    assert response.elapsed.total_seconds() >= 0


async def test_elapsed_is_set_on_an_async_drop_in_transports_final_failure(
    chaos: KeyedChaos,
) -> None:
    policy = RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.02)
    transport = retrysafe.AsyncRetryTransport(policy=policy)
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get(chaos.url("/status/503"))
    assert response.status_code == 503
    assert response.elapsed.total_seconds() >= 0


class _Recording(httpx.MockTransport):
    """A transport that notes being entered, left and closed (sync and async)."""

    def __init__(self) -> None:
        super().__init__(lambda request: httpx.Response(200))
        self.seen: list[str] = []

    def __enter__(self) -> _Recording:
        self.seen.append("enter")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seen.append("exit")
        self.close()

    def close(self) -> None:
        self.seen.append("close")

    async def __aenter__(self) -> _Recording:
        self.seen.append("aenter")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.seen.append("aexit")
        await self.aclose()

    async def aclose(self) -> None:
        self.seen.append("aclose")


def test_the_wrapped_transport_is_entered_and_left_with_the_client() -> None:
    for make in (
        lambda inner: retrysafe.Client(transport=inner),
        lambda inner: httpx.Client(transport=retrysafe.RetryTransport(inner)),
        lambda inner: retrysafe.Client(mounts={"http://": inner}),
    ):
        inner = _Recording()
        with make(inner) as client:
            client.get("http://upstream.test/")
        assert inner.seen == ["enter", "exit", "close"]


async def test_the_wrapped_async_transport_is_entered_and_left_with_the_client() -> None:
    for make in (
        lambda inner: retrysafe.AsyncClient(transport=inner),
        lambda inner: httpx.AsyncClient(transport=retrysafe.AsyncRetryTransport(inner)),
    ):
        inner = _Recording()
        async with make(inner) as client:
            await client.get("http://upstream.test/")
        assert inner.seen == ["aenter", "aexit", "aclose"]


def test_a_transport_without_enter_and_exit_is_still_closed() -> None:
    """Anything that sends and closes is a transport to retrysafe: it is closed as before."""

    class Minimal:
        closed = False

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200)

        def close(self) -> None:
            self.closed = True

    inner = Minimal()
    with httpx.Client(transport=retrysafe.RetryTransport(inner)) as client:  # type: ignore[arg-type]
        client.get("http://upstream.test/")
    assert inner.closed


class _WsgiResult:
    """A WSGI app's body, which notes whether the server called its ``close()``."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield self.body

    def close(self) -> None:
        self.closed = True


def test_a_failed_attempts_response_is_closed_before_the_retry() -> None:
    """Closing a response is httpx's contract with its transport: over WSGITransport it
    is what calls the app's ``close()`` (PEP 3333). httpcore's pool would close its own
    stream on the error anyway; other transports count on the caller."""
    results: list[_WsgiResult] = []

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> _WsgiResult:
        if not results:  # an undecodable body first: a failure, retried
            start_response("200 OK", [("Content-Encoding", "gzip")])
            result = _WsgiResult(b"this is not gzip" * 64)
        else:
            start_response("200 OK", [("Content-Type", "text/plain")])
            result = _WsgiResult(b"ok")
        results.append(result)
        return result

    with retrysafe.Client(transport=httpx.WSGITransport(app=app), policy=FAST) as client:
        response = client.get("http://app.test/")
    assert response.text == "ok"
    assert [result.closed for result in results] == [True, True]
