"""An attempt that could not connect sent nothing, whatever else happened in the call.

A POST without a key is repeated only after an attempt that never reached the server.
Whether an attempt connected is the attempt's own fact: an earlier attempt that
connected and was answered (a 429, which asks for the request again) must not make a
later attempt's connect timeout look like a request that may have been sent; nor may
an attempt's time running out while it was still connecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

import aiohttp
import pytest
import requests

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware
from retrysafe.requests import RetryAdapter
from test_client_sockets import full_backlog_url

__all__ = ["full_backlog_url"]

_TOO_MANY = (
    b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: 0\r\n"
    b"Connection: close\r\n\r\n"
)


@pytest.fixture
def answers_once_then_cannot_connect() -> Iterator[str]:
    """A loopback URL whose first connection is answered 429; then its accept queue is
    full, so the kernel drops new SYNs: every later connect times out."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers: list[socket.socket] = []

    def answer_once() -> None:
        with contextlib.suppress(OSError):
            connection, _ = server.accept()
            with connection:
                connection.settimeout(5)
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                for _ in range(3):  # (filled before the answer, so before any retry)
                    filler = socket.socket()
                    filler.setblocking(False)
                    with contextlib.suppress(BlockingIOError):
                        filler.connect(("127.0.0.1", port))
                    fillers.append(filler)
                connection.sendall(_TOO_MANY)

    thread = threading.Thread(target=answer_once, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/orders"
    thread.join(5)
    for sock in [*fillers, server]:
        sock.close()


def test_aiohttp_a_post_that_cannot_connect_after_an_answered_attempt_is_retried(
    answers_once_then_cannot_connect: str,
) -> None:
    policy = RetryPolicy(attempts=3, attempt_timeout=0.4, backoff_base=0.01)
    middleware = RetryMiddleware(policy=policy)

    async def run() -> None:
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as session,
            session.post(answers_once_then_cannot_connect, json={"n": 1}) as response,
        ):
            await response.read()

    with pytest.raises(retrysafe.TransportError) as caught:
        asyncio.run(run())
    error = caught.value
    assert (error.reason, error.sent) == ("attempts_exhausted", "no")
    assert [record.outcome for record in error.history][1:] == ["connect_timeout"] * 2


def test_requests_a_post_whose_connect_outlasts_its_attempts_time_was_not_sent(
    full_backlog_url: str,
) -> None:
    """The POST first waits for the pool's one connection (held here for 0.4 s), then
    connects with the attempt's whole timeout: its time runs out while it is still
    connecting. The connect timeout that follows is still a request that never left,
    so the POST is tried again."""
    policy = RetryPolicy(attempts=2, attempt_timeout=1.2, backoff_base=0.01)
    adapter = RetryAdapter(policy=policy, pool_maxsize=1, pool_block=True)
    with requests.Session() as session:
        session.mount("http://", adapter)
        with contextlib.suppress(retrysafe.TransportError):  # (makes the adapter's pool)
            session.post(full_backlog_url, json={"n": 1}, timeout=0.05)
        (pool,) = adapter.poolmanager.pools._container.values()
        held = pool._get_conn()
        give_back = threading.Timer(0.4, pool._put_conn, args=(held,))
        give_back.start()
        try:
            with pytest.raises(retrysafe.TransportError) as caught:
                session.post(full_backlog_url, json={"n": 1})
        finally:
            give_back.join(5)
    error = caught.value
    assert (error.reason, error.sent) == ("attempts_exhausted", "no")
    assert [record.outcome for record in error.history] == ["connect_timeout"] * 2
