"""backoff_delay and Deadline: pure arithmetic, checked on the fake clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import retrysafe
from retrysafe import Deadline, backoff_delay
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(0, 0.05), (1, 0.1), (3, 0.4), (4, 0.5), (40, 0.5), (10_000, 0.5)],
)
def test_full_jitter_is_rand_times_capped_exponential(attempt: int, expected: float) -> None:
    assert backoff_delay(attempt, base=0.1, cap=1.0, rand=0.5) == pytest.approx(expected)


def test_rand_zero_and_one_span_the_whole_interval() -> None:
    assert backoff_delay(2, base=0.25, cap=8.0, rand=0.0) == 0.0
    assert backoff_delay(2, base=0.25, cap=8.0, rand=1.0) == 1.0


@given(
    attempt=st.integers(min_value=0, max_value=10**6),
    base=st.floats(min_value=0, max_value=100),
    extra=st.floats(min_value=0, max_value=100),
    rand=st.floats(min_value=0, max_value=1),
)
def test_delay_is_finite_and_within_cap(
    attempt: int, base: float, extra: float, rand: float
) -> None:
    cap = base + extra
    delay = backoff_delay(attempt, base, cap, rand)
    assert math.isfinite(delay)
    assert 0.0 <= delay <= cap


@pytest.mark.parametrize(
    ("args", "word"),
    [((-1, 0.1, 1.0, 0.5), "attempt"), ((0, 0.1, 1.0, 1.5), "rand"), ((0, -1.0, 1.0, 0.5), "base")],
)
def test_bad_backoff_arguments_say_which(args: tuple[int, float, float, float], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        backoff_delay(*args)


def test_deadline_counts_down_on_its_clock() -> None:
    clock = FakeClock()
    deadline = Deadline.after(10, clock)
    assert deadline.remaining() == 10
    clock.advance(4)
    assert deadline.remaining() == 6
    assert not deadline.expired
    clock.advance(7)
    assert deadline.remaining() == 0
    assert deadline.expired


def test_attempt_timeout_is_the_smaller_of_limit_and_time_left() -> None:
    clock = FakeClock()
    deadline = Deadline.after(3, clock)
    assert deadline.attempt_timeout(10) == 3
    assert deadline.attempt_timeout(1) == 1


def test_allows_a_wait_only_if_a_useful_attempt_remains() -> None:
    clock = FakeClock()
    deadline = Deadline.after(5, clock)
    assert deadline.allows(4.5, 0.5)
    assert not deadline.allows(4.6, 0.5)
    assert deadline.allows(5.0)


def test_tighter_picks_the_one_with_less_time_left() -> None:
    clock = FakeClock()
    short, long = Deadline.after(2, clock), Deadline.after(9, clock)
    assert short.tighter(long) is short
    assert long.tighter(short) is short
    assert long.tighter(None) is long


def test_negative_deadline_is_refused() -> None:
    with pytest.raises(ValueError, match="seconds >= 0"):
        Deadline.after(-1)


def test_deadline_scope_nests_and_only_tightens() -> None:
    clock = FakeClock()
    assert retrysafe.deadline_scope.current_deadline() is None
    with retrysafe.deadline(5, clock=clock) as outer:
        with retrysafe.deadline(60, clock=clock) as inner:
            assert inner is outer
        with retrysafe.deadline(1, clock=clock) as tight:
            assert tight.remaining() == 1
        assert retrysafe.deadline_scope.current_deadline() is outer
    assert retrysafe.deadline_scope.current_deadline() is None


async def test_deadline_scope_works_with_async_with() -> None:
    clock = FakeClock()
    async with retrysafe.deadline(2, clock=clock) as scope:
        assert retrysafe.deadline_scope.current_deadline() is scope
    assert retrysafe.deadline_scope.current_deadline() is None
