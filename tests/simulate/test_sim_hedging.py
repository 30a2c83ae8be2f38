"""Hedging in the simulator: a ``hedge_after`` policy sends copies on the virtual clock,
as the real shells do on the wall clock (the engine decides; the shell only sends)."""

from __future__ import annotations

import random

import httpx
import pytest

from retrysafe import GovernorSettings, RetryPolicy
from retrysafe.decisions import AttemptPlan
from retrysafe.governor import Governor
from retrysafe.simulate import run_brownout
from retrysafe.simulate.clock import SimClock
from retrysafe.simulate.events import EventLoop
from retrysafe.simulate.shell import CallEnd, Reply, SimCall, SimShell


def _run_one(policy: RetryPolicy, answers: list[tuple[float, int]]) -> tuple[CallEnd, list[float]]:
    """One call against a dependency whose n-th request answers ``answers[n]``
    (seconds later, status); returns how it ended and when each request was sent."""
    loop = EventLoop()
    sent_at: list[float] = []

    def send(call: SimCall, plan: AttemptPlan, reply: Reply) -> None:
        delay, status = answers[len(sent_at)]
        sent_at.append(loop.now)
        loop.after(delay, reply, httpx.Response(status, request=call.request))

    governor = Governor(GovernorSettings.off(), clock=SimClock(loop.time, random.Random(0)))
    shell = SimShell(loop, policy=policy, governor=governor, send=send)
    ends: list[CallEnd] = []
    clock = SimClock(loop.time, random.Random(0))
    shell.start(httpx.Request("GET", "http://dep.sim/"), shell.settings_for(clock), ends.append)
    loop.run()
    [end] = ends
    return end, sent_at


def test_a_copy_is_sent_when_due_and_its_answer_ends_the_call() -> None:
    """The first request would take 2 s; the copy goes at 0.1 s and answers at 0.15 s."""
    policy = RetryPolicy(hedge_after=0.1, attempt_timeout=5.0)
    end, sent_at = _run_one(policy, [(2.0, 200), (0.05, 200)])
    assert sent_at == pytest.approx([0.0, 0.1])
    assert (end.ok, end.attempts) == (True, 2)
    assert end.ended == pytest.approx(0.15)  # not 2 s: the late answer of the loser is ignored


def test_a_copy_that_fails_does_not_end_the_call_while_the_first_is_in_flight() -> None:
    policy = RetryPolicy(hedge_after=0.1, attempt_timeout=5.0)
    end, sent_at = _run_one(policy, [(0.5, 200), (0.01, 503)])
    assert sent_at == pytest.approx([0.0, 0.1])
    assert (end.ok, end.attempts) == (True, 2)
    assert end.ended == pytest.approx(0.5)


def test_an_answer_before_the_hedge_is_due_sends_no_copy() -> None:
    policy = RetryPolicy(hedge_after=0.1, attempt_timeout=5.0)
    end, sent_at = _run_one(policy, [(0.05, 200)])
    assert sent_at == [0.0]
    assert (end.ok, end.attempts, end.ended) == (True, 1, pytest.approx(0.05))


def test_a_brownout_with_a_hedging_policy_sends_copies() -> None:
    """Nothing fails, but most answers (20 ms +- 5 ms) come after the 15 ms hedge delay:
    without hedging every call is one request; with it, copies go (as many as the
    default retry budget lets through)."""
    result = run_brownout(
        failure_rates=(0.0,),
        calls=200,
        policy=RetryPolicy(hedge_after=0.015),
        workers=1,
    )
    yours = result.row("yours", 0.0)
    assert yours.succeeded == 200
    assert yours.attempts > 200  # the copies reached the dependency
    unhedged = run_brownout(failure_rates=(0.0,), calls=200, policy=RetryPolicy(), workers=1).row(
        "yours", 0.0
    )
    assert unhedged.attempts == 200


def test_a_call_started_later_hedges_its_delay_after_its_own_start() -> None:
    """The copy is due ``hedge_after`` after the attempt began, whenever the call began."""
    loop = EventLoop()
    sent_at: list[float] = []

    def send(call: SimCall, plan: AttemptPlan, reply: Reply) -> None:
        delay = 2.0 if not sent_at else 0.05
        sent_at.append(loop.now)
        loop.after(delay, reply, httpx.Response(200, request=call.request))

    governor = Governor(GovernorSettings.off(), clock=SimClock(loop.time, random.Random(0)))
    shell = SimShell(
        loop, policy=RetryPolicy(hedge_after=0.1, attempt_timeout=5.0), send=send, governor=governor
    )
    ends: list[CallEnd] = []
    clock = SimClock(loop.time, random.Random(0))
    request = httpx.Request("GET", "http://dep.sim/")
    loop.at(1.0, lambda: shell.start(request, shell.settings_for(clock), ends.append))
    loop.run()
    assert sent_at == pytest.approx([1.0, 1.1])
    [end] = ends
    assert (end.ok, end.attempts, end.started) == (True, 2, 1.0)
    assert end.ended == pytest.approx(1.15)
