"""The simulator's machinery: virtual time, the event loop, and the shell driving the engine."""

from __future__ import annotations

import math
import random

import httpx
import pytest

from retrysafe import GovernorSettings, RetryPolicy
from retrysafe.decisions import AttemptPlan
from retrysafe.governor import Governor
from retrysafe.simulate.clock import SimClock, SimulationError, VirtualTime
from retrysafe.simulate.events import EventLoop
from retrysafe.simulate.shell import CallEnd, Reply, SimCall, SimShell


class _Halves(random.Random):
    """Every draw is 0.5, so each full-jitter wait is exactly half its ceiling."""

    def random(self) -> float:
        return 0.5


def _shell(loop: EventLoop, policy: RetryPolicy, send: object) -> SimShell:
    governor = Governor(GovernorSettings.off(), clock=SimClock(loop.time, random.Random(0)))
    return SimShell(loop, policy=policy, governor=governor, send=send)  # type: ignore[arg-type]


def _call(shell: SimShell) -> list[CallEnd]:
    ends: list[CallEnd] = []
    clock = SimClock(shell.loop.time, _Halves())
    shell.start(httpx.Request("GET", "http://dep.sim/"), shell.settings_for(clock), ends.append)
    shell.loop.run()
    return ends


def test_events_run_in_time_order_and_ties_in_the_order_scheduled() -> None:
    loop = EventLoop()
    seen: list[tuple[float, str]] = []
    for when, name in ((2.0, "c"), (1.0, "a"), (2.0, "d"), (1.5, "b")):
        loop.at(when, lambda name=name: seen.append((loop.now, name)))
    loop.run()
    assert seen == [(1.0, "a"), (1.5, "b"), (2.0, "c"), (2.0, "d")]


def test_an_event_in_the_past_is_refused() -> None:
    loop = EventLoop()
    loop.at(5.0, lambda: loop.at(4.0, lambda: None))
    with pytest.raises(SimulationError, match="before now"):
        loop.run()


def test_the_virtual_clock_never_sleeps() -> None:
    clock = SimClock(VirtualTime(), random.Random(0))
    with pytest.raises(SimulationError, match="never sleeps"):
        clock.sleep(1.0)


def test_a_retried_call_takes_exactly_its_latencies_plus_the_engines_backoff() -> None:
    """Three attempts, each answered 503 after 0.1 s; full jitter with every draw 0.5 and
    base 1 s waits 0.5 s, then 0.5 * min(cap 1.5, 2) = 0.75 s: the call ends at 1.55 s."""
    loop = EventLoop()
    sent_at: list[float] = []

    def always_503(call: SimCall, plan: AttemptPlan, reply: Reply) -> None:
        sent_at.append(loop.now)
        loop.after(0.1, reply, httpx.Response(503, request=call.request))

    policy = RetryPolicy(attempts=3, backoff_base=1.0, backoff_cap=1.5, min_attempt_time=0.0)
    [end] = _call(_shell(loop, policy, always_503))
    assert sent_at == pytest.approx([0.0, 0.6, 1.45])
    assert end.ended == pytest.approx(1.55)
    assert (end.ok, end.attempts, end.reason, end.error) == (
        False,
        3,
        "attempts_exhausted",
        "ServerError",
    )


def test_an_attempt_that_gets_no_answer_times_out_on_the_virtual_clock() -> None:
    loop = EventLoop()

    def never_answers(call: SimCall, plan: AttemptPlan, reply: Reply) -> None:
        return None

    policy = RetryPolicy(
        attempts=2, attempt_timeout=2.0, backoff_base=1.0, backoff_cap=1.0, min_attempt_time=0.0
    )
    [end] = _call(_shell(loop, policy, never_answers))
    assert end.ended == pytest.approx(2.0 + 0.5 + 2.0)
    assert (end.attempts, end.error) == (2, "TransportError")


def test_a_deadline_cuts_the_last_attempt_short() -> None:
    loop = EventLoop()

    def never_answers(call: SimCall, plan: AttemptPlan, reply: Reply) -> None:
        return None

    policy = RetryPolicy(
        attempts=5,
        attempt_timeout=2.0,
        deadline=3.0,
        backoff_base=0.2,
        backoff_cap=0.2,
        min_attempt_time=0.1,
    )
    [end] = _call(_shell(loop, policy, never_answers))
    assert end.ended == pytest.approx(3.0)  # 2 s, a 0.1 s wait, then the 0.9 s left
    assert (end.attempts, end.reason) == (2, "deadline_exceeded")


def test_a_late_reply_after_a_timeout_is_ignored() -> None:
    loop = EventLoop()

    def slow(call: SimCall, plan: AttemptPlan, reply: Reply) -> None:
        loop.after(5.0, reply, httpx.Response(200, request=call.request))

    policy = RetryPolicy(attempts=1, attempt_timeout=1.0, deadline=math.inf)
    [end] = _call(_shell(loop, policy, slow))
    assert (end.ok, end.ended) == (False, 1.0)
