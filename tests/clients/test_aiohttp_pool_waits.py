"""The aiohttp middleware tells a wait in the session's own queue for a connection
(``TCPConnector(limit=...)``, ``limit_per_host``) from a connect to the server: an
attempt cut while it waited is a pool timeout, never sent and no news of the server, as
on httpx (trial91: each came out as a connect timeout, and twenty of them opened the
circuit on a healthy server). Over real loopback sockets.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from test_requests_deadline_watch import answers_ok_but_holds_streams, loopback_server

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware

pytestmark = pytest.mark.timeout(30)


async def _outcomes_while_the_one_connection_is_held(
    policy: RetryPolicy, calls: int, method: str, **connector: int
) -> tuple[list[retrysafe.ApiError], int]:
    """``calls`` calls made while a streamed body holds the session's one connection,
    their errors; then the status of a call made once it is free."""
    with loopback_server(answers_ok_but_holds_streams) as url:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(**connector),
            middlewares=(RetryMiddleware(policy=policy, stream=True),),
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
            async with session.get(f"{url}/ok") as response:
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
