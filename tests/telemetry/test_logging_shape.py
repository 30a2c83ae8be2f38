"""Log records and structlog entries: one documented shape, fields with one meaning each."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import structlog
from structlog.testing import capture_logs
from telemetry_support import SECRET_HEADERS, SECRET_QUERY, SECRET_VALUES

import retrysafe
from retrysafe.observe import (
    LogSettings,
    Observer,
    RetryEvent,
    configure_logging,
    event_fields,
    log_settings,
)
from retrysafe.telemetry.structlog import StructlogEvents
from retrysafe.testing import FakeClock

FAST = retrysafe.RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.02)
FIELDS = [field.name for field in dataclasses.fields(RetryEvent)]


@pytest.fixture
def default_log_levels() -> Iterator[None]:
    yield
    configure_logging(LogSettings())


def records_of(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [record.__dict__["retrysafe"] for record in caplog.records if record.name == "retrysafe"]


def test_every_record_carries_every_field_of_its_event(
    chaos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with retrysafe.Client(policy=FAST) as client, pytest.raises(retrysafe.ServerError):
        client.get(chaos.url("/status/502"))
    records = records_of(caplog)
    assert [list(fields) for fields in records] == [FIELDS] * len(records)
    assert [(r["kind"], r["attempt"], r["status"], r["outcome"], r["reason"]) for r in records] == [
        ("attempt", 1, 502, "bad_gateway", ""),
        ("retry", 1, 502, "bad_gateway", ""),
        ("attempt", 2, 502, "bad_gateway", ""),
        ("failure", 2, 502, "bad_gateway", "attempts_exhausted"),
    ]
    failure = records[-1]
    assert failure["error"] == "ServerError"
    assert failure["exception"] is None
    assert 0 <= records[1]["wait"] <= 0.02
    assert [record.levelno for record in caplog.records] == [
        logging.DEBUG,
        logging.INFO,
        logging.DEBUG,
        logging.WARNING,
    ]


def test_an_attempt_without_a_response_names_its_exception(
    chaos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with retrysafe.Client(policy=FAST) as client, pytest.raises(retrysafe.TransportError):
        client.get(chaos.closed_port_url())
    attempt, retry, _, failure = records_of(caplog)
    assert (attempt["status"], attempt["outcome"], attempt["exception"]) == (
        None,
        "connect_error",
        "ConnectError",
    )
    # The retry it led to names the same exception: one meaning for the field, every kind.
    assert (retry["kind"], retry["attempt"], retry["exception"]) == ("retry", 1, "ConnectError")
    assert (failure["reason"], failure["error"], failure["exception"]) == (
        "attempts_exhausted",
        "TransportError",
        "ConnectError",
    )


@pytest.mark.usefixtures("default_log_levels")
def test_a_4xx_the_caller_must_fix_can_be_logged_below_warning(
    chaos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with retrysafe.Client(policy=FAST) as client:
        with pytest.raises(retrysafe.ClientError):
            client.get(chaos.url("/status/404"))
        assert caplog.records[-1].levelno == logging.WARNING  # the default
        configure_logging(LogSettings(client_error_level=logging.INFO))
        with pytest.raises(retrysafe.ClientError):
            client.get(chaos.url("/status/404"))
        assert caplog.records[-1].levelno == logging.INFO
        with pytest.raises(retrysafe.ServerError):
            client.get(chaos.url("/status/502"))
        assert caplog.records[-1].levelno == logging.WARNING  # a 5xx is not the caller's to fix


@pytest.mark.usefixtures("default_log_levels")
def test_log_settings_in_force_are_the_last_configured_and_the_default_goes_back_to_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    transport = httpx.MockTransport(lambda request: httpx.Response(404))
    quiet = LogSettings(client_error_level=logging.DEBUG)
    with retrysafe.Client(transport=transport, clock=FakeClock()) as client:
        configure_logging(quiet)
        assert log_settings() is quiet
        configure_logging(LogSettings())  # as docs/telemetry.md says, back to the default
        assert log_settings() == LogSettings(client_error_level=logging.WARNING)
        with pytest.raises(retrysafe.ClientError):
            client.get("https://api.test/missing")
    assert caplog.records[-1].levelno == logging.WARNING


def test_log_settings_refuse_what_is_not_a_level() -> None:
    with pytest.raises(TypeError, match="logging level"):
        LogSettings(client_error_level="INFO")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="logging level"):
        LogSettings(client_error_level=True)  # a bool is an int, but no level
    with pytest.raises(TypeError, match="LogSettings"):
        configure_logging(logging.INFO)  # type: ignore[arg-type]


def test_a_breaker_change_has_its_own_field(caplog: pytest.LogCaptureFixture, chaos: Any) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    breaker = retrysafe.BreakerSettings(consecutive_failures=1, open_for=60)
    governor = retrysafe.Governor(retrysafe.GovernorSettings(breaker=breaker))
    with (
        retrysafe.Client(policy=retrysafe.RetryPolicy(attempts=1), governor=governor) as client,
        pytest.raises(retrysafe.ServerError),
    ):
        client.get(chaos.url("/status/503"))
    (circuit,) = [fields for fields in records_of(caplog) if fields["kind"] == "circuit"]
    assert (circuit["transition"], circuit["reason"], circuit["outcome"]) == (
        "closed->open",
        "",
        "",
    )


def test_an_outage_logs_the_breaker_opening_as_a_warning_and_fail_fast_calls_at_debug(
    chaos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The breaker opening is the one WARNING of an outage; the calls it then refuses
    at once are DEBUG, or every cheap fail-fast call would be a log line."""
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    breaker = retrysafe.BreakerSettings(consecutive_failures=1, open_for=60)
    governor = retrysafe.Governor(retrysafe.GovernorSettings(breaker=breaker))
    with retrysafe.Client(policy=retrysafe.RetryPolicy(attempts=1), governor=governor) as client:
        with pytest.raises(retrysafe.ServerError):
            client.get(chaos.url("/status/503"))
        for _ in range(3):
            with pytest.raises(retrysafe.CircuitOpen):
                client.get(chaos.url("/status/200"))
    levels = [
        (record.levelno, fields["kind"], fields["error"] or fields["transition"])
        for record, fields in zip(caplog.records, records_of(caplog), strict=True)
        if fields["kind"] in ("failure", "circuit")
    ]
    assert sorted(levels) == sorted(
        [
            (logging.WARNING, "circuit", "closed->open"),
            (logging.WARNING, "failure", "ServerError"),
            *[(logging.DEBUG, "failure", "CircuitOpen")] * 3,
        ]
    )


def test_structlog_entries_have_the_same_shape_and_levels(chaos: Any) -> None:
    with (
        capture_logs() as entries,
        retrysafe.Client(
            policy=FAST, hooks=[StructlogEvents(structlog.get_logger("retrysafe"))]
        ) as client,
    ):
        response = client.get(
            chaos.url("/fail/{key}", times=1, status=503, **SECRET_QUERY), headers=SECRET_HEADERS
        )
    assert response.status_code == 200
    assert [(entry["event"], entry["log_level"]) for entry in entries] == [
        ("retrysafe.attempt", "debug"),
        ("retrysafe.retry", "info"),
        ("retrysafe.attempt", "debug"),
        ("retrysafe.success", "debug"),
    ]
    for entry in entries:
        assert sorted(set(entry) - {"event", "log_level"}) == sorted(FIELDS)
        for secret in SECRET_VALUES:
            assert secret not in repr(entry)
    assert entries[1]["outcome"] == "service_unavailable"


@pytest.mark.parametrize(
    "event",
    [
        RetryEvent(
            kind="failure",
            dependency="payments",
            method="POST",
            url="https://api.test/v1",
            attempt=3,
            status=503,
            outcome="service_unavailable",
            reason="attempts_exhausted",
            elapsed=1.5,
            error="ServerError",
        ),
        RetryEvent(
            kind="success",
            dependency="payments",
            method="GET",
            url="https://api.test/v1",
            attempt=1,
            status=200,
            outcome="success",
            elapsed=0.25,
        ),
        RetryEvent(
            kind="retry",
            dependency="payments",
            method="GET",
            url="https://api.test/v1",
            attempt=1,
            outcome="read_timeout",
            wait=0.5,
            elapsed=10.0,
            exception="ReadTimeout",
        ),
    ],
    ids=["failure", "success", "retry"],
)
def test_event_fields_is_the_event_itself(event: RetryEvent) -> None:
    assert event_fields(event) == dataclasses.asdict(event)


def test_no_secret_reaches_a_record(chaos: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with retrysafe.Client(policy=FAST) as client, pytest.raises(retrysafe.ServerError):
        client.get(chaos.url("/status/502", **SECRET_QUERY), headers=SECRET_HEADERS)
    texts = [record.getMessage() for record in caplog.records]
    texts += [repr(fields) for fields in records_of(caplog)]
    assert len(texts) == 8
    for text in texts:
        for secret in SECRET_VALUES:
            assert secret not in text


@pytest.mark.parametrize(
    ("path", "said"),
    [
        # the reason says no more than the outcome: said once, as in the error's message
        ("/status/400", "failed after 1 attempt(s): HTTP 400 bad_request (ClientError)"),
        (
            "/status/502",
            "failed after 2 attempt(s): HTTP 502 bad_gateway, gave up: attempts_exhausted "
            "(ServerError)",
        ),
    ],
)
def test_the_failure_line_names_the_reason_only_when_it_adds_to_the_outcome(
    chaos: Any, caplog: pytest.LogCaptureFixture, path: str, said: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with retrysafe.Client(policy=FAST) as client, pytest.raises(retrysafe.ApiError):
        client.get(chaos.url(path))
    [line] = [
        record.getMessage() for record in caplog.records if "failed after" in record.getMessage()
    ]
    assert f"{said} body: " in line  # (the body's excerpt follows)


def test_a_breaker_recovering_is_logged_at_info_and_only_its_opening_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outage is one WARNING (the breaker opening); the probe and the recovery that end
    it are INFO, or every recovered outage would page someone a second and third time."""
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    clock = FakeClock()
    replies = iter([503, 200])
    transport = httpx.MockTransport(lambda request: httpx.Response(next(replies)))
    breaker = retrysafe.BreakerSettings(consecutive_failures=1, open_for=10)
    governor = retrysafe.Governor(retrysafe.GovernorSettings(breaker=breaker), clock=clock)
    policy = retrysafe.RetryPolicy(attempts=1)
    with retrysafe.Client(transport=transport, clock=clock, governor=governor, policy=policy) as c:
        with pytest.raises(retrysafe.ServerError):
            c.get("https://api.test/")
        clock.advance(10)
        assert c.get("https://api.test/").status_code == 200
    circuit = [
        (record.levelno, fields["transition"])
        for record, fields in zip(caplog.records, records_of(caplog), strict=True)
        if fields["kind"] == "circuit"
    ]
    assert circuit == [
        (logging.WARNING, "closed->open"),
        (logging.INFO, "open->half_open"),
        (logging.INFO, "half_open->closed"),
    ]


def test_a_dependency_name_or_a_rules_code_cannot_break_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both are texts an application (or a server, through a rule) chose: the message
    escapes their control characters, so one record stays one line and no terminal
    escape runs; the structured fields keep the values as they are."""
    hostile = "busy\x1b[2J\nforged"

    def busy(response: httpx.Response) -> retrysafe.Verdict | None:
        return retrysafe.Verdict.retry(hostile)

    caplog.set_level(logging.DEBUG, logger="retrysafe")
    transport = httpx.MockTransport(lambda request: httpx.Response(503))
    policy = retrysafe.RetryPolicy(attempts=2, backoff_base=0, backoff_cap=0, rules=(busy,))
    with (
        retrysafe.Client(transport=transport, clock=FakeClock(), policy=policy) as client,
        pytest.raises(retrysafe.ApiError),
    ):
        client.get("https://api.test/", dependency=f"pay{hostile}")
    messages = [record.getMessage() for record in caplog.records if record.name == "retrysafe"]
    assert len(messages) == 4  # attempt, retry, attempt, failure
    for message in messages:
        assert "\x1b" not in message
        assert "\n" not in message
        assert "\\x1b" in message, "escaped visibly, not dropped"
    fields = records_of(caplog)
    assert {(f["dependency"], f["outcome"]) for f in fields} == {(f"pay{hostile}", hostile)}


def test_the_lines_of_an_attempt_without_a_response_name_what_it_got_and_the_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No status to print (never "HTTP None"): the outcome says what happened; the retry
    line gives the seconds waited before the next attempt, as its ``wait`` field does."""

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    caplog.set_level(logging.DEBUG, logger="retrysafe")
    policy = retrysafe.RetryPolicy(attempts=2, backoff_base=0.5, backoff_cap=0.5)
    transport = httpx.MockTransport(refused)
    with (
        retrysafe.Client(transport=transport, clock=FakeClock(), policy=policy) as client,
        pytest.raises(retrysafe.TransportError),
    ):
        client.get("https://api.test/", dependency="api")
    _, retry, _, failure = zip(records_of(caplog), caplog.records, strict=True)
    assert retry[0]["wait"] > 0
    assert retry[1].getMessage() == (
        f"retrying GET https://api.test/ [api]: attempt 1 got connect_error, "
        f"waiting {retry[0]['wait']:.3f}s"
    )
    assert failure[1].getMessage() == (
        "GET https://api.test/ [api] failed after 2 attempt(s): connect_error, "
        "gave up: attempts_exhausted (TransportError)"
    )


def test_a_call_refused_before_sending_says_nothing_was_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    clock = FakeClock()
    transport = httpx.MockTransport(lambda request: httpx.Response(503))
    breaker = retrysafe.BreakerSettings(consecutive_failures=1, open_for=60)
    governor = retrysafe.Governor(retrysafe.GovernorSettings(breaker=breaker), clock=clock)
    policy = retrysafe.RetryPolicy(attempts=1)
    with retrysafe.Client(transport=transport, clock=clock, governor=governor, policy=policy) as c:
        with pytest.raises(retrysafe.ServerError):
            c.get("https://api.test/", dependency="api")
        caplog.clear()
        with pytest.raises(retrysafe.CircuitOpen):
            c.get("https://api.test/", dependency="api")
    [line] = [record.getMessage() for record in caplog.records if record.name == "retrysafe"]
    assert line.startswith(
        "GET https://api.test/ [api] failed after 0 attempt(s): nothing sent, gave up: "
        "circuit_open (CircuitOpen)"
    )


@pytest.mark.parametrize(
    ("outcome", "reason", "said"),
    [
        ("sent", "", "hedged copy 2 sent"),
        ("lost", "", "hedged copy 2 lost"),
        ("refused", "budget_exhausted", "hedged copy 2 refused (budget_exhausted)"),
    ],
)
def test_a_hedge_line_says_what_became_of_the_copy_and_why_it_was_refused(
    caplog: pytest.LogCaptureFixture, outcome: str, reason: str, said: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    event = RetryEvent(
        kind="hedge",
        dependency="api",
        method="GET",
        url="https://api.test/",
        attempt=2,
        outcome=outcome,
        reason=reason,
    )
    Observer().emit(event)
    [record] = caplog.records
    assert (record.levelno, record.getMessage()) == (
        logging.DEBUG,
        f"GET https://api.test/ [api]: {said}",
    )
    assert record.__dict__["retrysafe"] == event_fields(event)


def test_an_application_that_configures_no_logging_sees_no_retrysafe_record() -> None:
    """A library never decides where its records go: without a handler of its own,
    Python's last-resort handler would print every final failure on stderr."""
    code = (
        "import httpx, retrysafe\n"
        "transport = httpx.MockTransport(lambda request: httpx.Response(503))\n"
        "policy = retrysafe.RetryPolicy(attempts=1)\n"
        "with retrysafe.Client(transport=transport, policy=policy) as client:\n"
        "    try:\n"
        "        client.get('https://api.test/')\n"
        "    except retrysafe.ServerError:\n"
        "        print('failed')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert (result.stdout, result.stderr) == ("failed\n", "")
