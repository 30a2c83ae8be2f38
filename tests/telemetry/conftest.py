"""Fixtures for the telemetry tests: an OpenTelemetry SDK that keeps spans and metrics in memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from telemetry_support import Otel

from retrysafe.telemetry.otel import OpenTelemetry


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    hook = OpenTelemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield Otel(tracer_provider, meter_provider, exporter, reader, hook)
    meter_provider.shutdown()
    tracer_provider.shutdown()
