"""An async transport retrysafe cannot reach into is still held to each attempt's time.

httpx's own transport has its network reads bounded at the attempt's end; any other
async transport (a mock, a proxy client, an adapter) runs under a time limit instead:
asyncio's own timeout on asyncio, anyio's cancel scope on trio. Either way the attempt
ends as a timeout the engine can retry, and a caller's own cancellation is never
mistaken for one.
"""

from __future__ import annotations

import time

import anyio
import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy

pytestmark = pytest.mark.anyio


def _slow_then_fast(sent: list[float]) -> httpx.MockTransport:
    """The first attempt hangs for 10 s; later ones answer at once."""

    async def handler(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        if len(sent) == 1:
            await anyio.sleep(10)
        return httpx.Response(200, content=b"ok")

    return httpx.MockTransport(handler)


async def test_a_hanging_attempt_ends_at_its_timeout_and_is_retried() -> None:
    sent: list[float] = []
    policy = RetryPolicy(attempts=2, attempt_timeout=0.2, backoff_base=0.01, deadline=5)
    transport = retrysafe.AsyncRetryTransport(_slow_then_fast(sent), policy=policy)
    async with httpx.AsyncClient(transport=transport) as client:
        started = time.monotonic()
        response = await client.get("http://api.test/")
        took = time.monotonic() - started
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert [record.outcome for record in report.history] == ["attempt_timeout", "success"]
    assert 0.2 <= took < 2.0


async def test_the_callers_cancellation_is_not_turned_into_a_timeout() -> None:
    sent: list[float] = []
    policy = RetryPolicy(attempts=3, attempt_timeout=5, deadline=10)
    transport = retrysafe.AsyncRetryTransport(_slow_then_fast(sent), policy=policy)
    async with httpx.AsyncClient(transport=transport) as client:
        started = time.monotonic()
        with anyio.move_on_after(0.2) as scope:
            await client.get("http://api.test/")
        took = time.monotonic() - started
    assert scope.cancelled_caught
    assert len(sent) == 1  # cancelled, not retried as if the attempt had timed out
    assert took < 2.0
