"""A first-try success takes a short path; it must decide and report what the general
path would: one healthy call for the breaker, any announced rate-limit reset as a
cooldown, and the same report."""

from __future__ import annotations

import logging

import httpx

from retrysafe import Call, RetryPolicy, RetryTransport
from retrysafe.decisions import Admission, EmitEvent, StartCooldown, Succeed
from retrysafe.engine import HEALTHY_WHILE_CLOSED
from retrysafe.governor.breaker import CLOSED_PERMIT, CircuitBreaker
from retrysafe.governor.settings import BreakerSettings
from retrysafe.testing import FakeClock


def _first_try(
    response: httpx.Response, clock: FakeClock, *, observed: bool = False
) -> tuple[Call, Succeed]:
    request = httpx.Request("GET", "https://api.test/items")
    call = Call(request, policy=RetryPolicy(), clock=clock, observed=observed)
    plan = call.start_attempt(Admission(permit=CLOSED_PERMIT))
    clock.advance(0.25)
    step = call.attempt_returned(plan, response)  # type: ignore[arg-type]
    assert isinstance(step, Succeed)
    return call, step


def test_a_first_try_success_reports_one_healthy_call_and_one_attempt() -> None:
    clock = FakeClock()
    call, step = _first_try(httpx.Response(200), clock)
    assert call.take_effects() == [HEALTHY_WHILE_CLOSED]
    assert step.report.attempts == 1
    assert step.report.waits == ()
    assert step.report.elapsed == 0.25
    assert [(r.outcome, r.status, r.elapsed) for r in step.report.history] == [
        ("success", 200, 0.25)
    ]
    assert step.response.extensions["retrysafe"] is step.report


def test_a_first_try_success_announcing_its_limit_used_up_starts_a_cooldown() -> None:
    clock = FakeClock()
    used_up = httpx.Response(200, headers={"RateLimit": '"default";r=0;t=10'})
    call, _ = _first_try(used_up, clock)
    assert call.take_effects() == [HEALTHY_WHILE_CLOSED, StartCooldown(10.0, True)]


def test_a_first_try_success_someone_listens_for_is_an_event_too() -> None:
    clock = FakeClock()
    call, _ = _first_try(httpx.Response(204), clock, observed=True)
    health, *emitted = call.take_effects()
    assert health is HEALTHY_WHILE_CLOSED
    assert all(isinstance(effect, EmitEvent) for effect in emitted)
    assert [
        (e.event.kind, e.event.status, e.event.attempt, e.event.outcome)  # type: ignore[union-attr]
        for e in emitted
    ] == [("attempt", 204, 1, "success"), ("success", 204, 1, "success")]


def test_the_breakers_short_count_equals_recording_a_healthy_call() -> None:
    clock = FakeClock()
    short, general = (CircuitBreaker(BreakerSettings(), clock) for _ in range(2))
    for breaker in (short, general):
        breaker.record(CLOSED_PERMIT, "unhealthy")  # a failing run in progress
    short.record_healthy_call()
    general.record(CLOSED_PERMIT, "healthy")
    bucket = int(clock.monotonic() // short._bucket_width)
    assert short._tally(bucket) == general._tally(bucket) == (2, 1)
    assert not short._run  # the success ended the run
    assert not general._run


def _reopened_and_closed(clock: FakeClock) -> CircuitBreaker:
    """A breaker that opened, let a probe through, and closed again: a new closed period."""
    breaker = CircuitBreaker(BreakerSettings(consecutive_failures=2, open_for=1.0), clock)
    for _ in range(2):
        breaker.record(breaker.acquire(probe_lease=1.0), "unhealthy")
    clock.advance(1.0)
    probe = breaker.acquire(probe_lease=1.0)
    assert probe.probe
    breaker.record(probe, "healthy")
    assert breaker.closed
    return breaker


def test_a_success_in_a_later_closed_period_takes_the_short_path_too() -> None:
    # Each closed period has a permit of its own; a call admitted under a later one
    # is as healthy a first-try success as one admitted before the breaker ever opened.
    clock = FakeClock()
    breaker = _reopened_and_closed(clock)
    assert breaker.closed_permit is not CLOSED_PERMIT
    request = httpx.Request("GET", "https://api.test/")
    call = Call(request, policy=RetryPolicy(), clock=clock, observed=False)
    plan = call.start_attempt(Admission(permit=breaker.closed_permit))
    step = call.attempt_returned(plan, httpx.Response(200))  # type: ignore[arg-type]
    assert isinstance(step, Succeed)
    assert call.take_effects() == [HEALTHY_WHILE_CLOSED]


def test_the_short_count_equals_recording_a_later_periods_healthy_call() -> None:
    clock = FakeClock()
    short, general = _reopened_and_closed(clock), _reopened_and_closed(FakeClock())
    for breaker in (short, general):
        breaker.record(breaker.closed_permit, "unhealthy")  # a failing run in progress
    bucket = int(clock.monotonic() // short._bucket_width)
    calls, failures = short._tally(bucket)
    short.record_healthy_call()
    general.record(general.closed_permit, "healthy")
    assert short._tally(bucket) == general._tally(bucket) == (calls + 1, failures)
    assert not short._run  # the success ended the run
    assert not general._run


def test_a_change_of_log_level_between_calls_is_heard_by_the_next_call() -> None:
    # Whether anyone listens is asked of the logger on each call: a level changed
    # between calls is heard by the next one.
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("retrysafe")
    level = logger.level
    logger.addHandler(handler)
    transport = RetryTransport(httpx.MockTransport(lambda request: httpx.Response(200)))
    try:
        with httpx.Client(transport=transport) as client:
            logger.setLevel(logging.INFO)
            client.get("https://api.test/quiet")
            assert records == []
            logger.setLevel(logging.DEBUG)
            client.get("https://api.test/heard")
            assert records, "a call after the level went to DEBUG logs its events"
            assert all(record.levelno == logging.DEBUG for record in records)
            assert any("api.test/heard" in record.getMessage() for record in records)
            records.clear()
            logger.setLevel(logging.INFO)
            client.get("https://api.test/quiet-again")
            assert records == []
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_disabled_logger_is_not_listening_even_at_debug() -> None:
    # logging.config.dictConfig disables existing loggers without changing a level (and
    # so without clearing logging's cached answer for DEBUG): a disabled logger hears
    # nothing, whatever its level.
    from retrysafe.observe import Observer

    logger = logging.getLogger("retrysafe")
    level, disabled = logger.level, logger.disabled
    observer = Observer(())
    try:
        logger.setLevel(logging.DEBUG)
        assert observer.listening  # (and logging has cached its answer for DEBUG)
        logger.disabled = True
        assert not observer.listening
        logger.disabled = False
        assert observer.listening
    finally:
        logger.setLevel(level)
        logger.disabled = disabled


def test_a_call_asks_whether_anyone_listens_as_the_observer_does_in_every_log_state() -> None:
    # The drive asks the log in short (from logging's kept answer, without the frames)
    # on every call; it must answer what Observer.listening answers: at DEBUG and not,
    # with the logger disabled by logging.config (its kept answer left in place), and
    # with logging switched off by logging.disable() (which clears it).
    from retrysafe.drive import _listening
    from retrysafe.observe import Observer

    observer = Observer(())
    logger = logging.getLogger("retrysafe")
    level, disabled = logger.level, logger.disabled
    seen: list[tuple[bool, bool]] = []
    try:
        for state in ("info", "debug", "disabled", "switched off", "debug again"):
            logger.disabled = False
            logging.disable(logging.DEBUG if state == "switched off" else logging.NOTSET)
            logger.setLevel(logging.INFO if state == "info" else logging.DEBUG)
            if state != "info":  # (at INFO it is asked with no answer kept: none yet)
                logger.isEnabledFor(logging.DEBUG)  # (logging keeps its answer from here)
            logger.disabled = state == "disabled"
            seen.append((_listening(observer), observer.listening))
    finally:
        logging.disable(logging.NOTSET)
        logger.setLevel(level)
        logger.disabled = disabled
    assert seen == [(False, False), (True, True), (False, False), (False, False), (True, True)]
