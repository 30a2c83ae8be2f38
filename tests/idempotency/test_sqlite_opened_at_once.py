"""Processes that open one new SQLite file at the same moment all get to use it.

Switching a new file to WAL mode takes a lock two processes can deadlock on, and SQLite
then fails one of them at once, busy timeout or not. Worker processes of one server
start together, so their first requests meet exactly there: every open below happens
in two OS processes released by one barrier, on a fresh file each time.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import tempfile
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from retrysafe.idempotency import SQLiteStore, StoreUnavailable
from retrysafe.idempotency.journal import Journal

#: New files each process opens; before the fix about one open in seven failed.
FILES = 60


def claim_in_store(path: Path) -> None:
    """A server worker's first keyed request: claim a key in a SQLiteStore."""

    async def claim() -> None:
        store = SQLiteStore(path)
        try:
            await store.claim("caller", "key", "fingerprint", now=0.0, lease=30.0)
        finally:
            await store.close()

    asyncio.run(claim())


def open_journal(path: Path) -> None:
    """A client process starting up: open the operations journal."""
    Journal(path).close()


def open_each_together(
    opener: Callable[[Path], None],
    directory: Path,
    barrier: Barrier,
    failures: multiprocessing.Queue[str],
) -> None:
    """Open each new file right after the other process is ready to open it too."""
    for number in range(FILES):
        barrier.wait(timeout=30)
        try:
            opener(directory / f"{number}.sqlite3")
        except (StoreUnavailable, sqlite3.Error) as exc:
            failures.put(f"file {number}: {exc}")
    failures.put("done")


@pytest.mark.parametrize("opener", [claim_in_store, open_journal], ids=["store", "journal"])
def test_two_processes_opening_new_files_together_both_succeed(
    opener: Callable[[Path], None],
) -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the fork start method to share the barrier cheaply")
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    failures: multiprocessing.Queue[str] = context.Queue()
    with tempfile.TemporaryDirectory() as directory:
        workers = [
            context.Process(
                target=open_each_together, args=(opener, Path(directory), barrier, failures)
            )
            for _ in range(2)
        ]
        for worker in workers:
            worker.start()
        reports: list[str] = []
        while reports.count("done") < len(workers):
            reports.append(failures.get(timeout=60))
        for worker in workers:
            worker.join(timeout=10)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert [report for report in reports if report != "done"] == []
