"""The breaker gauges of a process in a fleet report what its calls find: the fleet's
breaker, open by the other processes' votes, reads open here too, though this process's
own breaker never saw a failure (over a real Redis and real sockets)."""

from __future__ import annotations

import time

import pytest
from fleet_servers import FleetMaker, wait_for
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry
from telemetry_support import metric_points

import retrysafe
from retrysafe.chaos import KeyedChaos
from retrysafe.fleet import RedisFleet
from retrysafe.governor import BreakerSettings, Governor, GovernorSettings
from retrysafe.telemetry.otel import OpenTelemetry
from retrysafe.telemetry.prometheus import PrometheusMetrics

#: The fleet breaker opens on votes alone: no local breaker trips first.
VOTING = GovernorSettings(breaker=BreakerSettings(consecutive_failures=1000, open_for=30))
ONE_ATTEMPT = retrysafe.RetryPolicy(attempts=1, deadline=2.0)
OPEN = 2


def open_by_votes(
    voters: list[RedisFleet], settings: GovernorSettings, chaos: KeyedChaos, failures: int
) -> None:
    """Each of ``voters`` (a fleet member of its own) fails ``failures`` calls in a row and
    votes: enough of them open the fleet's breaker."""
    for member in voters:
        with retrysafe.Client(
            governor=Governor(settings, fleet=member), dependency="api", policy=ONE_ATTEMPT
        ) as voter:
            for _ in range(failures):
                with pytest.raises(retrysafe.ServerError):
                    voter.get(chaos.url("/status/500"))
        assert member.flush()


def otel_states(reader: InMemoryMetricReader) -> list[object]:
    return [value for _, value in metric_points(reader)["retrysafe.circuit.state"]]


def test_a_process_whose_fleet_opened_the_breaker_reports_it_open(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    voters = [make_fleet(vote_after=5) for _ in range(2)]
    bystander_fleet = make_fleet(vote_after=5)
    governor = Governor(VOTING, fleet=bystander_fleet)
    registry = CollectorRegistry()
    PrometheusMetrics(registry=registry, governor=governor)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    OpenTelemetry(meter_provider=provider, governor=governor)
    with retrysafe.Client(governor=governor, dependency="api", policy=ONE_ATTEMPT) as bystander:
        assert bystander.get(chaos.url("/status/200")).status_code == 200
        gauge = {"dependency": "api"}
        assert registry.get_sample_value("retrysafe_circuit_state", gauge) == 0  # closed

        open_by_votes(voters, VOTING, chaos, 5)  # two of three members: the fleet opens it
        wait_for(lambda: bystander_fleet.view("api").open_until is not None)

        # The bystander's own breaker saw only a success; its calls are refused all the same.
        guard = governor.guard("api")
        assert guard.breaker is not None
        assert guard.breaker.state == "closed"
        with pytest.raises(retrysafe.CircuitOpen):
            bystander.get(chaos.url("/status/200"))
        assert registry.get_sample_value("retrysafe_circuit_state", gauge) == OPEN
        assert otel_states(reader) == [OPEN]
    provider.shutdown()


def test_once_the_fleets_open_period_is_over_the_gauge_reads_half_open(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    short = GovernorSettings(
        breaker=BreakerSettings(consecutive_failures=1000, open_for=0.3, first_open_for=0.3)
    )
    voters = [make_fleet(vote_after=3) for _ in range(2)]
    bystander_fleet = make_fleet(vote_after=3)
    governor = Governor(short, fleet=bystander_fleet)
    registry = CollectorRegistry()
    PrometheusMetrics(registry=registry, governor=governor)
    with retrysafe.Client(governor=governor, dependency="api", policy=ONE_ATTEMPT) as bystander:
        assert bystander.get(chaos.url("/status/200")).status_code == 200
        open_by_votes(voters, short, chaos, 3)
        wait_for(lambda: bystander_fleet.view("api").open_until is not None)
        open_until = bystander_fleet.view("api").open_until
        assert open_until is not None
        left = open_until - bystander_fleet.clock.monotonic()
        assert left < 1.0, left  # (the voters' first period, not a long one)
        time.sleep(max(0.0, left) + 0.05)
        gauge = {"dependency": "api"}
        assert registry.get_sample_value("retrysafe_circuit_state", gauge) == 1  # half open
