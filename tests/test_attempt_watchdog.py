"""The asyncio watchdog that ends attempts on transports with no network reads to bound.

``MockTransport`` (like ``ASGITransport`` or any custom transport) gives retrysafe
no socket to bound, so each attempt on it runs under a time limit: one timer per
event loop (:mod:`retrysafe.attempt_watchdog`). Wall-clock tests: short, and they
assert bounds, never exact timings.
"""

from __future__ import annotations

import asyncio
import sys
import time

import httpx
import pytest

import retrysafe
from retrysafe.attempt_watchdog import watchdog

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(10),  # a watchdog that fails to fire leaves a hang: fail it fast
    pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio 3.11+ only"),
]


@pytest.fixture
def anyio_backend() -> str:
    """The watchdog is asyncio's (trio attempts run under anyio's cancel scope)."""
    return "asyncio"


def _client(handler: object, policy: retrysafe.RetryPolicy) -> retrysafe.AsyncClient:
    return retrysafe.AsyncClient(
        transport=httpx.MockTransport(handler),  # type: ignore[arg-type]
        policy=policy,
        governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
    )


async def _hangs(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(3600)
    return httpx.Response(200)


async def test_an_attempt_that_hangs_ends_at_its_timeout_and_is_retried() -> None:
    policy = retrysafe.RetryPolicy(
        attempts=2, attempt_timeout=0.2, deadline=2.0, backoff_base=0.01, min_attempt_time=0.05
    )
    async with _client(_hangs, policy) as client:
        started = time.monotonic()
        with pytest.raises(retrysafe.TransportError) as caught:
            await client.get("http://upstream.test/slow")
        took = time.monotonic() - started
    assert caught.value.attempts == 2
    assert [record.outcome for record in caught.value.history] == [
        "attempt_timeout",
        "attempt_timeout",
    ]
    assert 0.4 <= took < 1.5


async def test_the_callers_cancellation_is_not_taken_for_a_timeout() -> None:
    policy = retrysafe.RetryPolicy(attempt_timeout=5.0, deadline=10.0)
    async with _client(_hangs, policy) as client:
        task = asyncio.ensure_future(client.get("http://upstream.test/slow"))
        await asyncio.sleep(0.05)
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 1.0


async def test_an_enclosing_timeout_of_the_caller_stays_the_callers() -> None:
    policy = retrysafe.RetryPolicy(attempt_timeout=5.0, deadline=10.0)
    async with _client(_hangs, policy) as client:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await client.get("http://upstream.test/slow")
        # The task is not left with a cancel pending: it goes on as usual.
        await asyncio.sleep(0.01)
        assert asyncio.current_task() is not None
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_short_attempt_ends_on_time_beside_a_long_one_started_first() -> None:
    long_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=2.0, deadline=3.0)
    short_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.15, deadline=3.0)
    async with _client(_hangs, long_policy) as client:
        long_call = asyncio.ensure_future(client.get("http://upstream.test/long"))
        await asyncio.sleep(0.02)  # the watchdog is armed for the long attempt first
        started = time.monotonic()
        with pytest.raises(retrysafe.TransportError):
            await client.get("http://upstream.test/short", policy=short_policy)
        assert time.monotonic() - started < 1.0
        assert not long_call.done()
        long_call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long_call


async def test_a_call_that_ended_in_time_is_never_cancelled_later() -> None:
    async def answers(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)
        return httpx.Response(200, content=b"ok")

    policy = retrysafe.RetryPolicy(attempt_timeout=0.05, deadline=1.0)
    async with _client(answers, policy) as client:
        for _ in range(20):
            assert (await client.get("http://upstream.test/")).status_code == 200
        # Past every attempt's end: the watchdog's timer fires, finds nothing due.
        await asyncio.sleep(0.3)
    dog = watchdog(asyncio.get_running_loop())
    assert not dog._watches


async def test_nested_attempts_that_end_together_each_see_their_own_timeout() -> None:
    inner_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=1.0)
    outer_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=1.0)
    inner_errors: list[BaseException] = []

    async with _client(_hangs, inner_policy) as inner:

        async def calls_inner(request: httpx.Request) -> httpx.Response:
            try:
                await inner.get("http://inner.test/")
            except BaseException as error:
                inner_errors.append(error)
                raise
            return httpx.Response(200)

        async with _client(calls_inner, outer_policy) as outer:
            with pytest.raises(retrysafe.ApiError):
                await outer.get("http://outer.test/")
    assert inner_errors  # the inner call ended, one way or the other, inside the outer one
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_an_attempt_that_starts_after_the_timer_was_armed_still_ends_on_time() -> None:
    async def answers(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            await asyncio.sleep(3600)
        return httpx.Response(200, content=b"ok")

    quick = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=1.0)
    slower = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.4, deadline=1.0)
    async with _client(answers, quick) as client:
        # Arms the timer for this attempt's end; it answers at once and is forgotten.
        assert (await client.get("http://upstream.test/fast")).status_code == 200
        # Ends later than the armed timer: the timer, finding nothing due, re-arms for it.
        started = time.monotonic()
        with pytest.raises(retrysafe.TransportError):
            await client.get("http://upstream.test/slow", policy=slower)
        assert 0.3 <= time.monotonic() - started < 1.5
