"""What the telemetry tests share: secrets to send, and the in-memory OpenTelemetry SDK."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import retrysafe
from retrysafe.governor import Governor, GovernorSettings, LimiterSettings
from retrysafe.telemetry.otel import OpenTelemetry
from retrysafe.testing import FakeClock

#: Secrets a test sends; none may reach a span, a label or a log record.
SECRET_QUERY = {"api_key": "QUERY-SECRET-3f9a"}
SECRET_HEADERS = {
    "Authorization": "Bearer HEADER-SECRET-77c1",
    "Cookie": "session=COOKIE-SECRET-9d",
}
SECRET_VALUES = ("QUERY-SECRET-3f9a", "HEADER-SECRET-77c1", "COOKIE-SECRET-9d")


@dataclass
class Otel:
    """An SDK tracer and meter provider, their in-memory exporter and reader, and the hook."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    hook: OpenTelemetry

    def spans(self) -> list[ReadableSpan]:
        """Finished spans, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def metric_points(self) -> MetricPoints:
        """Every metric's data points (see :func:`metric_points`)."""
        return metric_points(self.reader)


#: Data points by metric name, each as (attributes, value or (count, sum)).
MetricPoints = dict[str, list[tuple[dict[str, object], object]]]


def metric_points(reader: InMemoryMetricReader) -> MetricPoints:
    """Every metric's data points in ``reader`` as (attributes, value or (count, sum))
    pairs, by metric name."""
    points: MetricPoints = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = (point.count, point.sum)  # type: ignore[union-attr]
                    points.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
    return points


#: A governor whose budget holds one retry and never refills, and whose breaker opens
#: at the second failing call: a few calls show every kind of refusal.
def scripted_governor() -> retrysafe.Governor:
    return retrysafe.Governor(
        retrysafe.GovernorSettings(
            budget=retrysafe.BudgetSettings(ratio=0.0, max_tokens=1.0, min_per_second=0.0),
            breaker=retrysafe.BreakerSettings(consecutive_failures=2, open_for=60.0),
        )
    )


def run_scripted_mix(client: retrysafe.Client, url: Callable[..., str]) -> dict[str, str]:
    """Successes, retries and refusals over three dependencies; returns what each call ended as.

    - ``catalog``: three successes and a 404 the caller must fix;
    - ``orders``: a 503 retried to a 200 (spending the budget's one token), then a 503
      whose retry the empty budget refuses (``budget_exhausted``);
    - ``payments``: two calls answered 503 with no retry allowed (the breaker opens),
      then one the open breaker refuses before sending (``circuit_open``).
    """
    ended: dict[str, str] = {}
    fast = retrysafe.RetryPolicy(backoff_base=0.01, backoff_cap=0.02)
    once = retrysafe.RetryPolicy(attempts=1)
    calls: list[tuple[str, str, str, retrysafe.RetryPolicy]] = [
        ("catalog-1", "catalog", url("/status/200", **SECRET_QUERY), fast),
        ("catalog-2", "catalog", url("/status/200"), fast),
        ("catalog-3", "catalog", url("/status/200"), fast),
        ("catalog-404", "catalog", url("/status/404"), fast),
        ("orders-retried", "orders", url("/fail/{key}-a", times=1, status=503), fast),
        ("orders-refused", "orders", url("/fail/{key}-b", times=1, status=503), fast),
        ("payments-1", "payments", url("/status/503"), once),
        ("payments-2", "payments", url("/status/503"), once),
        ("payments-refused", "payments", url("/status/200"), once),
    ]
    for name, dependency, target, policy in calls:
        try:
            response = client.get(
                target, dependency=dependency, policy=policy, headers=SECRET_HEADERS
            )
            ended[name] = f"HTTP {response.status_code}"
        except retrysafe.ApiError as error:
            ended[name] = f"{type(error).__name__} {error.reason}"
    return ended


#: What :func:`run_scripted_mix` must end as (the script is deterministic).
SCRIPTED_ENDINGS = {
    "catalog-1": "HTTP 200",
    "catalog-2": "HTTP 200",
    "catalog-3": "HTTP 200",
    "catalog-404": "ClientError not_found",
    "orders-retried": "HTTP 200",
    "orders-refused": "BudgetExhausted budget_exhausted",
    "payments-1": "ServerError attempts_exhausted",
    "payments-2": "ServerError attempts_exhausted",
    "payments-refused": "CircuitOpen circuit_open",
}


def refuse_a_call_by_pacing(hook: retrysafe.EventHook) -> None:
    """Two calls to ``search`` paced at one per 10 s, ``hook`` listening: the first takes
    the slot, the second (5 s deadline) is refused with ``PacingDelayed``."""
    clock = FakeClock()
    settings = GovernorSettings(
        budget=None, breaker=None, limiter=LimiterSettings(requests_per_second=0.1)
    )
    with retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        clock=clock,
        governor=Governor(settings, clock=clock),
        hooks=[hook],
        dependency="search",
    ) as client:
        client.get("https://search.test/q")
        with pytest.raises(retrysafe.PacingDelayed):
            client.get("https://search.test/q", policy=retrysafe.RetryPolicy(deadline=5))
