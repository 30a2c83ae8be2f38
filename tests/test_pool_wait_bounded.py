"""An async attempt ends at its time even while it waits in httpcore's pool.

On httpx's own transport the network backend ends every read and write of an attempt at
its end, but httpcore's wait for a connection is not a read: when the connection it was
given turns out taken by another request, it waits again, with the whole pool timeout
each time. A load trial (100 calls at once on 100 keep-alive connections to a healthy
server) saw attempts of 0.5 s wait there for up to 4 s, and calls overrun a 2 s deadline
by 2 s. Here the pool's wait never ends at all, as such a wait can; wall-clock tests,
short, asserting bounds.
"""

from __future__ import annotations

import time

import anyio
import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]


def _waiting_for_ever() -> httpx.AsyncHTTPTransport:
    """httpx's own transport, whose pool waits for a connection that never comes free."""
    transport = httpx.AsyncHTTPTransport()

    async def waits(request: object) -> object:
        await anyio.sleep(3600)
        raise AssertionError("unreachable")

    transport._pool.handle_async_request = waits  # type: ignore[method-assign]
    return transport


async def test_an_attempt_waiting_in_the_pool_ends_at_its_time_and_the_call_at_its_deadline() -> (
    None
):
    policy = RetryPolicy(attempts=3, attempt_timeout=0.2, deadline=1.0, backoff_base=0.01)
    async with retrysafe.AsyncClient(
        transport=_waiting_for_ever(),
        policy=policy,
        governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
    ) as client:
        started = time.monotonic()
        with pytest.raises(retrysafe.ApiError) as caught:
            await client.get("http://127.0.0.1:9/")
        elapsed = time.monotonic() - started
    history = caught.value.history
    assert len(history) >= 2  # each attempt cut, and retried: it was never sent
    assert {record.outcome for record in history} == {"pool_timeout"}
    assert all(record.elapsed < 0.2 + 0.25 for record in history)  # its time, the slack
    assert elapsed < 1.0 + 0.3
    assert caught.value.processed == "no"


async def test_the_drop_in_transport_ends_a_wait_in_the_pool_at_its_time_too() -> None:
    transport = retrysafe.AsyncRetryTransport(
        _waiting_for_ever(),
        policy=RetryPolicy(attempts=1, attempt_timeout=0.2, deadline=5.0),
        governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
    )
    async with httpx.AsyncClient(transport=transport) as client:
        started = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            await client.get("http://127.0.0.1:9/")
        assert time.monotonic() - started < 0.2 + 0.25
