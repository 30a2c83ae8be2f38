"""Layers that each retry must not multiply: nested calls retry less and stop together.

Three services nested in one process (httpx.ASGITransport runs each app in the
caller's task), each calling the next with retrysafe, against an API that always
answers 503. Also: a deadline sent in a header bounds the nested service's calls.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import retrysafe
from hidden_layer import AsyncHiddenLayer, HiddenLayer
from retrysafe import RetryPolicy
from retrysafe.governor import Governor, GovernorSettings
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio


class CountingApi:
    """An ASGI API that always answers 503 and counts the calls it gets."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await Response("down", status_code=503)(scope, receive, send)


def service_calling(downstream: Any, settings: GovernorSettings, clock: FakeClock) -> Starlette:
    """A service whose one endpoint calls ``downstream`` through retrysafe."""

    async def endpoint(request: Request) -> Response:
        async with retrysafe.AsyncClient(
            transport=httpx.ASGITransport(app=downstream),
            clock=clock,
            governor=Governor(settings, clock=clock),
        ) as client:
            try:
                await client.get("http://downstream/")
            except retrysafe.ApiError as error:
                return JSONResponse({"error": error.reason}, status_code=503)
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/", endpoint)])


async def calls_reaching_the_api(layers: int, settings: GovernorSettings) -> int:
    clock = FakeClock()
    api = CountingApi()
    app: Any = api
    for _ in range(layers - 1):
        app = service_calling(app, settings, clock)
    async with retrysafe.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        clock=clock,
        governor=Governor(settings, clock=clock),
    ) as client:
        with pytest.raises(retrysafe.ServerError):
            await client.get("http://outer/")
    return api.calls


async def test_one_layer_makes_its_four_attempts() -> None:
    assert await calls_reaching_the_api(1, GovernorSettings()) == 4


async def test_three_nested_layers_send_at_most_twice_one_layers_calls() -> None:
    one_layer = await calls_reaching_the_api(1, GovernorSettings())
    three_layers = await calls_reaching_the_api(3, GovernorSettings())
    assert three_layers <= 2 * one_layer
    assert three_layers == 2  # the innermost call retries once; the outer ones stop


async def test_without_the_guard_layers_multiply() -> None:
    assert await calls_reaching_the_api(3, GovernorSettings.off()) == 64


async def test_a_deadline_sent_in_a_header_bounds_the_nested_call(chaos: Any) -> None:
    inner_errors: list[str] = []

    async def endpoint(request: Request) -> Response:
        async with retrysafe.AsyncClient(policy=RetryPolicy(deadline=30)) as client:
            try:
                await client.get(chaos.url("/hang"))
            except retrysafe.ApiError as error:
                inner_errors.append(type(error).__name__)
                return JSONResponse({"error": error.reason}, status_code=504)
        return JSONResponse({"ok": True})

    # The service keeps 0.5 s of the 2 s it is sent back: its own call (30 s by its policy)
    # ends with DeadlineExceeded well before the outer attempt is cut, even when the
    # service is slow to start it (a loaded machine).
    app = Starlette(routes=[Route("/", endpoint)])
    service = retrysafe.DeadlineMiddleware(app, margin=0.5)
    started = time.monotonic()
    async with retrysafe.AsyncClient(
        transport=httpx.ASGITransport(app=service),
        deadline_header="Request-Timeout",
        policy=RetryPolicy(deadline=2, attempts=1),
    ) as client:
        with pytest.raises(retrysafe.ApiError):
            await client.get("http://service/")
    assert time.monotonic() - started < 2.5
    assert inner_errors == ["DeadlineExceeded"]


def test_a_layer_under_a_call_ends_when_the_calls_attempt_must(chaos: Any) -> None:
    # A retrying transport under a retrysafe client: its own policy would retry a read
    # timeout, but the outer attempt, the only time the caller gave, is over by then.
    under = HiddenLayer(retrysafe.RetryTransport(httpx.HTTPTransport()))
    started = time.monotonic()
    with (
        retrysafe.Client(transport=under, policy=RetryPolicy(deadline=1, attempts=1)) as client,
        pytest.raises(retrysafe.DeadlineExceeded),
    ):
        client.get(chaos.url("/hang"))
    assert time.monotonic() - started < 1.7  # (a second attempt under it took it past 2 s)


async def test_a_layer_under_an_async_call_ends_when_the_calls_attempt_must(chaos: Any) -> None:
    under = AsyncHiddenLayer(retrysafe.AsyncRetryTransport(httpx.AsyncHTTPTransport()))
    started = time.monotonic()
    async with retrysafe.AsyncClient(
        transport=under, policy=RetryPolicy(deadline=1, attempts=1)
    ) as client:
        with pytest.raises(retrysafe.ApiError):
            await client.get(chaos.url("/hang"))
    assert time.monotonic() - started < 1.7


_QUICK = {"backoff_base": 0.001, "backoff_cap": 0.002}


def _layers_under_hedging(settings: GovernorSettings) -> tuple[int, int]:
    """A hedging transport over a retrying one over an API that always answers 503:
    (requests the API got, the final status)."""
    sent: list[httpx.Request] = []

    def unavailable(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(503)

    inner = retrysafe.RetryTransport(
        httpx.MockTransport(unavailable),
        policy=RetryPolicy(attempts=4, **_QUICK),
        governor=Governor(settings),
    )
    outer = retrysafe.RetryTransport(
        inner,
        policy=RetryPolicy(attempts=3, hedge_after=5.0, **_QUICK),
        governor=Governor(settings),
    )
    with httpx.Client(transport=outer) as client:
        status = client.get("https://api.test/").status_code
    return len(sent), status


def test_layers_under_a_hedging_call_do_not_multiply() -> None:
    # The layer under it runs inside a hedged copy's attempt (on the copy's thread): it
    # is nested in the hedging call as it would be in a plain one.
    assert _layers_under_hedging(GovernorSettings()) == (2, 503)
    assert _layers_under_hedging(GovernorSettings.off()) == (12, 503)


async def _async_layers_under_hedging(settings: GovernorSettings) -> int:
    sent: list[httpx.Request] = []

    async def unavailable(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(503)

    inner = retrysafe.AsyncRetryTransport(
        httpx.MockTransport(unavailable),
        policy=RetryPolicy(attempts=4, **_QUICK),
        governor=Governor(settings),
    )
    outer = retrysafe.AsyncRetryTransport(
        inner,
        policy=RetryPolicy(attempts=3, hedge_after=5.0, **_QUICK),
        governor=Governor(settings),
    )
    async with httpx.AsyncClient(transport=outer) as client:
        assert (await client.get("https://api.test/")).status_code == 503
    return len(sent)


async def test_layers_under_an_async_hedging_call_do_not_multiply() -> None:
    # (the copy runs as a task of its own)
    assert await _async_layers_under_hedging(GovernorSettings()) == 2
    assert await _async_layers_under_hedging(GovernorSettings.off()) == 12


def test_a_layer_under_a_hedging_call_ends_when_the_copys_attempt_must(chaos: Any) -> None:
    under = HiddenLayer(retrysafe.RetryTransport(httpx.HTTPTransport()))
    started = time.monotonic()
    policy = RetryPolicy(deadline=1, attempts=2, hedge_after=5.0)
    with (
        retrysafe.Client(transport=under, policy=policy) as client,
        pytest.raises(retrysafe.DeadlineExceeded),
    ):
        client.get(chaos.url("/hang"))
    assert time.monotonic() - started < 1.7  # (a second attempt under it took it past 2 s)


async def test_a_layer_under_an_async_hedging_call_ends_when_the_copys_attempt_must(
    chaos: Any,
) -> None:
    under = AsyncHiddenLayer(retrysafe.AsyncRetryTransport(httpx.AsyncHTTPTransport()))
    started = time.monotonic()
    async with retrysafe.AsyncClient(
        transport=under, policy=RetryPolicy(deadline=1, attempts=2, hedge_after=5.0)
    ) as client:
        with pytest.raises(retrysafe.ApiError):
            await client.get(chaos.url("/hang"))
    assert time.monotonic() - started < 1.7


@pytest.mark.parametrize(
    "value", [b"soon", b"-1", b"inf", b"nan", b"", b"1_000", b"+2", b"1e3", b"2, soon"]
)
async def test_an_unusable_deadline_header_leaves_no_scope(value: bytes) -> None:
    seen: list[object] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(retrysafe.deadline_scope.current_deadline())
        await Response("ok")(scope, receive, send)

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=retrysafe.DeadlineMiddleware(app))
    ) as client:
        await client.get("http://service/", headers={"Request-Timeout": value.decode()})
    assert seen == [None]


async def _scope_seen_with(headers: Any) -> float:
    """The seconds left in the deadline scope a handler behind DeadlineMiddleware (margin
    0.5 s, on a fake clock) runs in, for a request sent with ``headers``."""
    seen: list[float] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        deadline = retrysafe.deadline_scope.current_deadline()
        assert deadline is not None
        seen.append(deadline.remaining())
        await Response("ok")(scope, receive, send)

    middleware = retrysafe.DeadlineMiddleware(app, margin=0.5, clock=FakeClock())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=middleware)) as client:
        await client.get("http://service/", headers=headers)
    [remaining] = seen
    return remaining


async def test_a_usable_deadline_header_sets_the_scope_less_the_margin() -> None:
    assert await _scope_seen_with({"Request-Timeout": "2.5"}) == 2.0


@pytest.mark.parametrize(
    "lines",
    [
        [("Request-Timeout", "100"), ("Request-Timeout", "1")],
        [("Request-Timeout", "1"), ("Request-Timeout", "100")],
        [("Request-Timeout", "1, 100")],
        [("Request-Timeout", "100 ,1.0")],
    ],
)
async def test_a_deadline_header_sent_more_than_once_counts_its_tightest_value(
    lines: list[tuple[str, str]],
) -> None:
    assert await _scope_seen_with(lines) == 0.5


class _BrokenHook:
    """A hook whose ``listening`` property raises while ``broken`` is set."""

    def __init__(self) -> None:
        self.broken = False

    @property
    def listening(self) -> bool:
        if self.broken:
            raise RuntimeError("the hook's own bug")
        return False

    def __call__(self, event: retrysafe.RetryEvent) -> None:
        pass


def test_a_call_that_fails_to_start_is_not_left_running_in_its_context() -> None:
    # A call that fails as it starts (here a hook raises) must leave its context as it
    # found it: otherwise every later call there would count as nested in it, and get
    # the nested allowance of attempts instead of its policy's.
    from retrysafe.attempt_deadline import current_call

    sent: list[httpx.Request] = []

    def unavailable(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(503)

    hook = _BrokenHook()
    transport = retrysafe.RetryTransport(
        httpx.MockTransport(unavailable),
        policy=RetryPolicy(attempts=4, backoff_base=0.0, backoff_cap=0.0),
        clock=FakeClock(),
        hooks=[hook],
    )
    with httpx.Client(transport=transport) as client:
        hook.broken = True
        with pytest.raises(RuntimeError, match="the hook's own bug"):
            client.get("https://api.test/first")
        hook.broken = False
        assert current_call.get() is None
        assert sent == []
        assert client.get("https://api.test/second").status_code == 503
    assert len(sent) == 4  # the policy's attempts, not a nested call's
