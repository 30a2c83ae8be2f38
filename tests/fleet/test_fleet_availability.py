"""A Redis that goes away and comes back is told in the log once each way, not per flap."""

from __future__ import annotations

import logging

import pytest

from retrysafe.fleet.availability import Availability


def levels(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (record.levelno, "away" if "not answering" in record.getMessage() else "back")
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
