"""Call instruments (hooks with ``start_call``): followed to the end, never failing a call."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from telemetry_support import Otel

import retrysafe
from retrysafe.observe import CallInstrument, RetryEvent
from retrysafe.telemetry.otel import OpenTelemetry

FAST = retrysafe.RetryPolicy(backoff_base=0.01, backoff_cap=0.02)


class Recorder:
    """A call instrument that writes down what it is told, in order."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, event: RetryEvent) -> None:
        self.seen.append(f"hook {event.kind}")

    def start_call(self, request: httpx.Request, *, dependency: str, url: str) -> Recorder:
        self.seen.append(f"start {request.method} {dependency}")
        return self

    def attempt_starting(self, number: int, request: httpx.Request) -> None:
        self.seen.append(f"attempt {number}")

    def event(self, event: RetryEvent) -> None:
        self.seen.append(f"trace {event.kind}")

    def close(self) -> None:
        self.seen.append("close")


class Broken(Recorder):
    def attempt_starting(self, number: int, request: httpx.Request) -> None:
        raise RuntimeError("tracer down")

    def event(self, event: RetryEvent) -> None:
        raise RuntimeError("tracer down")

    def close(self) -> None:
        raise RuntimeError("tracer down")


def test_an_instrument_follows_the_call_in_order(chaos: Any) -> None:
    recorder = Recorder()
    assert isinstance(recorder, CallInstrument)
    with retrysafe.Client(policy=FAST, hooks=[recorder], dependency="api") as client:
        client.get(chaos.url("/fail/{key}", times=1, status=503))
    assert recorder.seen == [
        "start GET api",
        "attempt 1",
        "hook attempt",
        "trace attempt",
        "hook retry",
        "trace retry",
        "attempt 2",
        "hook attempt",
        "trace attempt",
        "hook success",
        "trace success",
        "close",
    ]


def test_a_failing_instrument_never_fails_the_call(
    chaos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with retrysafe.Client(policy=FAST, hooks=[Broken()]) as client:
        response = client.get(chaos.url("/fail/{key}", times=1, status=503))
    assert response.status_code == 200
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 2 + 4 + 1  # two attempts, four events, the close


def test_an_instrument_that_will_not_start_leaves_the_call_alone(chaos: Any) -> None:
    class Refusing(Recorder):
        def start_call(self, request: httpx.Request, *, dependency: str, url: str) -> None:
            raise RuntimeError("cannot start")

    refusing = Refusing()
    with retrysafe.Client(policy=FAST, hooks=[refusing]) as client:
        assert client.get(chaos.url("/status/200")).status_code == 200
    assert refusing.seen == ["hook attempt", "hook success"]


def test_an_instrument_that_will_not_start_does_not_stop_another_from_following(
    chaos: Any,
) -> None:
    class Refusing(Recorder):
        def start_call(self, request: httpx.Request, *, dependency: str, url: str) -> None:
            raise RuntimeError("cannot start")

    following = Recorder()
    with retrysafe.Client(policy=FAST, hooks=[Refusing(), following], dependency="api") as c:
        assert c.get(chaos.url("/status/200")).status_code == 200
    assert following.seen[:2] == ["start GET api", "attempt 1"]
    assert following.seen[-1] == "close"


def test_an_instrument_that_is_not_listening_is_not_asked_to_follow_the_call(
    chaos: Any,
) -> None:
    """``listening = False`` (an exporter with nowhere to send): while another instrument
    follows the call, this one is not started on it, so it opens no span and adds no
    header; the events that always go out still reach it."""

    class Deaf(Recorder):
        listening = False

    deaf, listening = Deaf(), Recorder()
    with retrysafe.Client(policy=FAST, hooks=[deaf, listening], dependency="api") as client:
        response = client.get(chaos.url("/fail/{key}", times=1, status=503))
    assert response.status_code == 200
    assert listening.seen[0] == "start GET api"
    assert "hook retry" in deaf.seen
    followed = ("start", "attempt", "trace", "close")
    assert [entry for entry in deaf.seen if entry.startswith(followed)] == []


def test_two_tracing_instruments_leave_the_callers_context_as_it_was(chaos: Any) -> None:
    exporters = [InMemorySpanExporter(), InMemorySpanExporter()]
    hooks = []
    for exporter in exporters:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        hooks.append(OpenTelemetry(tracer_provider=provider))
    with retrysafe.Client(policy=FAST, hooks=hooks) as client:
        client.get(chaos.url("/fail/{key}", times=1, status=503))
    # Each instrument followed the whole call (the call and its two attempts) ...
    assert [len(exporter.get_finished_spans()) for exporter in exporters] == [3, 3]
    # ... and the caller is back in the context it called from, not in an ended attempt.
    assert trace.get_current_span() is trace.INVALID_SPAN


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_call_cancelled_mid_attempt_ends_its_spans(chaos: Any, otel: Otel, backend: str) -> None:
    async def call() -> None:
        async with retrysafe.AsyncClient(hooks=[otel.hook]) as client:
            with anyio.move_on_after(0.3):
                await client.get(chaos.url("/hang"))
        # The attempt's context was left: nothing of it stays current after the call.
        assert not trace.get_current_span().get_span_context().is_valid
        assert otel_context.get_value(otel_context._SUPPRESS_HTTP_INSTRUMENTATION_KEY) is None

    anyio.run(call, backend=backend)
    spans = otel.spans()
    assert sorted(span.name for span in spans) == ["GET", "retrysafe GET"]
    attempt = next(span for span in spans if span.name == "GET")
    # (what cancelled it, as the task got it: test_interrupted_calls.py)
    cancelled = {"asyncio": "CancelledError", "trio": "Cancelled"}[backend]
    assert dict(attempt.attributes or {})["error.type"] == cancelled
    assert attempt.status.status_code is StatusCode.ERROR


# -- plain hooks ----------------------------------------------------------------------------


def test_a_failing_hook_is_logged_and_the_hooks_after_it_still_hear_every_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Telemetry never fails a call: whatever a hook raises (a metrics backend's KeyError
    as much as a RuntimeError) is logged with its traceback, and the next hook is not
    robbed of the event."""

    def broken(event: RetryEvent) -> None:
        raise KeyError(event.kind)

    heard: list[str] = []
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(transport=transport, hooks=[broken, lambda e: heard.append(e.kind)]) as c:
        assert c.get("https://api.test/").status_code == 200
    assert heard == ["attempt", "success"]
    # (its first failure at ERROR; later ones at DEBUG, not a storm: test_hooks_misuse.py)
    failures = [r for r in caplog.records if r.name == "retrysafe" and r.levelno == logging.ERROR]
    assert len(failures) == 1
    assert all(r.exc_info is not None and r.exc_info[0] is KeyError for r in failures)


class Sometimes:
    """A hook that says whether it listens (an exporter that may have nowhere to send)."""

    def __init__(self, *, listening: bool) -> None:
        self.listening = listening
        self.heard: list[str] = []

    def __call__(self, event: RetryEvent) -> None:
        self.heard.append(event.kind)


@pytest.mark.parametrize("neighbours", [0, 1])
def test_a_successful_call_sends_its_routine_events_only_while_some_hook_listens(
    caplog: pytest.LogCaptureFixture, neighbours: int
) -> None:
    caplog.set_level(logging.INFO, logger="retrysafe")  # (the log does not take DEBUG)
    hook = Sometimes(listening=False)
    others = [Sometimes(listening=False) for _ in range(neighbours)]
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(transport=transport, hooks=[*others, hook]) as client:
        client.get("https://api.test/")
        assert hook.heard == []  # not built at all
        hook.listening = True
        client.get("https://api.test/")
        assert hook.heard == ["attempt", "success"]


def test_a_hook_that_is_not_listening_still_hears_retries_and_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="retrysafe")
    hook = Sometimes(listening=False)
    transport = httpx.MockTransport(lambda request: httpx.Response(503))
    policy = retrysafe.RetryPolicy(attempts=2, backoff_base=0, backoff_cap=0)
    with (
        retrysafe.Client(transport=transport, hooks=[hook], policy=policy) as client,
        pytest.raises(retrysafe.ServerError),
    ):
        client.get("https://api.test/")
    assert "retry" in hook.heard
    assert hook.heard[-1] == "failure"


def test_a_hook_without_a_listening_attribute_always_listens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="retrysafe")
    heard: list[str] = []
    deaf = Sometimes(listening=False)
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(transport=transport, hooks=[deaf, lambda e: heard.append(e.kind)]) as c:
        c.get("https://api.test/")
    assert heard == ["attempt", "success"]


def test_two_tracing_instruments_of_a_cancelled_call_leave_the_callers_context_as_it_was(
    chaos: Any,
) -> None:
    """Cancelled mid-attempt, each instrument still has its attempt's context entered when
    the call is closed: they leave them innermost first, or the caller would be left in
    the first instrument's ended attempt."""
    hooks = [OpenTelemetry(tracer_provider=TracerProvider()) for _ in range(2)]

    async def call() -> None:
        async with retrysafe.AsyncClient(hooks=hooks) as client:
            with anyio.move_on_after(0.3):
                await client.get(chaos.url("/hang"))
        assert not trace.get_current_span().get_span_context().is_valid

    anyio.run(call)
