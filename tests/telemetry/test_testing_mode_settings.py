"""Testing mode's settings: what a block or the switch puts back, and what it accepts.

Every call here goes to an ``httpx.MockTransport`` that always answers 503, so the
number of attempts a call makes is the cap testing mode (or the policy) puts on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import retrysafe
from hidden_layer import HiddenLayer
from retrysafe.testing import (
    FakeClock,
    TestingSettings,
    in_testing_mode,
    is_testing,
    set_testing,
    switch,
)
from retrysafe.testing import mode as testing_mode

#: Ten attempts, 2 s apart outside testing mode; testing mode skips the waits.
TEN_SLOW_ATTEMPTS = retrysafe.RetryPolicy(
    attempts=10, backoff_base=2.0, backoff_cap=2.0, deadline=60.0
)


@pytest.fixture(autouse=True)
def testing_off_after() -> Iterator[None]:
    yield
    set_testing(False)


def attempts_of_a_failing_call() -> int:
    """How many attempts a call to an upstream that is always down makes (on a fake
    clock, so that outside testing mode too its waits take no time)."""
    transport = httpx.MockTransport(lambda request: httpx.Response(503))
    with (
        retrysafe.Client(
            policy=TEN_SLOW_ATTEMPTS, transport=transport, clock=FakeClock()
        ) as client,
        pytest.raises(retrysafe.ServerError) as caught,
    ):
        client.get("https://api.test/down")
    return caught.value.attempts


def test_the_settings_default_to_a_single_attempt() -> None:
    assert TestingSettings().attempts == 1


@pytest.mark.parametrize("attempts", [True, 2.0, "3", None])
def test_attempts_that_are_not_an_int_are_refused_and_switch_nothing_on(attempts: Any) -> None:
    with pytest.raises(TypeError, match="testing attempts must be an int"):
        TestingSettings(attempts=attempts)
    with pytest.raises(TypeError, match="testing attempts must be an int"):
        set_testing(True, attempts=attempts)
    with (
        pytest.raises(TypeError, match="testing attempts must be an int"),
        in_testing_mode(attempts=attempts),
    ):
        pass
    assert not is_testing()


def test_a_block_puts_back_the_attempts_that_were_in_force() -> None:
    set_testing(True, attempts=2)
    assert attempts_of_a_failing_call() == 2
    with in_testing_mode(attempts=5):
        assert attempts_of_a_failing_call() == 5
    assert attempts_of_a_failing_call() == 2
    assert switch.active == TestingSettings(attempts=2)


def test_set_testing_inside_a_block_lasts_only_as_long_as_the_block() -> None:
    with in_testing_mode():
        set_testing(True, attempts=3)
        assert attempts_of_a_failing_call() == 3
    assert not is_testing()
    assert attempts_of_a_failing_call() == 10  # the policy's own attempts again


def test_a_block_left_by_an_exception_still_puts_back_what_was_in_force() -> None:
    with pytest.raises(RuntimeError, match="the test failed"), in_testing_mode(attempts=4):
        raise RuntimeError("the test failed")
    assert not is_testing()

    set_testing(True, attempts=2)
    with pytest.raises(RuntimeError, match="the test failed"), in_testing_mode(attempts=4):
        raise RuntimeError("the test failed")
    assert switch.active == TestingSettings(attempts=2)


def test_the_switch_can_still_be_read_where_it_used_to_live() -> None:
    assert testing_mode.active is None
    set_testing(True, attempts=3)
    assert testing_mode.active is switch.active
    assert testing_mode.active == TestingSettings(attempts=3)
    set_testing(False)
    assert testing_mode.active is None
    with pytest.raises(AttributeError, match="no attribute 'inactive'"):
        testing_mode.inactive  # noqa: B018 - the read is the test


def calls_through_a_layer_under_a_call(testing_attempts: int) -> int:
    """Calls reaching an upstream that is always down, through a retrying transport under
    a retrysafe client (a call nested in another's attempt), in testing mode."""
    calls: list[httpx.Request] = []

    def down(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(503)

    layer = HiddenLayer(
        retrysafe.RetryTransport(httpx.MockTransport(down), policy=TEN_SLOW_ATTEMPTS)
    )
    with (
        in_testing_mode(attempts=testing_attempts),
        retrysafe.Client(policy=TEN_SLOW_ATTEMPTS, transport=layer) as client,
        pytest.raises(retrysafe.ApiError),
    ):
        client.get("https://api.test/down")
    return len(calls)


def test_one_attempt_in_testing_mode_is_one_even_for_a_nested_call() -> None:
    assert calls_through_a_layer_under_a_call(1) == 1


def test_testing_mode_never_lets_a_nested_call_retry_more_than_nesting_allows() -> None:
    # A nested call makes at most 2 attempts (GovernorSettings.nested_attempts), and the
    # call around it does not retry one that gave up: 2, as outside testing mode.
    assert calls_through_a_layer_under_a_call(4) == 2
