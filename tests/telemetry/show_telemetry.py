"""Print what the telemetry tests check, for a person to read: the spans of a call that got
503, 503, 200 (without, then with opentelemetry-instrumentation-httpx), and a Prometheus
scrape after the tests' scripted mix of successes, retries and refusals.

    .venv/bin/python tests/telemetry/show_telemetry.py

Everything runs against a chaos server on loopback started here.
"""

from __future__ import annotations

from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest
from telemetry_support import SECRET_HEADERS, SECRET_QUERY, run_scripted_mix, scripted_governor

import retrysafe
from retrysafe.chaos import ChaosServer
from retrysafe.telemetry.otel import OpenTelemetry
from retrysafe.telemetry.prometheus import PrometheusMetrics


def show_spans(spans: list[ReadableSpan]) -> None:
    ids = {span.context.span_id: f"#{number}" for number, span in enumerate(spans, 1)}
    for span in sorted(spans, key=lambda span: span.start_time or 0):
        parent = ids.get(span.parent.span_id, "?") if span.parent else "-"
        scope = span.instrumentation_scope.name if span.instrumentation_scope else "?"
        status = span.status.status_code.name
        print(
            f"{ids[span.context.span_id]} {span.name!r} kind={span.kind.name} parent={parent} "
            f"scope={scope} status={status}"
        )
        for key, value in (span.attributes or {}).items():
            print(f"      {key} = {value!r}")
        for event in span.events:
            print(f"      event {event.name} {dict(event.attributes or {})}")


def spans_of_one_call(server: ChaosServer, key: str, *, httpx_instrumented: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = HTTPXClientInstrumentor()
    if httpx_instrumented:
        instrumentor.instrument(tracer_provider=provider)
    try:
        policy = retrysafe.RetryPolicy(backoff_base=0.05)
        with retrysafe.Client(
            policy=policy, hooks=[OpenTelemetry(tracer_provider=provider)]
        ) as client:
            url = server.for_key(key).url("/fail/{key}", times=2, status=503, **SECRET_QUERY)
            response = client.get(url, headers=SECRET_HEADERS)
    finally:
        if httpx_instrumented:
            instrumentor.uninstrument()
    print(f"GET {url} (with Authorization and Cookie headers) -> {response.status_code}")
    print(f"server saw: {[record.action for record in server.for_key(key).log()]}")
    show_spans(list(exporter.get_finished_spans()))


def main() -> None:
    with ChaosServer() as server:
        print("== spans, OpenTelemetry SDK in-memory exporter, no httpx instrumentation ==")
        spans_of_one_call(server, "show-plain", httpx_instrumented=False)
        print("\n== the same with opentelemetry-instrumentation-httpx instrumented ==")
        spans_of_one_call(server, "show-httpx", httpx_instrumented=True)
        print("\n== Prometheus scrape after the scripted mix ==")
        registry = CollectorRegistry()
        governor = scripted_governor()
        metrics = PrometheusMetrics(registry=registry, governor=governor)
        with retrysafe.Client(governor=governor, hooks=[metrics]) as client:
            ended = run_scripted_mix(client, server.for_key("show-mix").url)
        for name, outcome in ended.items():
            print(f"# {name}: {outcome}")
        scrape = generate_latest(registry).decode()
        for line in scrape.splitlines():
            # The histograms' buckets and prometheus-client's *_created series are left out
            # here for length (the tests parse the whole scrape).
            if "_bucket{" not in line and "_created" not in line:
                print(line)


if __name__ == "__main__":
    main()
