"""A hedged async call cancelled from outside as its round winds down its losing copies.

When a copy has won, the round cancels the others and waits for them to stop. A caller's
own timeout (``asyncio.timeout``, ``Task.cancel()``) landing in that wait used to leave the
winner's answer to no one: for a stream, unread and unclosed, its connection busy and its
request queued in the pool for ever, one slot lost per such cancel (review51). The round
now closes it.

The caller's timeout is made to land there every time: the caller's task is cancelled as
the round cancels a losing copy.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

import retrysafe
from local_http import AnswersOk, serving
from retrysafe import hedged_shell
from retrysafe.pool_repair import stranded


class FirstCopySlow(AnswersOk):
    """Each call's first request waits 0.3 s, so its hedged copy wins."""

    lock = threading.Lock()
    count = 0

    def do_GET(self) -> None:
        with FirstCopySlow.lock:
            FirstCopySlow.count += 1
            first = FirstCopySlow.count % 2 == 1
        if first and self.path == "/":
            time.sleep(0.3)
        super().do_GET()


def test_a_cancel_as_the_losers_wind_down_loses_no_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caller: dict[str, asyncio.Task[None]] = {}
    cancel_copy = hedged_shell._Copy.cancel

    def cancel_the_caller_too(copy: hedged_shell._Copy) -> None:
        cancel_copy(copy)
        task = caller.pop("task", None)
        if task is not None:
            task.cancel()

    monkeypatch.setattr(hedged_shell._Copy, "cancel", cancel_the_caller_too)
    FirstCopySlow.count = 0

    async def run(url: str) -> tuple[int, list[bool], int]:
        limits = httpx.Limits(max_connections=2, keepalive_expiry=None)
        policy = retrysafe.RetryPolicy(hedge_after=0.05)
        timeout = httpx.Timeout(5.0, pool=1.0)
        async with retrysafe.AsyncClient(limits=limits, policy=policy, timeout=timeout) as client:

            async def call() -> None:
                caller["task"] = asyncio.current_task()  # type: ignore[assignment]
                async with client.stream("GET", url + "/") as response:
                    await response.aread()

            cancelled = 0
            for _ in range(2):
                try:
                    await asyncio.create_task(call())
                except asyncio.CancelledError:
                    cancelled += 1
            caller.clear()
            pool = client._transport.transport._pool  # type: ignore[attr-defined]
            lost = [stranded(connection) for connection in pool._connections]
            queued = len(pool._requests)
            # Both slots still serve (before: the next call failed, PoolTimeout).
            answered = await client.get(url + "/next")
            assert answered.status_code == 200
            return cancelled, lost, queued

    with serving(FirstCopySlow) as url:
        cancelled, lost, queued = asyncio.run(run(url))

    assert cancelled == 2
    assert queued == 0
    assert not any(lost)
