"""OpenTelemetry metrics through the API, read back with the SDK's in-memory reader."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from telemetry_support import (
    SCRIPTED_ENDINGS,
    Otel,
    metric_points,
    refuse_a_call_by_pacing,
    run_scripted_mix,
    scripted_governor,
)

import retrysafe
from retrysafe.telemetry.otel import OpenTelemetry
from retrysafe.testing import FakeClock


def by_attributes(
    points: list[tuple[dict[str, object], object]],
) -> dict[tuple[object, ...], object]:
    return {tuple(sorted(attributes.items())): value for attributes, value in points}


def test_attempts_retries_refusals_and_breaker_state(chaos: Any, otel: Otel) -> None:
    with retrysafe.Client(governor=scripted_governor(), hooks=[otel.hook]) as client:
        assert run_scripted_mix(client, chaos.url) == SCRIPTED_ENDINGS
    points = otel.metric_points()
    dep, outcome, reason = "retrysafe.dependency", "retrysafe.outcome", "retrysafe.reason"
    assert by_attributes(points["retrysafe.attempts"]) == {
        ((dep, "catalog"), (outcome, "success")): 3,
        ((dep, "catalog"), (outcome, "not_found")): 1,
        ((dep, "orders"), (outcome, "service_unavailable")): 2,
        ((dep, "orders"), (outcome, "success")): 1,
        ((dep, "payments"), (outcome, "service_unavailable")): 2,
    }
    assert by_attributes(points["retrysafe.retries"]) == {
        ((dep, "orders"), (outcome, "service_unavailable")): 1
    }
    assert by_attributes(points["retrysafe.refusals"]) == {
        ((dep, "orders"), (reason, "budget_exhausted")): 1,
        ((dep, "payments"), (reason, "circuit_open")): 1,
    }
    assert by_attributes(points["retrysafe.circuit.state"]) == {((dep, "payments"),): 2}
    (waits,) = points["retrysafe.retry.wait"]
    assert waits[0] == {dep: "orders"}
    count, total = waits[1]  # type: ignore[misc]
    assert count == 1
    assert 0 <= total <= 0.02
    durations = by_attributes(points["retrysafe.call.duration"])
    assert sum(count for count, _ in durations.values()) == len(SCRIPTED_ENDINGS)  # type: ignore[misc]


def test_the_retry_wait_histogram_records_each_wait_before_a_retry(otel: Otel) -> None:
    """On a fake clock the waits are exact (half of 1 s, then half of 2 s), and differ
    from the time the call had taken when it decided to retry (0 s, then 0.5 s)."""
    answers = iter([503, 503, 200])
    transport = httpx.MockTransport(lambda request: httpx.Response(next(answers)))
    clock = FakeClock(randoms=[0.5, 0.5])
    policy = retrysafe.RetryPolicy(backoff_base=1.0, backoff_cap=8.0)
    with retrysafe.Client(
        transport=transport, clock=clock, policy=policy, hooks=[otel.hook], dependency="api"
    ) as client:
        assert client.get("https://api.test/things").status_code == 200
    assert clock.sleeps == [0.5, 1.0]
    assert otel.metric_points()["retrysafe.retry.wait"] == [
        ({"retrysafe.dependency": "api"}, (2, 1.5))
    ]


def test_a_non_standard_method_is_folded_in_the_duration_label(otel: Otel) -> None:
    """A label never takes arbitrary values: any method but the standard ones is
    ``_OTHER``, as the HTTP conventions spell it. Its spans are named ``HTTP`` and keep
    the method as sent in ``http.request.method_original``, as the conventions ask
    (trial64)."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(transport=transport, hooks=[otel.hook], dependency="cdn") as client:
        client.request("PURGE", "https://cdn.test/assets/app.js")
        client.request("GET", "https://cdn.test/assets/app.js")
    durations = otel.metric_points()["retrysafe.call.duration"]
    methods = sorted(str(attributes["http.request.method"]) for attributes, _ in durations)
    assert methods == ["GET", "_OTHER"]
    spans = {span.name: span for span in otel.spans()}
    assert sorted(name for name in spans if name.startswith("retrysafe")) == [
        "retrysafe GET",
        "retrysafe HTTP",
    ]
    for name in ("retrysafe HTTP", "HTTP"):
        attributes = dict(spans[name].attributes or {})
        assert attributes["http.request.method"] == "_OTHER"
        assert attributes["http.request.method_original"] == "PURGE"


def test_the_duration_histograms_have_buckets_in_seconds(otel: Otel) -> None:
    """The SDK's default boundaries are for milliseconds (0, 5, 10, 25...): every call
    landed in the first bucket (trial64)."""
    from opentelemetry.sdk.metrics.export import HistogramDataPoint

    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(transport=transport, hooks=[otel.hook]) as client:
        client.get("https://api.test/")
    data = otel.reader.get_metrics_data()
    assert data is not None
    bounds = [
        point.explicit_bounds
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        if metric.name == "retrysafe.call.duration"
        for point in metric.data.data_points
        if isinstance(point, HistogramDataPoint)
    ]
    assert bounds
    assert bounds[0][:3] == (0.005, 0.01, 0.025)
    assert 30.0 in bounds[0]


def test_a_pacing_refusal_is_counted_as_a_refusal(otel: Otel) -> None:
    refuse_a_call_by_pacing(otel.hook)
    assert otel.metric_points()["retrysafe.refusals"] == [
        ({"retrysafe.dependency": "search", "retrysafe.reason": "pacing"}, 1)
    ]


def test_with_the_governor_the_breaker_gauge_reads_its_state_now() -> None:
    """Without it the gauge holds the last state a call saw: a breaker nobody calls any
    more stayed "open" after its open period ended (trial64)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from retrysafe.governor import BreakerSettings, Governor, GovernorSettings

    clock = FakeClock()
    settings = GovernorSettings(breaker=BreakerSettings(consecutive_failures=1, open_for=1))
    governor = Governor(settings, clock=clock)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])

    def gauge() -> object:
        return [value for _, value in metric_points(reader)["retrysafe.circuit.state"]]

    hook = OpenTelemetry(meter_provider=provider, governor=governor)
    transport = httpx.MockTransport(lambda request: httpx.Response(503))
    with (
        retrysafe.Client(
            transport=transport, governor=governor, hooks=[hook], clock=clock, dependency="pay"
        ) as client,
        pytest.raises(retrysafe.ServerError),
    ):
        client.get("https://pay.test/", policy=retrysafe.RetryPolicy(attempts=1))
    assert gauge() == [2]  # open
    clock.advance(5)  # its open period over, and nobody calls
    assert gauge() == [1]  # half open, as the next call would find it
    provider.shutdown()


def test_the_governor_must_be_a_governor() -> None:
    with pytest.raises(TypeError, match=r"governor must be a retrysafe\.Governor"):
        OpenTelemetry(governor="x")  # type: ignore[arg-type]


def test_an_api_that_takes_no_bucket_advice_still_gets_its_histograms() -> None:
    """opentelemetry-api before 1.30 (the extra allows 1.25) has no
    ``explicit_bucket_boundaries_advisory``: the instrument is made without it (review63:
    it raised TypeError and no OpenTelemetry() could be made)."""
    from retrysafe.telemetry.otel import _seconds_histogram

    made: list[dict[str, object]] = []

    class OldMeter:
        def create_histogram(self, name: str, unit: str = "", description: str = "") -> str:
            made.append({"name": name, "unit": unit})
            return name

    assert _seconds_histogram(OldMeter(), "retrysafe.call.duration", "d") == (  # type: ignore[arg-type]
        "retrysafe.call.duration"
    )
    assert made == [{"name": "retrysafe.call.duration", "unit": "s"}]
