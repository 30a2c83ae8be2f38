"""The simulator's parts on their own: the clock, the event loop, the comparison formulas,
the flaky dependency, and the figures the scenarios compute from what happened."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import httpx
import pytest

from retrysafe import GovernorSettings, RetryPolicy
from retrysafe.decisions import AttemptPlan
from retrysafe.governor import Governor
from retrysafe.observe import RetryEvent
from retrysafe.simulate.clock import WALL_START, SimClock, SimulationError, VirtualTime
from retrysafe.simulate.dependency import FlakyDependency
from retrysafe.simulate.events import EventLoop
from retrysafe.simulate.formulas import STRATEGIES, formula_wait
from retrysafe.simulate.outage import OutageWindow, _median
from retrysafe.simulate.shell import CallEnd, EventCount, Outcome, SimCall, SimShell


class _Fixed(random.Random):
    """Every draw is ``value``; counts the draws."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value
        self.draws = 0

    def random(self) -> float:
        self.draws += 1
        return self.value


# -- virtual time and the event loop ---------------------------------------------------


def test_the_wall_clock_of_the_simulation_moves_with_virtual_time() -> None:
    """HTTP-dates (Retry-After) are read against ``time()``: it must advance as ``now`` does."""
    now = VirtualTime()
    clock = SimClock(now, random.Random(0))
    assert (clock.monotonic(), clock.time()) == (0.0, WALL_START)
    now.now = 2.5
    assert clock.monotonic() == 2.5
    assert clock.time() == WALL_START + 2.5


def test_an_event_at_nan_is_refused_at_once() -> None:
    loop = EventLoop()
    with pytest.raises(SimulationError, match="nan"):
        loop.at(math.nan, lambda: None)
    with pytest.raises(SimulationError):
        loop.after(math.nan, lambda: None)
    assert len(loop) == 0


def test_run_until_handles_events_up_to_and_at_that_time_and_keeps_the_rest() -> None:
    loop = EventLoop()
    seen: list[float] = []
    for when in (1.0, 2.0, 2.5):
        loop.at(when, lambda: seen.append(loop.now))
    loop.run(until=2.0)
    assert seen == [1.0, 2.0]
    assert (len(loop), loop.now) == (1, 2.0)
    loop.run()
    assert seen == [1.0, 2.0, 2.5]


# -- the comparison formulas ------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "retries", "previous", "expected"),
    [
        ("none", 0, 1.0, 0.0),
        ("none", 5, 1.0, 0.0),
        # c = min(cap 10, base 1 * 2 ** retries): 1, 2, 4, 8, then the cap
        ("exponential", 0, 1.0, 1.0),
        ("exponential", 1, 1.0, 2.0),
        ("exponential", 3, 1.0, 8.0),
        ("exponential", 4, 1.0, 10.0),
        ("exponential", 5000, 1.0, 10.0),  # no overflow far past the cap
        # random(0, c) with the draw 0.25
        ("full", 0, 1.0, 0.25),
        ("full", 2, 1.0, 1.0),
        ("full", 9, 1.0, 2.5),
        # c/2 + random(0, c/2)
        ("equal", 0, 1.0, 0.5 + 0.125),
        ("equal", 2, 1.0, 2.0 + 0.5),
        ("equal", 9, 1.0, 5.0 + 1.25),
        # min(cap, random(base, 3 * previous)) = base + 0.25 * (3 * previous - base)
        ("decorrelated", 0, 1.0, 1.0 + 0.25 * 2.0),
        ("decorrelated", 7, 3.0, 1.0 + 0.25 * 8.0),
        ("decorrelated", 7, 20.0, 10.0),  # 1 + 0.25 * 59 is past the cap
    ],
)
def test_each_formula_computes_the_wait_the_article_gives(
    strategy: str, retries: int, previous: float, expected: float
) -> None:
    rng = _Fixed(0.25)
    wait = formula_wait(strategy, retries, previous, 1.0, 10.0, rng)  # type: ignore[arg-type]
    assert wait == pytest.approx(expected)


def test_each_formula_draws_at_most_one_random_number_per_wait() -> None:
    for strategy in STRATEGIES:
        rng = _Fixed(0.5)
        formula_wait(strategy, 3, 0.2, 0.1, 2.0, rng)
        assert rng.draws == (0 if strategy in ("none", "exponential") else 1), strategy


# -- the flaky dependency ---------------------------------------------------------------


def _dependency(fault: str, failing: float) -> tuple[EventLoop, FlakyDependency, list[Outcome]]:
    loop = EventLoop()
    dependency = FlakyDependency(
        loop,
        random.Random(3),
        failing=lambda _now: failing,
        latency=0.020,
        latency_sd=0.005,
        fault=fault,  # type: ignore[arg-type]
    )
    return loop, dependency, []


class _Call:
    """What the dependency reads of a call: its request."""

    request = httpx.Request("GET", "http://dependency.sim/items")


def _send(loop: EventLoop, dependency: FlakyDependency, answers: list[Outcome]) -> None:
    sent = loop.now
    dependency.send(_Call(), None, lambda outcome: answers.append((loop.now - sent, outcome)))  # type: ignore[arg-type]


def test_a_healthy_dependency_answers_200_after_a_jittered_latency() -> None:
    loop, dependency, answers = _dependency("503", failing=0.0)
    for index in range(400):
        loop.at(index * 1.0, _send, loop, dependency, answers)
    loop.run()
    assert dependency.attempts == 400
    assert dependency.arrivals == [index * 1.0 for index in range(400)]
    delays = [delay for delay, _ in answers]
    assert {response.status_code for _, response in answers} == {200}
    assert min(delays) >= 0.0
    assert len(set(delays)) == 400  # |Normal(20 ms, sd 5 ms)|, not a fixed 20 ms
    assert sum(delays) / 400 == pytest.approx(0.020, abs=0.001)
    spread = math.sqrt(sum((delay - 0.020) ** 2 for delay in delays) / 400)
    assert spread == pytest.approx(0.005, abs=0.001)


def test_a_failing_attempt_is_a_503_and_is_counted() -> None:
    loop, dependency, answers = _dependency("503", failing=1.0)
    for index in range(3):
        loop.at(float(index), _send, loop, dependency, answers)
    loop.run()
    assert dependency.attempts == 3
    assert [response.status_code for _, response in answers] == [503, 503, 503]


def test_a_hanging_dependency_counts_the_attempt_and_never_answers_it() -> None:
    loop, dependency, answers = _dependency("timeout", failing=1.0)
    for index in range(3):
        loop.at(float(index), _send, loop, dependency, answers)
    loop.run()
    assert (dependency.attempts, answers) == (3, [])


def test_with_fault_timeout_only_the_failing_attempts_hang() -> None:
    loop, dependency, answers = _dependency("timeout", failing=0.0)
    for index in range(3):
        loop.at(float(index), _send, loop, dependency, answers)
    loop.run()
    assert [response.status_code for _, response in answers] == [200, 200, 200]


# -- figures ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "median"),
    [([], None), ([3.0], 3.0), ([5.0, 1.0, 3.0], 3.0), ([4.0, 1.0, 3.0, 2.0], 2.5)],
)
def test_the_median_of_failure_times(values: list[float], median: float | None) -> None:
    assert _median(values) == median


def test_the_shell_counts_each_opening_of_the_breaker_once() -> None:
    """``breaker_opened`` counts transitions into open, not those out of it."""
    count = EventCount()
    for transition in ("closed->open", "open->half_open", "half_open->open", "half_open->closed"):
        count.emit(
            RetryEvent("circuit", "dependency", "GET", "http://dep.sim/", 3, transition=transition)
        )
    count.emit(RetryEvent("retry", "dependency", "GET", "http://dep.sim/", 1, wait=0.1))
    count.emit(RetryEvent("failure", "dependency", "GET", "http://dep.sim/", 2))
    assert (count.breaker_opened, count.retries, count.failures) == (2, 1, 1)


def test_a_call_is_refused_unsent_only_when_it_made_no_attempt() -> None:
    assert CallEnd(False, 0, 1.0, 1.0, "circuit_open", "CircuitOpen").refused_unsent
    assert not CallEnd(False, 1, 1.0, 2.0, "attempts_exhausted", "ServerError").refused_unsent
    assert not CallEnd(True, 1, 1.0, 2.0, None, None).refused_unsent


def test_a_moment_counts_in_the_bucket_it_falls_in() -> None:
    """Buckets are [start, start + bucket): 0.9 s is in the first, 1.6 s in the second."""
    window = OutageWindow(duration=3.0, down_at=0.0, down_for=0.0, bucket=1.0)
    assert window.per_second([0.9, 1.0, 1.6, 2.5, 2.99]) == (1.0, 2.0, 2.0)


@pytest.mark.parametrize("hedge_after", [None, 0.01], ids=["plain", "hedging"])
def test_a_cancelled_call_reports_the_attempts_it_sent(hedge_after: float | None) -> None:
    """A call cancelled while its attempts are in flight (its caller's attempt timed out)
    sent them: it is not "refused unsent", which would blame retrysafe's protection."""
    loop = EventLoop()
    sent: list[float] = []

    def never_answer(call: SimCall, plan: AttemptPlan, reply: Callable[[Outcome], None]) -> None:
        sent.append(loop.now)

    clock = SimClock(loop.time, random.Random(0))
    shell = SimShell(
        loop,
        policy=RetryPolicy(hedge_after=hedge_after, attempt_timeout=5.0),
        governor=Governor(GovernorSettings.off(), clock=clock),
        send=never_answer,
    )
    ends: list[CallEnd] = []
    call = shell.start(
        httpx.Request("GET", "http://dep.sim/"), shell.settings_for(clock), ends.append
    )
    loop.at(0.05, call.cancel)
    loop.run(until=1.0)
    [end] = ends
    assert end.reason == "cancelled"
    assert end.attempts == len(sent) == (1 if hedge_after is None else 2)
    assert not end.refused_unsent
