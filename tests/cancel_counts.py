"""How a task's cancel comes out of code it awaited, as asyncio counts it
(``Task.cancelling``, Python 3.11+): for tests that a cancel from outside is neither lost
nor taken back on its way through retrysafe (anyio 4.16 took it back where a scope of
another task handed its pending cancels to a task group)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

__all__ = ["count_after_a_cancel", "end_of_a_timeout_cancelled_as_it_runs_out"]


async def count_after_a_cancel(work: Callable[[], Awaitable[object]], after: float) -> int:
    """Run ``work()`` in a task of its own, cancel it ``after`` seconds, and give the
    task's count of cancels once it ended cancelled (1: the cancel was kept)."""

    async def running() -> object:
        return await work()

    task = asyncio.create_task(running())
    await asyncio.sleep(after)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return task.cancelling()


async def end_of_a_timeout_cancelled_as_it_runs_out(
    work: Callable[[], Awaitable[object]], seconds: float
) -> str:
    """Run ``work()`` in a task of its own under ``asyncio.timeout(seconds)``, the task
    cancelled from outside in the turn the timeout runs out (two cancels, one error), and
    say how it ended: ``"CancelledError"`` when the outside cancel is kept,
    ``"TimeoutError"`` when the timeout took it for its own."""

    async def under_the_timeout() -> str:
        task = asyncio.current_task()
        assert task is not None
        try:
            async with asyncio.timeout(seconds) as limit:
                when = limit.when()
                assert when is not None
                asyncio.get_running_loop().call_at(when, task.cancel)  # (the same turn)
                await work()
        except TimeoutError:
            return "TimeoutError"
        except asyncio.CancelledError:
            return "CancelledError"
        return "returned"

    return await asyncio.create_task(under_the_timeout())
