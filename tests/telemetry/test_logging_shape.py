"""Log records and structlog entries: one documented shape, fields with one meaning each."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs
from telemetry_support import SECRET_HEADERS, SECRET_QUERY, SECRET_VALUES

import retrysafe
from retrysafe.observe import LogSettings, RetryEvent, configure_logging, event_fields
from retrysafe.telemetry.structlog import StructlogEvents

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


def test_log_settings_refuse_what_is_not_a_level() -> None:
    with pytest.raises(TypeError, match="logging level"):
        LogSettings(client_error_level="INFO")  # type: ignore[arg-type]
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


def test_event_fields_is_the_event_itself() -> None:
    event = RetryEvent(
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
    )
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
