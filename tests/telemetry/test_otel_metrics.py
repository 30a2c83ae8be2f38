"""OpenTelemetry metrics through the API, read back with the SDK's in-memory reader."""

from __future__ import annotations

from typing import Any

from telemetry_support import SCRIPTED_ENDINGS, Otel, run_scripted_mix, scripted_governor

import retrysafe


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
