"""Prometheus metrics after a scripted mix of real calls, read back from the parsed scrape."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from telemetry_support import (
    SCRIPTED_ENDINGS,
    SECRET_VALUES,
    refuse_a_call_by_pacing,
    run_scripted_mix,
    scripted_governor,
)

import retrysafe
from retrysafe.telemetry.prometheus import PrometheusMetrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> tuple[str, Samples]:
    """The exposition text, and every sample in it keyed by (name, sorted labels)."""
    text = generate_latest(registry).decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def scraped(chaos: Any) -> tuple[str, Samples]:
    registry = CollectorRegistry()
    governor = scripted_governor()
    metrics = PrometheusMetrics(registry=registry, governor=governor)
    with retrysafe.Client(governor=governor, hooks=[metrics]) as client:
        assert run_scripted_mix(client, chaos.url) == SCRIPTED_ENDINGS
    return scrape(registry)


def test_calls_are_counted_by_dependency_result_and_reason(scraped: tuple[str, Samples]) -> None:
    _, samples = scraped
    calls = {
        (labels, count)
        for (name, labels), count in samples.items()
        if name == "retrysafe_calls_total"
    }
    get = "GET"
    assert calls == {
        ((("dependency", "catalog"), ("method", get), ("reason", ""), ("result", "success")), 3.0),
        (
            (
                ("dependency", "catalog"),
                ("method", get),
                ("reason", "not_found"),
                ("result", "failure"),
            ),
            1.0,
        ),
        ((("dependency", "orders"), ("method", get), ("reason", ""), ("result", "success")), 1.0),
        (
            (
                ("dependency", "orders"),
                ("method", get),
                ("reason", "budget_exhausted"),
                ("result", "failure"),
            ),
            1.0,
        ),
        (
            (
                ("dependency", "payments"),
                ("method", get),
                ("reason", "attempts_exhausted"),
                ("result", "failure"),
            ),
            2.0,
        ),
        (
            (
                ("dependency", "payments"),
                ("method", get),
                ("reason", "circuit_open"),
                ("result", "failure"),
            ),
            1.0,
        ),
    }
    assert (
        value(
            samples, "retrysafe_call_duration_seconds_count", dependency="catalog", result="success"
        )
        == 3
    )
    assert (
        value(
            samples,
            "retrysafe_call_duration_seconds_count",
            dependency="payments",
            result="failure",
        )
        == 3
    )


def test_attempts_retries_and_waits(scraped: tuple[str, Samples]) -> None:
    _, samples = scraped
    attempts = "retrysafe_attempts_total"
    assert value(samples, attempts, dependency="catalog", outcome="success") == 3
    assert value(samples, attempts, dependency="catalog", outcome="not_found") == 1
    assert value(samples, attempts, dependency="orders", outcome="service_unavailable") == 2
    assert value(samples, attempts, dependency="orders", outcome="success") == 1
    assert value(samples, attempts, dependency="payments", outcome="service_unavailable") == 2
    # The refused call sent nothing: no third payments attempt.
    assert (
        sum(
            count
            for (name, labels), count in samples.items()
            if name == attempts and ("dependency", "payments") in labels
        )
        == 2
    )
    retries = [
        (labels, count)
        for (name, labels), count in samples.items()
        if name == "retrysafe_retries_total"
    ]
    assert retries == [((("dependency", "orders"), ("outcome", "service_unavailable")), 1.0)]
    assert value(samples, "retrysafe_retry_wait_seconds_count", dependency="orders") == 1
    assert 0 <= value(samples, "retrysafe_retry_wait_seconds_sum", dependency="orders") <= 0.02


def test_refusals_breaker_state_and_budget_level(scraped: tuple[str, Samples]) -> None:
    _, samples = scraped
    refusals = {
        labels: count
        for (name, labels), count in samples.items()
        if name == "retrysafe_refusals_total"
    }
    assert refusals == {
        (("dependency", "orders"), ("reason", "budget_exhausted")): 1.0,
        (("dependency", "payments"), ("reason", "circuit_open")): 1.0,
    }
    assert value(samples, "retrysafe_circuit_state", dependency="payments") == 2  # open
    assert value(samples, "retrysafe_circuit_state", dependency="orders") == 0  # closed
    assert value(samples, "retrysafe_budget_tokens", dependency="orders") == 0
    assert value(samples, "retrysafe_budget_tokens", dependency="catalog") == 1


def test_labels_stay_bounded_and_secret_free(scraped: tuple[str, Samples]) -> None:
    text, samples = scraped
    for secret in SECRET_VALUES:
        assert secret not in text
    label_values = {value for (_, labels) in samples for _, value in labels}
    assert not any("/" in value for value in label_values - {""}), label_values
    dependencies = {
        value for (_, labels) in samples for name, value in labels if name == "dependency"
    }
    assert dependencies == {"catalog", "orders", "payments"}


def test_the_default_dependency_label_is_the_origin_never_the_path(chaos: Any) -> None:
    registry = CollectorRegistry()
    with retrysafe.Client(hooks=[PrometheusMetrics(registry=registry)]) as client:
        for path in ("/status/200", "/fail/{key}-x", "/fail/{key}-y"):
            client.get(chaos.url(path), headers={"Authorization": "Bearer HEADER-SECRET-77c1"})
    text, samples = scrape(registry)
    assert (
        value(samples, "retrysafe_attempts_total", dependency=chaos.base_url, outcome="success")
        == 3
    )
    assert "/status" not in text
    assert "/fail" not in text


def test_a_registry_holds_one_set_of_names() -> None:
    """A second PrometheusMetrics in one registry (one per client, the natural first try)
    is refused saying to share one, or to keep them apart."""
    registry = CollectorRegistry()
    PrometheusMetrics(registry=registry)
    with pytest.raises(ValueError, match="in this registry already") as caught:
        PrometheusMetrics(registry=registry)
    assert "give it to every client (hooks=[metrics])" in str(caught.value)
    assert "Duplicated timeseries" in str(caught.value.__cause__)
    PrometheusMetrics(registry=CollectorRegistry())  # another registry is fine
    PrometheusMetrics(registry=registry, namespace="other")  # and another namespace


def test_a_name_the_application_took_leaves_nothing_half_registered() -> None:
    """One of retrysafe's names already taken (here by the application's own metric): the
    error names it, and none of retrysafe's metrics stays registered, so asking again
    names the same clash, not a clash with retrysafe's own leftovers."""
    registry = CollectorRegistry()
    Counter("retries", "the application's own", namespace="retrysafe", registry=registry)
    for _ in range(2):
        with pytest.raises(ValueError, match="retrysafe_retries") as caught:
            PrometheusMetrics(registry=registry)
        assert "retrysafe_calls" not in str(caught.value)
    assert registry.get_sample_value("retrysafe_calls_total") is None
    assert "retrysafe_calls" not in generate_latest(registry).decode()


def test_without_a_governor_the_breaker_state_comes_from_its_changes(chaos: Any) -> None:
    registry = CollectorRegistry()
    breaker = retrysafe.BreakerSettings(consecutive_failures=1, open_for=60)
    governor = retrysafe.Governor(retrysafe.GovernorSettings(breaker=breaker))
    policy = retrysafe.RetryPolicy(attempts=1)
    hooks = [PrometheusMetrics(registry=registry)]
    with (
        retrysafe.Client(governor=governor, hooks=hooks, policy=policy) as client,
        pytest.raises(retrysafe.ServerError),
    ):
        client.get(chaos.url("/status/503"), dependency="flaky")
    _, samples = scrape(registry)
    assert value(samples, "retrysafe_circuit_state", dependency="flaky") == 2
    assert not any(name == "retrysafe_budget_tokens" for name, _ in samples)


def test_a_non_standard_method_is_folded_in_the_method_label() -> None:
    registry = CollectorRegistry()
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    hooks = [PrometheusMetrics(registry=registry)]
    with retrysafe.Client(transport=transport, hooks=hooks, dependency="cdn") as client:
        client.request("PURGE", "https://cdn.test/assets/app.js")
        client.request("GET", "https://cdn.test/assets/app.js")
    text, samples = scrape(registry)
    methods = sorted(
        value
        for (name, labels) in samples
        if name == "retrysafe_calls_total"
        for label, value in labels
        if label == "method"
    )
    assert methods == ["GET", "_OTHER"]
    assert "PURGE" not in text


def test_a_pacing_refusal_is_counted_as_a_refusal() -> None:
    registry = CollectorRegistry()
    refuse_a_call_by_pacing(PrometheusMetrics(registry=registry))
    _, samples = scrape(registry)
    assert value(samples, "retrysafe_refusals_total", dependency="search", reason="pacing") == 1
