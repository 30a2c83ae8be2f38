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
import pytest

import retrysafe
from retrysafe.testing import in_testing_mode, is_testing, set_testing

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
        # Retry-After: 30 and SLOW's backoff would take over a minute outside testing mode.
        response = client.get(chaos.url("/fail/{key}", times=3, status=503, retry_after=30))
    assert response.status_code == 200
    assert retrysafe.report_of(response).attempts == 4
    assert time.monotonic() - started < 5
    assert [record.action for record in chaos.log()] == ["status:503"] * 3 + ["status:200"]


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
