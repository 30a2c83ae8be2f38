"""When a quiet outage (one soon after another) becomes worth a WARNING, on an injected clock."""

from __future__ import annotations

import logging

import pytest

from retrysafe.fleet.availability import QUIET_FOR, Availability


def test_a_quiet_outage_is_warned_of_as_soon_as_it_has_lasted_quiet_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe.fleet")
    now = [0.0]
    availability = Availability("redis://127.0.0.1:6379/0", monotonic=lambda: now[0])
    availability.lost(TimeoutError("timed out"))  # a blip, warned of
    availability.found()
    now[0] = 10.0
    availability.lost(TimeoutError("timed out"))  # soon after: quiet
    caplog.clear()
    now[0] = 10.0 + QUIET_FOR - 0.5
    assert not availability.lost(ConnectionError("refused"))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    now[0] = 10.0 + QUIET_FOR  # exactly QUIET_FOR: it is long now
    assert not availability.lost(ConnectionError("refused"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert f"has not answered for {QUIET_FOR:.0f} s" in warnings[0]
