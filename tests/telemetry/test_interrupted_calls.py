"""A call that an exception not its own ends (a cancelled task, a KeyboardInterrupt) is
told as such: an ``interrupted`` event, counted and traced as a call that ended, not
left out of every count with its span ending without a word."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
import pytest
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry
from telemetry_support import Otel
from test_prometheus import scrape, value

import retrysafe
from retrysafe.observe import RetryEvent
from retrysafe.telemetry.prometheus import PrometheusMetrics

#: What a cancelled task raises through the call, by anyio backend.
CANCELLED = {"asyncio": "CancelledError", "trio": "Cancelled"}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_task_cancelled_mid_attempt_ends_its_call_as_interrupted(
    chaos: Any, otel: Otel, backend: str
) -> None:
    events: list[RetryEvent] = []
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)

    async def call() -> None:
        hooks = [events.append, metrics, otel.hook]
        async with retrysafe.AsyncClient(hooks=hooks, dependency="slow") as client:
            with anyio.move_on_after(0.3):
                await client.get(chaos.url("/hang"))

    anyio.run(call, backend=backend)
    ending = events[-1]
    assert ending.kind == "interrupted"
    assert ending.exception == CANCELLED[backend]
    assert ending.attempt == 1  # (the attempt cut in flight: started, never ended)
    assert (ending.status, ending.outcome, ending.reason) == (None, "", "")
    assert 0.25 <= ending.elapsed < 5.0
    assert [event.kind for event in events].count("interrupted") == 1
    cut = events[-2]  # (the attempt it cut ends first, counted with every attempt)
    assert (cut.kind, cut.attempt, cut.outcome) == ("attempt", 1, "interrupted")
    assert cut.exception == CANCELLED[backend]

    _, samples = scrape(registry)
    labels = {"dependency": "slow", "method": "GET", "result": "interrupted", "reason": ""}
    assert value(samples, "retrysafe_calls_total", **labels) == 1.0
    attempts = {"dependency": "slow", "outcome": "interrupted"}
    assert value(samples, "retrysafe_attempts_total", **attempts) == 1.0
    duration = {"dependency": "slow", "result": "interrupted"}
    assert value(samples, "retrysafe_call_duration_seconds_count", **duration) == 1.0

    spans = {span.name: span for span in otel.spans()}
    call_span, attempt_span = spans["retrysafe GET"], spans["GET"]
    for span in (call_span, attempt_span):
        assert dict(span.attributes or {})["error.type"] == CANCELLED[backend]
        assert span.status.status_code is StatusCode.ERROR
    assert dict(call_span.attributes or {})["retrysafe.attempts"] == 1
    assert dict(attempt_span.attributes or {})["retrysafe.outcome"] == "interrupted"
    durations = otel.metric_points()["retrysafe.call.duration"]
    assert [attributes["retrysafe.result"] for attributes, _ in durations] == ["interrupted"]


def test_a_call_cancelled_in_its_backoff_counts_the_attempt_it_made(chaos: Any) -> None:
    """Cancelled while waiting out a 503's Retry-After: one attempt made, none in flight."""
    events: list[RetryEvent] = []

    async def call() -> None:
        async with retrysafe.AsyncClient(hooks=[events.append]) as client:
            with anyio.move_on_after(0.5):
                await client.get(chaos.url("/fail/{key}", times=3, status=503, retry_after=3))

    anyio.run(call)
    assert [event.kind for event in events] == ["attempt", "retry", "interrupted"]
    assert events[-1].attempt == 1
    assert events[-1].exception == "CancelledError"


def test_a_keyboard_interrupt_ends_a_sync_call_as_interrupted_and_the_caller_gets_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ctrl-C while the request is in flight (raised where the socket read would be)."""
    events: list[RetryEvent] = []

    def interrupted(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt

    transport = httpx.MockTransport(interrupted)
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    client = retrysafe.Client(transport=transport, hooks=[events.append])
    with client, pytest.raises(KeyboardInterrupt):
        client.get("https://api.test/orders?api_key=SECRET-1f2e")
    assert [(e.kind, e.attempt, e.outcome, e.exception) for e in events] == [
        ("attempt", 1, "interrupted", "KeyboardInterrupt"),  # (the attempt it cut)
        ("interrupted", 1, "", "KeyboardInterrupt"),
    ]
    lines = [r.getMessage() for r in caplog.records if r.name == "retrysafe"]
    assert lines[-1].startswith("GET https://api.test/orders?api_key=[REDACTED] [")
    assert lines[-1].endswith("was interrupted after 1 attempt(s) by KeyboardInterrupt")
    assert all("SECRET-1f2e" not in line for line in lines)


def test_a_call_that_ends_on_its_own_error_is_not_also_interrupted() -> None:
    """The call's error (here a ServerError after its attempts) is its end: raised through
    the same shell as a cancel would be, it must not be told twice."""
    events: list[RetryEvent] = []
    policy = retrysafe.RetryPolicy(attempts=2, backoff_base=0.001, backoff_cap=0.001)
    transport = httpx.MockTransport(lambda request: httpx.Response(503))
    client = retrysafe.Client(transport=transport, policy=policy, hooks=[events.append])
    with client, pytest.raises(retrysafe.ServerError):
        client.get("https://api.test/")
    assert [event.kind for event in events] == ["attempt", "retry", "attempt", "failure"]


def test_an_aiohttp_call_cancelled_mid_attempt_is_interrupted(chaos: Any) -> None:
    """The aiohttp middleware tells it too (its own shell, not the httpx send loop)."""
    import asyncio

    import aiohttp

    from retrysafe.aiohttp import RetryMiddleware

    events: list[RetryEvent] = []

    async def call() -> None:
        middleware = RetryMiddleware(hooks=[events.append])
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            with pytest.raises(asyncio.TimeoutError):  # (TimeoutError itself from 3.11)
                await asyncio.wait_for(session.get(chaos.url("/hang")), 0.3)

    asyncio.run(call())
    assert [(e.kind, e.attempt, e.exception) for e in events] == [
        ("attempt", 1, "CancelledError"),
        ("interrupted", 1, "CancelledError"),
    ]


def test_a_requests_call_interrupted_mid_attempt_is_interrupted(chaos: Any) -> None:
    """And the requests adapter, for a KeyboardInterrupt raised in the attempt (by a
    rule reading the answer here, where a Ctrl-C during the read would land)."""
    import requests

    from retrysafe.requests import RetryAdapter

    events: list[RetryEvent] = []

    def interrupt(response: httpx.Response) -> None:
        raise KeyboardInterrupt

    policy = retrysafe.RetryPolicy(rules=[interrupt])
    with requests.Session() as session:
        session.mount("http://", RetryAdapter(policy=policy, hooks=[events.append]))
        with pytest.raises(KeyboardInterrupt):
            session.get(chaos.url("/status/200"))
    assert [(e.kind, e.attempt, e.exception) for e in events] == [
        ("attempt", 1, "KeyboardInterrupt"),
        ("interrupted", 1, "KeyboardInterrupt"),
    ]
