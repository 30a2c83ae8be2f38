"""The sync shell's process-wide hedge timer: it runs what is due, and nothing disarmed."""

from __future__ import annotations

import threading
import time

from retrysafe import hedge_timer


def test_an_armed_action_runs_at_its_time_and_a_disarmed_one_never() -> None:
    ran: list[str] = []
    done = threading.Event()
    now = time.monotonic()
    hedge_timer.arm(now + 0.05, lambda: ran.append("late"))
    dropped = hedge_timer.arm(now + 0.02, lambda: ran.append("dropped"))
    hedge_timer.arm(now + 0.01, lambda: ran.append("early"))
    hedge_timer.arm(now + 0.08, done.set)
    dropped.disarm()
    assert done.wait(5.0)
    assert ran == ["early", "late"]
    assert time.monotonic() - now >= 0.08


def test_a_disarmed_alarm_lets_go_of_its_action_at_once() -> None:
    """A call answered before its copy was due must not be kept alive until then."""
    alarm = hedge_timer.arm(time.monotonic() + 3600, lambda: None)
    alarm.disarm()
    assert alarm.action is None
    assert not alarm.armed


def test_many_disarmed_alarms_are_compacted_away() -> None:
    far = time.monotonic() + 3600
    for _ in range(3000):
        hedge_timer.arm(far, lambda: None).disarm()
    hedge_timer.arm(far, lambda: None).disarm()
    assert len(hedge_timer._TIMER._heap) < 2100  # not 3001 entries waiting an hour
