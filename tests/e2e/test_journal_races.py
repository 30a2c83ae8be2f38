"""Two processes beginning the same journal operations at once, on one SQLite file.

Each process records the outcome of ``Journal.begin`` for every operation name; the
loser of a race must get what a second ``begin`` in one process gets (the operation,
with the key the winner recorded), never a raw ``sqlite3.IntegrityError``.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx

from retrysafe.idempotency import Journal

PROCESSES = 2
OPERATIONS = 300


def _begin_all(path: str, barrier: Any, results: Any) -> None:
    """Begin every operation in turn, meeting the other process before each one."""
    outcomes: dict[str, str] = {}
    with Journal(path) as journal:
        request = httpx.Request("POST", "https://api.example/payments", json={"amount": 1})
        for index in range(OPERATIONS):
            name = f"pay-{index}"
            barrier.wait(timeout=30)
            try:
                outcomes[name] = "key:" + journal.begin(name, request).key
            except Exception as exc:  # what escapes is the finding
                outcomes[name] = f"raised:{type(exc).__module__}.{type(exc).__name__}: {exc}"
    results.put(outcomes)


def test_concurrent_begins_of_one_operation_in_two_processes_agree_on_one_key(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "ops.sqlite3")
    Journal(path).close()  # the schema exists before the race: only the begins contend
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    workers = [
        context.Process(target=_begin_all, args=(path, barrier, results)) for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    try:
        outcomes = [results.get(timeout=60) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    raised = sorted(
        outcome
        for result in outcomes
        for outcome in result.values()
        if outcome.startswith("raised")
    )
    assert raised == [], f"{len(raised)} begins raised, e.g. {raised[:3]}"
    with closing(sqlite3.connect(path)) as db:
        keys = dict(db.execute("SELECT name, key FROM retrysafe_operations").fetchall())
    assert len(keys) == OPERATIONS
    for result in outcomes:
        assert result == {name: f"key:{key}" for name, key in keys.items()}
