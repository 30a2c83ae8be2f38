"""Testing mode: a user's test suite that goes through retrysafe never sleeps.

Wall-clock bounds here are loose (a loaded machine), but each is far below what the
call would take outside testing mode (stated next to it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import retrysafe
from retrysafe.testing import FakeClock, in_testing_mode, is_testing, set_testing, switch

#: A policy that, outside testing mode, waits 2 s before each of its 4 retries.
SLOW = retrysafe.RetryPolicy(attempts=5, backoff_base=2.0, backoff_cap=2.0, deadline=60.0)


@pytest.fixture(autouse=True)
def testing_off_after() -> Iterator[None]:
    yield
    set_testing(False)


def test_off_by_default_and_switched_by_set_testing() -> None:
    assert not is_testing()
    set_testing(True)
    assert is_testing()
    set_testing(False)
    assert not is_testing()


def test_one_attempt_by_default_the_first_failure_is_the_error(chaos: Any) -> None:
    set_testing(True)
    with retrysafe.Client(policy=SLOW) as client, pytest.raises(retrysafe.ServerError) as caught:
        client.get(chaos.url("/fail/{key}", times=3, status=503))
    assert caught.value.attempts == 1
    assert [record.action for record in chaos.log()] == ["status:503"]


def test_retries_happen_without_waiting(chaos: Any) -> None:
    set_testing(True, attempts=4)
    started = time.monotonic()
    with retrysafe.Client(policy=SLOW) as client:
        # Retry-After: 15, three times, would take 45 s outside testing mode.
        response = client.get(chaos.url("/fail/{key}", times=3, status=503, retry_after=15))
    assert response.status_code == 200
    assert retrysafe.report_of(response).attempts == 4
    assert time.monotonic() - started < 5
    assert [record.action for record in chaos.log()] == ["status:503"] * 3 + ["status:200"]


def _replies(*statuses: int) -> httpx.MockTransport:
    answers = iter(statuses)
    return httpx.MockTransport(
        lambda request: httpx.Response(next(answers), headers={"Retry-After": "20"})
    )


def _outcome(client: retrysafe.Client) -> str:
    try:
        response = client.get("https://api.test/things")
    except retrysafe.ApiError as error:
        return f"{type(error).__name__} after {error.attempts}"
    return f"{response.status_code} after {retrysafe.report_of(response).attempts}"


def test_skipped_waits_still_use_up_the_deadline() -> None:
    # Two Retry-After: 20 waits do not fit the default 30 s deadline: production gives up
    # at the second, and so does testing mode, which skips the waits but counts them.
    with retrysafe.Client(transport=_replies(503, 503, 200), clock=FakeClock()) as client:
        production = _outcome(client)
    with in_testing_mode(attempts=3), retrysafe.Client(transport=_replies(503, 503, 200)) as client:
        started = time.monotonic()
        testing = _outcome(client)
        assert time.monotonic() - started < 5
    assert testing == production == "RetryAfterTooLong after 2"


def test_calls_at_once_in_one_deadline_scope_each_spend_only_their_own_waits() -> None:
    # Three calls in one 2.5 s scope, each waiting Retry-After: 1 once: in production the
    # waits run side by side and all three succeed; so they must in testing mode.
    seen: dict[str, int] = {}

    def upstream(request: httpx.Request) -> httpx.Response:
        seen[request.url.path] = seen.get(request.url.path, 0) + 1
        if seen[request.url.path] == 1:
            return httpx.Response(503, headers={"Retry-After": "1"})
        return httpx.Response(200)

    async def three() -> list[int]:
        policy = retrysafe.RetryPolicy(deadline=60.0)
        transport = httpx.MockTransport(upstream)
        async with retrysafe.AsyncClient(policy=policy, transport=transport) as client:
            statuses: list[int] = []

            async def one(number: int) -> None:
                statuses.append((await client.get(f"https://api.test/{number}")).status_code)

            with retrysafe.deadline(2.5):
                async with anyio.create_task_group() as group:
                    for number in range(3):
                        group.start_soon(one, number)
            return statuses

    with in_testing_mode(attempts=3):
        assert anyio.run(three) == [200, 200, 200]


def test_attempts_are_capped_by_the_policy_too(chaos: Any) -> None:
    set_testing(True, attempts=10)
    policy = retrysafe.RetryPolicy(attempts=2, backoff_base=2.0)
    with retrysafe.Client(policy=policy) as client, pytest.raises(retrysafe.ServerError) as caught:
        client.get(chaos.url("/status/503"))
    assert caught.value.attempts == 2


def test_a_429_cooldown_does_not_hold_the_next_call(chaos: Any) -> None:
    """Load protection is left out: a 429's Retry-After would otherwise pause the dependency."""
    set_testing(True)
    started = time.monotonic()
    with retrysafe.Client(policy=SLOW) as client:
        with pytest.raises(retrysafe.RateLimited):
            client.get(chaos.url("/status/429", retry_after=30))
        assert client.get(chaos.url("/status/200")).status_code == 200
    assert time.monotonic() - started < 5  # outside testing mode: a 30 s cooldown first


def test_async_clients_do_not_wait_either(chaos: Any) -> None:
    async def call() -> int:
        async with retrysafe.AsyncClient(policy=SLOW) as client:
            response = await client.get(chaos.url("/fail/{key}", times=2, status=503))
            return retrysafe.report_of(response).attempts

    with in_testing_mode(attempts=3):
        started = time.monotonic()
        assert anyio.run(call) == 3
        assert time.monotonic() - started < 5  # outside testing mode: about 4 s of waits
    assert not is_testing()


def test_blocks_that_overlap_leave_what_came_before_them() -> None:
    # Two tasks, each in a block; the first to begin ends first, so the blocks overlap
    # without nesting: the later one stays in force until it ends, then testing mode is off.
    seen: list[int | None] = []

    async def worker(attempts: int, delay: float) -> None:
        with in_testing_mode(attempts=attempts):
            await anyio.sleep(delay)
        settings = switch.active
        seen.append(None if settings is None else settings.attempts)

    async def both() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(worker, 1, 0.01)
            group.start_soon(worker, 3, 0.05)

    anyio.run(both)
    assert seen == [3, None]
    assert not is_testing()


def test_the_block_restores_what_was_in_force() -> None:
    set_testing(True, attempts=2)
    with in_testing_mode(attempts=5):
        assert is_testing()
    assert is_testing()
    set_testing(False)
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        set_testing(True, attempts=0)
    with pytest.raises(TypeError, match="True or False"):
        set_testing("yes")  # type: ignore[arg-type]
    assert not is_testing()


def test_the_pytest_fixture(tmp_path: Path, chaos: Any) -> None:
    """A user's suite, run by pytest in its own process with the plugin as installed."""
    suite = tmp_path / "test_users_suite.py"
    suite.write_text(
        textwrap.dedent(
            f"""
        import time
        import pytest
        import retrysafe
        from retrysafe.testing import is_testing

        URL = {chaos.url("/status/503")!r}

        def test_in_testing_mode(retrysafe_testing):
            assert is_testing()
            started = time.monotonic()
            with retrysafe.Client() as client, pytest.raises(retrysafe.ServerError) as caught:
                client.get(URL)
            assert caught.value.attempts == 1
            assert time.monotonic() - started < 5

        def test_off_again():
            assert not is_testing()
        """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
