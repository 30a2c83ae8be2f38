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

import contextlib
import socket
import time
from typing import Any

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


async def test_a_wait_cut_beside_another_hosts_hanging_handshake_is_no_connect_timeout() -> None:
    """One pool serves every host a client calls. Host B hangs in its TLS handshake while
    a call to host A waits in the pool and is cut: A's outcome is the client's own queue
    (pool_timeout, neutral), not a connect timeout told to A's breaker."""
    hanging = socket.socket()  # host B: takes the TCP connection, never answers TLS
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(16)
    port = hanging.getsockname()[1]
    transport = httpx.AsyncHTTPTransport()
    real = transport._pool.handle_async_request

    async def waits_for_host_a(request: Any) -> Any:
        if request.url.host == b"a.test":
            await anyio.sleep(3600)  # (a wait in the pool that keeps starting over)
        return await real(request)

    transport._pool.handle_async_request = waits_for_host_a  # type: ignore[method-assign]
    try:
        async with retrysafe.AsyncClient(
            transport=transport,
            policy=RetryPolicy(attempts=1, attempt_timeout=0.3, deadline=5.0),
            governor=retrysafe.Governor(retrysafe.GovernorSettings(budget=None)),
        ) as client:

            async def to_host_b() -> None:
                with contextlib.suppress(Exception):
                    await client.get(f"https://127.0.0.1:{port}/", timeout=5)

            async with anyio.create_task_group() as group:
                group.start_soon(to_host_b)
                await anyio.sleep(0.2)  # (B's connection is being opened now)
                with pytest.raises(retrysafe.ApiError) as caught:
                    await client.get("http://a.test/")
                group.cancel_scope.cancel()
    finally:
        hanging.close()
    assert [record.outcome for record in caught.value.history] == ["pool_timeout"]
