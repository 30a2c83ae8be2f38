"""A Redis that goes away and comes back is told in the log once each way, not per flap."""

from __future__ import annotations

import logging

import pytest

from retrysafe.fleet.availability import Availability


def levels(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    def said(message: str) -> str:
        if "not answering" in message:
            return "away"
        return "still away" if "has not answered for" in message else "back"

    return [
        (record.levelno, said(record.getMessage()))
        for record in caplog.records
        if record.name == "retrysafe.fleet"
    ]


def test_a_flapping_redis_logs_one_warning_and_one_info_then_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe.fleet")
    availability = Availability("redis://127.0.0.1:6379/0")
    for _ in range(3):  # away and back three times within a minute (a slow Redis)
        assert availability.lost(TimeoutError("timed out"))
        assert availability.found()
    assert levels(caplog) == [
        (logging.WARNING, "away"),
        (logging.INFO, "back"),
        (logging.DEBUG, "away"),
        (logging.DEBUG, "back"),
        (logging.DEBUG, "away"),
        (logging.DEBUG, "back"),
    ]
    assert availability.outages == 3


def test_a_long_outage_after_a_short_one_is_warned_of_once_it_has_lasted_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The quiet after a flap does not hide an outage that then goes on: once it has
    lasted QUIET_FOR, it is a WARNING, and its end an INFO."""
    caplog.set_level(logging.DEBUG, logger="retrysafe.fleet")
    now = [0.0]
    availability = Availability("redis://127.0.0.1:6379/0", monotonic=lambda: now[0])
    availability.lost(TimeoutError("timed out"))  # a blip
    availability.found()
    now[0] = 30.0
    availability.lost(TimeoutError("timed out"))  # within a minute: quiet
    for second in (40.0, 89.0, 90.0, 120.0, 600.0):  # the refresher keeps failing
        now[0] = second
        assert not availability.lost(ConnectionError("refused"))
    availability.found()
    assert levels(caplog) == [
        (logging.WARNING, "away"),
        (logging.INFO, "back"),
        (logging.DEBUG, "away"),
        (logging.WARNING, "still away"),  # at 90 s: it has lasted 60 s
        (logging.INFO, "back"),
    ]
