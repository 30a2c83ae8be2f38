"""An async attempt ends at its time even while it waits in httpcore's pool.

On httpx's own transport the network backend ends every read and write of an attempt at
its end, but httpcore's wait for a connection is not a read: when the connection it was
given turns out taken by another request, it waits again, with the whole pool timeout
each time. A load trial (100 calls at once on 100 keep-alive connections to a healthy
server) saw attempts of 0.5 s wait there for up to 4 s, and calls overrun a 2 s deadline
by 2 s. Here the pool's wait never ends at all, as such a wait can; wall-clock tests,
short, asserting bounds.

A wait cut just as another request ends, and so handed a connection made for it, used
to leave that connection in the pool for ever, never opened (encode/httpcore#1093): a
load trial's pool of 4 connections lost them all and failed every later call unsent.
Here that moment is made to happen every time.
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

import anyio
import httpcore
import httpx
import pytest
from httpcore._async import connection_pool
from tests.local_http import AnswersOk, serving

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


class _Busy(httpcore.AsyncConnectionInterface):
    """A connection in use by another request, never free."""

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        raise httpcore.ConnectionNotAvailable()

    def can_handle_request(self, origin: httpcore.Origin) -> bool:
        return True

    def is_available(self) -> bool:
        return False

    def has_expired(self) -> bool:
        return False

    def is_idle(self) -> bool:
        return False

    def is_closed(self) -> bool:
        return False

    async def aclose(self) -> None:
        pass

    def info(self) -> str:
        return "busy"


@pytest.mark.parametrize("through", ["direct", "proxy"])
async def test_a_wait_cut_as_it_is_handed_a_new_connection_leaves_no_slot_behind(
    monkeypatch: pytest.MonkeyPatch, through: str
) -> None:
    """Room for one connection, held by another request, which ends at the very moment
    the waiting attempt is cut: its slot goes to the waiting request, handed a new
    connection made for it, and cut all the same. (Through a proxy, the connection wraps
    one to the proxy.)"""
    with serving(AnswersOk) as url:
        transport = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=1), proxy=url if through == "proxy" else None
        )
        target = url if through == "direct" else "http://target.test/"
        pool: Any = transport._pool
        busy = _Busy()
        pool._connections = [busy]

        class EndsAsTheWaitIsCut(connection_pool.AsyncEvent):  # type: ignore[name-defined,misc]
            async def wait(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
                try:
                    await super().wait(timeout)
                except BaseException:
                    if busy in pool._connections:  # (as the ending request would, no await)
                        pool._connections.remove(busy)
                        pool._assign_requests_to_connections()
                    raise

        monkeypatch.setattr(connection_pool, "AsyncEvent", EndsAsTheWaitIsCut)
        async with retrysafe.AsyncClient(
            transport=transport,
            policy=RetryPolicy(attempts=1, attempt_timeout=0.2, deadline=5.0),
            governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
        ) as client:
            with pytest.raises(retrysafe.ApiError) as caught:
                await client.get(target)
            assert caught.value.history[0].outcome == "pool_timeout"
            stranded = [  # (neither idle, closed nor available: httpcore keeps it for ever)
                c
                for c in pool._connections
                if not (c.is_idle() or c.is_closed() or c.is_available())
            ]
            assert stranded == []  # (before: the new connection, for ever)
            assert pool._requests == []
            monkeypatch.undo()
            started = time.monotonic()
            assert (await client.get(target)).status_code == 200  # the slot is there to use
            assert time.monotonic() - started < 0.2 + 0.3
