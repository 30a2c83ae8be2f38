"""The SQLite files that keep responses and operations are their owner's alone.

The store keeps each key's response, headers and body; the journal keeps each
operation's key and what identifies its request. A new file, and the ``-wal`` and
``-shm`` files SQLite makes beside it, are readable and writable by the owner only,
whatever the process's umask. A file that already exists keeps its permissions.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from retrysafe.idempotency import SQLiteStore
from retrysafe.idempotency.journal import Journal


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The umask most machines have: new files readable by everyone."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def modes(folder: Path) -> dict[str, int]:
    return {path.name: stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()}


@pytest.mark.usefixtures("open_umask")
def test_a_new_store_file_and_its_wal_are_the_owners_only(tmp_path: Path) -> None:
    async def claim_and_look() -> dict[str, int]:
        store = SQLiteStore(tmp_path / "keys.db")
        try:
            await store.claim("caller", "key", "fingerprint", now=0.0, lease=30.0)
            return modes(tmp_path)  # (while open: the -wal and -shm files are there)
        finally:
            await store.close()

    seen = asyncio.run(claim_and_look())
    assert {"keys.db", "keys.db-wal", "keys.db-shm"} <= set(seen)
    assert set(seen.values()) == {0o600}


@pytest.mark.usefixtures("open_umask")
def test_a_new_journal_file_and_its_wal_are_the_owners_only(tmp_path: Path) -> None:
    with Journal(tmp_path / "operations.db") as journal:
        journal.begin("charge-1", httpx.Request("POST", "https://api.test/charges", content=b"{}"))
        seen = modes(tmp_path)
    assert {"operations.db", "operations.db-wal", "operations.db-shm"} <= set(seen)
    assert set(seen.values()) == {0o600}


@pytest.mark.usefixtures("open_umask")
def test_a_file_that_exists_keeps_its_permissions(tmp_path: Path) -> None:
    shared = tmp_path / "shared.db"
    shared.touch(mode=0o640)
    shared.chmod(0o640)
    Journal(shared).close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640


@pytest.mark.usefixtures("open_umask")
def test_a_file_uri_names_the_file_that_is_made_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Journal("file:operations.db").close()  # (SQLite reads a file: name as a URI)
    assert stat.S_IMODE((tmp_path / "operations.db").stat().st_mode) == 0o600
