"""A wait that load protection adds before an attempt is an event (``held``), so a hook, a
metric and a trace can show why a call took longer with no retry of its own: another
call's 429 cooled the dependency down, or the attempt waited for its paced slot.
(trial64: 1.9 s of latency had no cause anywhere but, later, one log line.)"""

from __future__ import annotations

import logging

import httpx
import pytest
from prometheus_client import CollectorRegistry
from telemetry_support import Otel

import retrysafe
from retrysafe import RetryEvent
from retrysafe.governor import Governor, GovernorSettings, LimiterSettings
from retrysafe.telemetry.prometheus import PrometheusMetrics
from retrysafe.testing import FakeClock

URL = "http://api.test/orders"
DEPENDENCY = "http://api.test:80"


def cooled_down(clock: FakeClock, seconds: float) -> Governor:
    """A governor on ``clock`` whose dependency cools down for ``seconds`` from now."""
    governor = Governor(clock=clock)
    limiter = governor.guard(DEPENDENCY).limiter
    assert limiter is not None
    limiter.start_cooldown(seconds)
    return governor


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200)


def get_after_a_cooldown(hook: retrysafe.EventHook, seconds: float = 2) -> None:
    """One successful GET, held back ``seconds`` by a cooldown, on the fake clock."""
    clock = FakeClock(randoms=[0.0] * 4)
    with retrysafe.Client(
        transport=httpx.MockTransport(ok),
        clock=clock,
        governor=cooled_down(clock, seconds),
        hooks=[hook],
    ) as client:
        assert client.get(URL).status_code == 200


def test_a_cooldown_wait_reaches_the_hooks_as_a_held_event() -> None:
    events: list[RetryEvent] = []
    get_after_a_cooldown(events.append)
    held = [event for event in events if event.kind == "held"]
    assert len(held) == 1
    assert held[0].reason == "cooldown"
    assert held[0].wait == pytest.approx(2.0)
    assert held[0].attempt == 1  # the attempt it holds back
    assert held[0].dependency == DEPENDENCY
    assert held[0].url == URL
    assert [event.kind for event in events] == ["held", "attempt", "success"]


def test_paced_attempts_are_held_events_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    paced = Governor(GovernorSettings(limiter=LimiterSettings(requests_per_second=2)), clock=clock)
    events: list[RetryEvent] = []
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with retrysafe.Client(
        transport=httpx.MockTransport(ok), clock=clock, governor=paced, hooks=[events.append]
    ) as client:
        for _ in range(3):
            assert client.get(URL).status_code == 200
    held = [event for event in events if event.kind == "held"]
    assert [event.reason for event in held] == ["pacing", "pacing"]  # the first went at once
    assert all(event.wait > 0 for event in held)
    lines = [record for record in caplog.records if "paced slot" in record.getMessage()]
    assert [record.levelno for record in lines] == [logging.DEBUG, logging.DEBUG]


@pytest.mark.parametrize(("level", "described"), [(logging.INFO, True), (logging.WARNING, False)])
def test_the_event_is_built_only_when_someone_listens(
    monkeypatch: pytest.MonkeyPatch, level: int, described: bool
) -> None:
    # No hook and no trace: only the log at INFO hears a cooldown's wait; above that, the
    # wait is not described at all (the call is held all the same).
    clock = FakeClock(randoms=[0.0] * 4)
    built: list[str] = []
    original = RetryEvent.__init__

    def counting(self: RetryEvent, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        built.append(self.kind)

    monkeypatch.setattr(RetryEvent, "__init__", counting)
    logging.getLogger("retrysafe").setLevel(level)
    try:
        with retrysafe.Client(
            transport=httpx.MockTransport(ok), clock=clock, governor=cooled_down(clock, 2)
        ) as client:
            assert client.get(URL).status_code == 200
    finally:
        logging.getLogger("retrysafe").setLevel(logging.NOTSET)
    assert clock.sleeps == [pytest.approx(2.0)]
    assert ("held" in built) is described


class SometimesListening:
    """A hook that says whether it listens (as OpenTelemetry() does without an SDK)."""

    def __init__(self, listening: bool) -> None:
        self.listening = listening
        self.events: list[RetryEvent] = []

    def __call__(self, event: RetryEvent) -> None:
        self.events.append(event)


@pytest.mark.parametrize("listening", [True, False])
def test_paced_attempts_are_told_only_to_a_hook_that_listens(listening: bool) -> None:
    # Under pacing nearly every call waits for its slot: a routine event, like "attempt".
    clock = FakeClock()
    paced = Governor(GovernorSettings(limiter=LimiterSettings(requests_per_second=2)), clock=clock)
    hook = SometimesListening(listening)
    with retrysafe.Client(
        transport=httpx.MockTransport(ok), clock=clock, governor=paced, hooks=[hook]
    ) as client:
        for _ in range(3):
            assert client.get(URL).status_code == 200
    held = [event.reason for event in hook.events if event.kind == "held"]
    assert held == (["pacing", "pacing"] if listening else [])


def test_prometheus_counts_held_waits_by_reason() -> None:
    registry = CollectorRegistry()
    get_after_a_cooldown(PrometheusMetrics(registry=registry))
    labels = {"dependency": DEPENDENCY, "reason": "cooldown"}
    assert registry.get_sample_value("retrysafe_held_wait_seconds_count", labels) == 1
    assert registry.get_sample_value("retrysafe_held_wait_seconds_sum", labels) == pytest.approx(
        2.0
    )


def test_opentelemetry_records_the_wait_and_marks_the_call_span(otel: Otel) -> None:
    get_after_a_cooldown(otel.hook)
    points = otel.metric_points()["retrysafe.held.wait"]
    assert points == [
        ({"retrysafe.dependency": DEPENDENCY, "retrysafe.reason": "cooldown"}, (1, 2.0))
    ]
    (call_span,) = [span for span in otel.spans() if span.parent is None]
    held = [event for event in call_span.events if event.name == "retrysafe.held"]
    assert len(held) == 1
    assert held[0].attributes == {
        "retrysafe.reason": "cooldown",
        "retrysafe.held.wait": 2.0,
        "retrysafe.attempt": 1,
    }
