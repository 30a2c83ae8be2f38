"""Hedged calls (``RetryPolicy(hedge_after=...)``) as telemetry sees them, over real sockets.

Every copy sent is an attempt: counted by both metrics backends (a copy that lost
with outcome ``hedge_lost``), traced as its own attempt span with its own
``traceparent``; the copies themselves are counted as hedges. And a sync hedged
call leaves the caller's OpenTelemetry context as it found it, whichever copy wins.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_http_instrumentation_enabled
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from telemetry_support import Otel

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.attempt_deadline import current_copy
from retrysafe.chaos import ChaosServer, KeyedChaos
from retrysafe.telemetry.prometheus import PrometheusMetrics

#: A copy goes after 50 ms; a slow answer takes far longer.
HEDGED = RetryPolicy(hedge_after=0.05, attempt_timeout=5.0, deadline=8.0)


def both_slow(chaos: KeyedChaos) -> str:
    """A ``/tail`` URL where every answer takes 300 ms: a copy is sent, one of the two wins."""
    return chaos.url("/tail/{key}", slow_fraction=1, slow_ms=300)


class FirstCopyIsSlow(httpx.BaseTransport):
    """Sends the round's first copy to a slow answer (3 s) and its hedged copy to a fast
    one: the hedged copy wins whichever of the two reaches the server first. (A server
    slow to its first arrival let the first copy win when a busy machine sent it after
    the hedged one: 3 runs in 8 beside three busy loops.)"""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        copy = current_copy.get()  # (the copy this thread sends: see hedged_shell)
        if getattr(getattr(copy, "plan", None), "number", None) == 1:
            request.url = request.url.copy_merge_params({"ms": 3000})
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_a_sync_hedged_call_won_by_its_copy_leaves_the_callers_context_as_it_was(
    chaos: KeyedChaos, otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    before = trace.get_current_span()
    with (
        caplog.at_level(logging.WARNING),
        retrysafe.Client(hooks=[otel.hook], policy=HEDGED, transport=FirstCopyIsSlow()) as client,
    ):
        report = retrysafe.report_of(client.get(chaos.url("/delay", ms=5)))
    assert report is not None
    assert (report.hedges, report.winner) == (1, 2)
    # No context was left on a thread that did not enter it...
    assert not [r for r in caplog.records if "detach" in r.getMessage().lower()]
    # ...and the caller's thread is back where it was: no ended attempt span current
    # (which would parent the application's next spans), HTTP instrumentation on.
    assert trace.get_current_span() is before
    assert is_http_instrumentation_enabled()
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("app-work") as app_span:
        assert app_span.parent is None  # type: ignore[attr-defined]


def test_each_copy_is_its_own_attempt_span_and_sends_its_own_traceparent(
    api: Any, otel: Otel
) -> None:
    received: list[str] = []

    async def first_is_slow(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = dict(scope["headers"])
        received.append(headers.get(b"traceparent", b"").decode())
        if len(received) == 1:
            await asyncio.sleep(1)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with ChaosServer(app=first_is_slow) as server:
        response = api.request(
            "GET", server.url + "/x", policy=HEDGED, client_options={"hooks": [otel.hook]}
        )
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.winner == 2
    spans = otel.spans()
    (call,) = [span for span in spans if span.name == "retrysafe GET"]
    attempts = sorted(
        (span for span in spans if span.kind is SpanKind.CLIENT),
        key=lambda span: span.attributes["retrysafe.attempt"],  # type: ignore[index]
    )
    assert [span.attributes["retrysafe.attempt"] for span in attempts] == [1, 2]  # type: ignore[index]
    assert [span.attributes["retrysafe.outcome"] for span in attempts] == [  # type: ignore[index]
        "hedge_lost",
        "success",
    ]
    for span in attempts:
        assert span.parent is not None
        assert span.parent.span_id == call.context.span_id
    assert call.attributes["retrysafe.hedge.winner"] == 2  # type: ignore[index]
    # Each copy carried its own span's trace context.
    assert len(received) == 2
    sent_span_ids = [header.split("-")[2] for header in received]
    assert sent_span_ids == [format(span.context.span_id, "016x") for span in attempts]


def test_every_copy_counts_as_an_attempt_in_opentelemetry_metrics(
    api: Any, chaos: KeyedChaos, otel: Otel
) -> None:
    response = api.request(
        "GET", both_slow(chaos), policy=HEDGED, client_options={"hooks": [otel.hook]}
    )
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.hedges == 1
    points = otel.metric_points()
    attempts = {str(labels["retrysafe.outcome"]): n for labels, n in points["retrysafe.attempts"]}
    assert attempts == {"success": 1, "hedge_lost": 1}  # two requests sent, two attempts
    hedges = {str(labels["retrysafe.outcome"]): n for labels, n in points["retrysafe.hedges"]}
    # (the one hedged copy beat the attempt it raced, or lost to it: the attempt is none)
    assert hedges in ({"sent": 1, "won": 1}, {"sent": 1, "lost": 1})


def test_every_copy_counts_as_an_attempt_in_prometheus(api: Any, chaos: KeyedChaos) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    response = api.request(
        "GET",
        both_slow(chaos),
        policy=HEDGED,
        client_options={"hooks": [metrics], "dependency": "tail"},
    )
    assert response.status_code == 200
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }

    def count(name: str, outcome: str) -> float:
        return samples.get((name, (("dependency", "tail"), ("outcome", outcome))), 0.0)

    assert count("retrysafe_attempts_total", "success") == 1.0
    assert count("retrysafe_attempts_total", "hedge_lost") == 1.0
    assert count("retrysafe_hedges_total", "sent") == 1.0
    # (the one hedged copy won or lost: the attempt it raced is no hedged copy)
    assert count("retrysafe_hedges_total", "won") + count("retrysafe_hedges_total", "lost") == 1.0
