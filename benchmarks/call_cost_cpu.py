"""Added CPU time per successful call of retrysafe.Client over a bare httpx.Client.

A small, steady measure for comparing two versions of retrysafe on a shared machine:
batches are timed with this thread's CPU time (time spent preempted by other processes
is not counted), interleaved bare/retrysafe, on ``httpx.MockTransport`` (no I/O).
Prints the median added microseconds per call, sync then async. To compare two trees,
run it alternately under each::

    git archive main src | tar -x -C /tmp/main_src
    for i in 1 2 3 4 5; do
        PYTHONPATH=/tmp/main_src/src .venv/bin/python benchmarks/call_cost_cpu.py
        PYTHONPATH=src .venv/bin/python benchmarks/call_cost_cpu.py
    done
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time

import httpx

import retrysafe

URL = "http://api.test/x"


def mock() -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(200, content=b"ok"))


def main() -> None:
    bare, client = httpx.Client(transport=mock()), retrysafe.Client(transport=mock())
    async_bare = httpx.AsyncClient(transport=mock())
    async_client = retrysafe.AsyncClient(transport=mock())
    loop = asyncio.new_event_loop()

    def batch(target: httpx.Client, calls: int = 200) -> float:
        started = time.thread_time_ns()
        for _ in range(calls):
            target.get(URL)
        return (time.thread_time_ns() - started) / calls / 1000

    def async_batch(target: httpx.AsyncClient, calls: int = 200) -> float:
        async def run() -> float:
            started = time.thread_time_ns()
            for _ in range(calls):
                await target.get(URL)
            return (time.thread_time_ns() - started) / calls / 1000

        return loop.run_until_complete(run())

    for _ in range(3):  # warm-up
        batch(bare), batch(client), async_batch(async_bare), async_batch(async_client)
    sync_added, async_added = [], []
    for _ in range(25):
        gc.collect()
        sync_added.append(batch(client) - batch(bare))
        async_added.append(async_batch(async_client) - async_batch(async_bare))
    print(
        f"retrysafe {retrysafe.__file__}: added µs/call (CPU) "
        f"sync {statistics.median(sync_added):.2f}, async {statistics.median(async_added):.2f}"
    )
    loop.close()


if __name__ == "__main__":
    main()
