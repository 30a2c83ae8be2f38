"""DeadlineMiddleware's promises (docs/deadlines.md, "One deadline across services"):
the default header and margin, what it accepts, and a caller whose time is spent.

The app behind the middleware is called directly with an ASGI scope, on a
``FakeClock``, so the seconds a handler sees are exact.
"""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe.deadline_scope import current_deadline
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio


async def _nothing_received() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _dropped(message: Any) -> None:
    pass


async def seconds_seen(
    headers: list[tuple[bytes, bytes]], *, kind: str = "http", **options: Any
) -> float | None:
    """The seconds left in the scope an app behind the middleware runs in (None: no scope)."""
    seen: list[float | None] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        deadline = current_deadline()
        seen.append(None if deadline is None else deadline.remaining())

    middleware = retrysafe.DeadlineMiddleware(app, clock=FakeClock(), **options)
    await middleware({"type": kind, "headers": headers}, _nothing_received, _dropped)
    [seconds] = seen
    return seconds


async def test_by_default_it_reads_request_timeout_and_keeps_50_ms_back() -> None:
    assert await seconds_seen([(b"request-timeout", b"2")]) == pytest.approx(1.95)


async def test_a_header_of_another_name_is_read_whatever_its_case() -> None:
    headers = [(b"request-timeout", b"9"), (b"x-deadline", b"3")]
    assert await seconds_seen(headers, header="X-Deadline", margin=0.5) == 2.5


async def test_a_margin_of_zero_passes_the_callers_time_on_whole() -> None:
    assert await seconds_seen([(b"request-timeout", b"2.5")], margin=0) == 2.5


@pytest.mark.parametrize("margin", [-0.1, math.inf, math.nan])
def test_a_margin_that_is_not_finite_seconds_is_refused(margin: float) -> None:
    with pytest.raises(ValueError, match="margin must be >= 0 seconds"):
        retrysafe.DeadlineMiddleware(_dropped, margin=margin)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "seconds"), [(b".5", 0.5), (b"3.", 3.0), (b"10.000", 10.0)])
async def test_any_plain_decimal_seconds_are_read(value: bytes, seconds: float) -> None:
    assert await seconds_seen([(b"request-timeout", value)], margin=0) == seconds


async def test_a_header_so_long_it_reads_as_infinite_leaves_the_request_without_a_scope() -> None:
    # (plain digits all, but more than a float holds: float() reads them as inf)
    assert await seconds_seen([(b"request-timeout", b"9" * 400)]) is None


@pytest.mark.parametrize(
    "headers",
    [
        [(b"request-timeout", b"5"), (b"request-timeout", b"2"), (b"request-timeout", b"3")],
        [(b"request-timeout", b"5, 2,3")],
        [(b"request-timeout", b"5"), (b"request-timeout", b" 3 ,2 ")],
    ],
)
async def test_a_header_sent_more_than_once_counts_its_tightest_value(
    headers: list[tuple[bytes, bytes]],
) -> None:
    # Several lines, or values separated by commas (HTTP reads them alike): a proxy that
    # added its own, shorter deadline must not be overruled by the longer one.
    assert await seconds_seen(headers, margin=0) == 2.0


@pytest.mark.parametrize(
    "value",
    [b"", b"soon", b"-1", b"+2", b"1e3", b"1_000", b"inf", b"nan", b"0x10", b"2s", b"1.2.3"],
)
async def test_a_value_that_is_not_plain_decimal_seconds_leaves_the_request_without_a_scope(
    value: bytes,
) -> None:
    assert await seconds_seen([(b"request-timeout", value)]) is None


async def test_one_malformed_value_among_good_ones_leaves_the_request_without_a_scope() -> None:
    # The header cannot be trusted as a whole: a scope from the values that happened to
    # parse could be looser than what the caller meant.
    headers = [(b"request-timeout", b"5"), (b"request-timeout", b"-1")]
    assert await seconds_seen(headers) is None
    assert await seconds_seen([(b"request-timeout", b"5, soon")]) is None


async def test_a_header_name_is_matched_whatever_case_the_server_passes_it_in() -> None:
    # (ASGI servers should lower-case names; one that does not still gets its deadline)
    assert await seconds_seen([(b"Request-Timeout", b"2")], margin=0) == 2.0


@pytest.mark.parametrize("kind", ["websocket", "lifespan"])
async def test_only_http_requests_get_a_scope(kind: str) -> None:
    assert await seconds_seen([(b"request-timeout", b"5")], kind=kind) is None


async def test_a_caller_whose_time_is_spent_still_reaches_the_handler() -> None:
    # Less than the margin left: the handler runs, and every retrysafe call it makes
    # fails at once with DeadlineExceeded, nothing sent.
    sent: list[httpx.Request] = []
    outcome: list[str] = []
    clock = FakeClock()

    def downstream(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        transport = httpx.MockTransport(downstream)
        async with retrysafe.AsyncClient(transport=transport, clock=clock) as client:
            try:
                await client.get("https://downstream.test/")
            except retrysafe.DeadlineExceeded as error:
                outcome.append(f"DeadlineExceeded after {error.attempts}")

    middleware = retrysafe.DeadlineMiddleware(app, clock=clock)  # margin 0.05 s
    scope = {"type": "http", "headers": [(b"request-timeout", b"0.010")]}
    await middleware(scope, _nothing_received, _dropped)
    assert outcome == ["DeadlineExceeded after 0"]
    assert sent == []


def headers_sent(policy: retrysafe.RetryPolicy, *, scope_seconds: float | None = None) -> list[str]:
    """The ``Request-Timeout`` values a client with ``deadline_header`` sends, one per
    attempt, to an upstream that fails twice (on a fake clock: no wait is real)."""
    clock = FakeClock()
    sent: list[str] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("Request-Timeout", "(none)"))
        return httpx.Response(503 if len(sent) < 3 else 200)

    with retrysafe.Client(
        transport=httpx.MockTransport(upstream),
        clock=clock,
        policy=policy,
        deadline_header="Request-Timeout",
    ) as client:
        if scope_seconds is None:
            client.get("https://api.test/")
        else:
            with retrysafe.deadline(scope_seconds, clock=clock):
                client.get("https://api.test/")
    return sent


def test_each_attempt_sends_its_own_time_in_decimal_seconds() -> None:
    policy = retrysafe.RetryPolicy(attempt_timeout=10, backoff_base=0, backoff_cap=0)
    assert headers_sent(policy) == ["10.000", "10.000", "10.000"]


def test_the_time_sent_shrinks_with_the_enclosing_scope() -> None:
    policy = retrysafe.RetryPolicy(attempt_timeout=10, backoff_base=1, backoff_cap=1)
    seconds = [float(value) for value in headers_sent(policy, scope_seconds=2.5)]
    assert seconds[0] == 2.5  # the scope's 2.5 s, not the attempt's 10
    assert seconds == sorted(seconds, reverse=True)  # later attempts have what is left


def test_an_attempt_without_a_time_limit_sends_no_header() -> None:
    unlimited = retrysafe.RetryPolicy(
        attempt_timeout=math.inf, deadline=math.inf, backoff_base=0, backoff_cap=0
    )
    assert headers_sent(unlimited) == ["(none)", "(none)", "(none)"]
