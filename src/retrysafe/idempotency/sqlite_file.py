"""SQLite files that only their owner can read.

The idempotency store keeps each key's response (body and headers) and the client
journal keeps each operation's key and what identifies its request: neither is for
other users of the machine. SQLite creates a new database file with the process's
umask (usually readable by everyone) and gives its ``-wal`` and ``-shm`` files the
database file's permissions; so a new file is created here first, readable and
writable by its owner only. A file that already exists keeps the permissions it has.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from pathlib import Path

__all__ = ["create_private"]

_OWNER_ONLY = 0o600


def create_private(path: str | Path) -> None:
    """Create the database file ``path`` for its owner only, unless it exists already
    (or is no file: SQLite's ``:memory:``, an empty name, a ``mode=memory`` URI). A
    ``file:`` URI, which SQLite reads as one, names the file by its path."""
    name = os.fspath(path)
    if name.startswith("file:"):
        uri = urllib.parse.urlsplit(name)
        if "mode=memory" in uri.query:
            return
        name = urllib.parse.unquote(uri.path)
    if not name or name == ":memory:":
        return
    # (it exists: kept as it is; any other failure, a missing folder say, is SQLite's to
    # report when it opens the file, in the store's or journal's own error)
    with contextlib.suppress(OSError):
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _OWNER_ONLY))
