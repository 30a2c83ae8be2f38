"""The aiohttp middleware tells a wait in the session's own queue for a connection
(``TCPConnector(limit=...)``, ``limit_per_host``) from a connect to the server: an
attempt cut while it waited is a pool timeout, never sent and no news of the server, as
on httpx (trial91: each came out as a connect timeout, and twenty of them opened the
circuit on a healthy server). A connect that ran out of time is still a connect timeout.
Over real loopback sockets.
"""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
import pytest
from tests.local_http import answers_ok_but_holds_streams, loopback_server

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware
from test_client_sockets import full_backlog_url

__all__ = ["full_backlog_url"]

pytestmark = pytest.mark.timeout(30)

#: A call of its own after the waits, patient enough that a busy machine does not time it
#: out: it finds the circuit the waits must not have opened.
PATIENT = RetryPolicy(attempts=1, attempt_timeout=5.0)


async def _outcomes_while_the_one_connection_is_held(
    policy: RetryPolicy, calls: int, method: str, **connector: int
) -> tuple[list[retrysafe.ApiError], int]:
    """``calls`` calls made one after another while a streamed body holds the session's
    one connection, their errors; then the status of a patient call of the same
    governor made once it is free."""
    governor = retrysafe.Governor()
    with loopback_server(answers_ok_but_holds_streams) as url:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(**connector),
            middlewares=(RetryMiddleware(policy=policy, governor=governor, stream=True),),
        ) as session:
            held = await session.get(f"{url}/held")
            errors = []
            try:
                for number in range(calls):
                    with pytest.raises(retrysafe.ApiError) as caught:
                        async with session.request(method, f"{url}/wait-{number}", data=b"x"):
                            pass
                    errors.append(caught.value)
            finally:
                held.close()
            patient = (RetryMiddleware(policy=PATIENT, governor=governor),)
            async with session.get(f"{url}/ok", middlewares=patient) as response:
                return errors, response.status


@pytest.mark.parametrize("connector", [{"limit": 1}, {"limit_per_host": 1}])
def test_waits_for_the_sessions_one_connection_are_pool_timeouts_and_open_no_circuit(
    connector: dict[str, int],
) -> None:
    policy = RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=5.0)
    errors, status_after = asyncio.run(
        _outcomes_while_the_one_connection_is_held(policy, 25, "GET", **connector)
    )
    assert [error.history[-1].outcome for error in errors] == ["pool_timeout"] * 25
    assert status_after == 200


def test_a_keyless_post_that_waited_for_a_connection_was_never_sent_and_is_retried() -> None:
    policy = RetryPolicy(attempts=2, attempt_timeout=0.2, deadline=5.0, backoff_base=0.01)
    errors, _ = asyncio.run(_outcomes_while_the_one_connection_is_held(policy, 2, "POST", limit=1))
    for error in errors:
        assert [record.outcome for record in error.history] == ["pool_timeout"] * 2
        assert error.processed == "no"


def _answers_after_a_second(connection: socket.socket, request: bytes) -> None:
    time.sleep(1.0)
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


def test_a_burst_behind_the_one_connection_is_pool_timeouts_and_opens_no_circuit() -> None:
    """Twenty-five calls at once, on one connection to a server answering in 1 s: the
    call holding it is cut reading, the rest waited. (Cut in the same pass of
    the event loop as the holder, which freed the connection as it was cut, they were
    taken for connect timeouts, and the circuit opened: review87.)"""
    governor = retrysafe.Governor()
    policy = RetryPolicy(attempts=1, attempt_timeout=0.3, deadline=5.0)

    async def burst(url: str) -> tuple[list[str], int]:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1),
            middlewares=(RetryMiddleware(policy=policy, governor=governor),),
        ) as session:

            async def one(number: int) -> str:
                try:
                    async with session.get(f"{url}/{number}"):
                        return "answered"
                except retrysafe.ApiError as error:
                    return error.history[-1].outcome

            outcomes = list(await asyncio.gather(*(one(number) for number in range(25))))
            patient = (RetryMiddleware(policy=PATIENT, governor=governor),)
            async with session.get(f"{url}/after", middlewares=patient) as response:
                return outcomes, response.status

    with loopback_server(_answers_after_a_second) as url:
        outcomes, status_after = asyncio.run(burst(url))
    # (a waiter handed the connection with time left sends, and is cut reading: on a
    # busy machine, one or two; the call that opened the connection may be cut opening
    # it, on a busy machine, and no other call was connecting: CI saw one)
    assert outcomes.count("connect_timeout") <= 1, outcomes
    assert outcomes.count("pool_timeout") >= 20, outcomes
    assert status_after == 200


def test_a_connect_that_runs_out_of_time_beside_a_busy_session_is_a_connect_timeout(
    full_backlog_url: str,
) -> None:
    """A host whose connects hang (its accept queue is full), called while another
    host's streamed body holds one of the session's two connections: the attempt spent
    its time connecting, and the breaker hears of it."""

    async def call() -> str:
        policy = RetryPolicy(attempts=1, attempt_timeout=0.3, deadline=5.0)
        with loopback_server(answers_ok_but_holds_streams) as url:
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=2),
                middlewares=(RetryMiddleware(policy=policy, stream=True),),
            ) as session:
                held = await session.get(f"{url}/held")
                try:
                    with pytest.raises(retrysafe.ApiError) as caught:
                        async with session.get(full_backlog_url):
                            pass
                finally:
                    held.close()
                return caught.value.history[-1].outcome

    assert asyncio.run(call()) == "connect_timeout"
