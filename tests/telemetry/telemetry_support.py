"""What the telemetry tests share: secrets to send, and the in-memory OpenTelemetry SDK."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retrysafe.telemetry.otel import OpenTelemetry

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

    def metric_points(self) -> dict[str, list[tuple[dict[str, object], object]]]:
        """Every metric's data points as (attributes, value or sum) pairs, by metric name."""
        points: dict[str, list[tuple[dict[str, object], object]]] = {}
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)  # type: ignore[union-attr]
                        points.setdefault(metric.name, []).append(
                            (dict(point.attributes or {}), value)
                        )
        return points
