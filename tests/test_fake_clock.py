"""FakeClock, the virtual time users test their code with: what docs/testing.md promises."""

from __future__ import annotations

import anyio
import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.governor import Governor, GovernorSettings
from retrysafe.testing import FakeClock


def test_a_negative_sleep_is_recorded_but_never_moves_time_backwards() -> None:
    clock = FakeClock(start=10.0)
    clock.sleep(-3.0)
    assert clock.sleeps == [-3.0]
    assert clock.monotonic() == 10.0
    clock.sleep(2.0)
    assert clock.monotonic() == 12.0


def test_wall_time_begins_at_the_wall_start_whatever_the_monotonic_start() -> None:
    clock = FakeClock(start=500.0, wall_start=1_800_000_000.0)
    assert clock.monotonic() == 500.0
    assert clock.time() == 1_800_000_000.0
    clock.sleep(2.5)
    assert clock.time() == 1_800_000_002.5


def test_an_http_date_retry_after_is_read_on_the_wall_clock_from_any_monotonic_start() -> None:
    """A wall time off by the monotonic start would put the date an hour in the past."""
    clock = FakeClock(start=3600.0, randoms=[0.0])
    answers = iter(
        [
            # 5 s after FakeClock's default wall start, 2023-11-14T22:13:20Z
            httpx.Response(503, headers={"Retry-After": "Tue, 14 Nov 2023 22:13:25 GMT"}),
            httpx.Response(200),
        ]
    )
    with retrysafe.Client(
        transport=httpx.MockTransport(lambda request: next(answers)),
        clock=clock,
        policy=RetryPolicy(retry_after_jitter=0),
        governor=Governor(GovernorSettings.off()),
    ) as client:
        assert client.get("http://api.test/").status_code == 200
    assert clock.sleeps == [5.0]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_cancelled_task_stops_at_an_async_sleep(backend: str) -> None:
    """The sleep returns at once but is still a checkpoint, as a real sleep is: a retry
    loop on the fake clock can be cancelled."""
    clock = FakeClock()
    went_on: list[bool] = []

    async def cancelled_sleeper() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await clock.async_sleep(1.0)
            went_on.append(True)

    anyio.run(cancelled_sleeper, backend=backend)
    assert went_on == []
    assert clock.sleeps == [1.0]


def test_scripted_randoms_come_in_order_and_running_out_is_an_error() -> None:
    """A test that scripted too few values learns of it, rather than getting unscripted
    jitter that makes its expected waits wrong."""
    clock = FakeClock(randoms=[0.5, 0.25])
    assert [clock.random(), clock.random()] == [0.5, 0.25]
    with pytest.raises(LookupError, match="ran out of scripted random values"):
        clock.random()
