"""Processes that open one new SQLite file at the same moment all get to use it.

Switching a new file to WAL mode takes a lock two processes can deadlock on, and SQLite
then fails one of them at once, busy timeout or not. Worker processes of one server
start together, so their first requests meet exactly there. The first tests open in two
OS processes released by one barrier, on a fresh file each time; the rest specify the
retry itself on a connection and a clock of their own.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import sqlite3
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from retrysafe.idempotency import SQLiteStore, StoreUnavailable
from retrysafe.idempotency.journal import Journal
from retrysafe.idempotency.sqlite_wal import enter_wal_mode

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
    try:
        for number in range(FILES):
            barrier.wait(timeout=20)
            try:
                opener(directory / f"{number}.sqlite3")
            except (StoreUnavailable, sqlite3.Error) as exc:
                failures.put(f"file {number}: {exc}")
    except BaseException as exc:  # e.g. the other process died: say so, do not hang
        failures.put(f"worker stopped: {exc!r}")
        raise
    finally:
        failures.put("done")


@pytest.mark.parametrize("opener", [claim_in_store, open_journal], ids=["store", "journal"])
def test_two_processes_opening_new_files_together_both_succeed(
    opener: Callable[[Path], None], tmp_path: Path
) -> None:
    # (forkserver: a fork of this process, which pytest's threads share, could deadlock)
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the forkserver start method")
    context = multiprocessing.get_context("forkserver")
    barrier = context.Barrier(2)
    failures: multiprocessing.Queue[str] = context.Queue()
    workers = [
        context.Process(target=open_each_together, args=(opener, tmp_path, barrier, failures))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    reports: list[str] = []
    while reports.count("done") < len(workers):
        reports.append(failures.get(timeout=40))
    for worker in workers:
        worker.join(timeout=10)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert [report for report in reports if report != "done"] == []


class Contended:
    """A connection whose WAL switch finds the file locked ``locked_for`` times first."""

    def __init__(self, locked_for: int, error: str = "database is locked") -> None:
        self.locked_for = locked_for
        self.error = error
        self.tries = 0

    def execute(self, statement: str) -> None:
        assert statement == "PRAGMA journal_mode = WAL"
        self.tries += 1
        if self.tries <= self.locked_for:
            raise sqlite3.OperationalError(self.error)


class Clock:
    """Monotonic seconds that move only when slept."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def switch(connection: Contended, clock: Clock, within: float) -> None:
    enter_wal_mode(
        connection,  # type: ignore[arg-type]
        within=within,
        monotonic=clock.monotonic,
        sleep=clock.sleep,
    )


def test_a_locked_switch_is_tried_again_after_short_pauses_until_it_succeeds() -> None:
    connection, clock = Contended(locked_for=3), Clock()
    switch(connection, clock, within=5.0)
    assert connection.tries == 4
    assert len(clock.slept) == 3
    assert all(0 < pause <= 0.01 for pause in clock.slept)


def test_a_lock_held_past_the_busy_timeout_fails_after_it() -> None:
    connection, clock = Contended(locked_for=10**6), Clock()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        switch(connection, clock, within=0.5)
    assert 0.5 <= clock.now - 100.0 < 0.5 + 0.01


def test_any_other_error_is_raised_at_once() -> None:
    connection, clock = Contended(locked_for=1, error="disk I/O error"), Clock()
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        switch(connection, clock, within=5.0)
    assert connection.tries == 1
    assert clock.slept == []


def test_no_time_to_wait_means_one_try() -> None:
    connection, clock = Contended(locked_for=1), Clock()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        switch(connection, clock, within=0.0)
    assert connection.tries == 1


@pytest.mark.parametrize("busy_timeout", [math.nan, math.inf, -1.0])
def test_a_busy_timeout_that_is_no_finite_wait_is_refused(
    busy_timeout: float, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="busy_timeout must be a finite number of seconds"):
        SQLiteStore(tmp_path / "store.sqlite3", busy_timeout=busy_timeout)


@pytest.mark.parametrize("busy_timeout", ["5", True, None])
def test_a_busy_timeout_that_is_no_number_is_refused(busy_timeout: Any, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="busy_timeout is a number of seconds"):
        SQLiteStore(tmp_path / "store.sqlite3", busy_timeout=busy_timeout)
