"""Switch a SQLite file to WAL mode while other processes may be opening it at once."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable

__all__ = ["enter_wal_mode"]

#: Longest pause, in seconds, between two tries: the other process holds its lock only
#: for the moment its own switch takes.
_LONGEST_PAUSE = 0.01


def enter_wal_mode(
    connection: sqlite3.Connection,
    *,
    within: float,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> None:
    """Set ``journal_mode = WAL`` on ``connection``, asking again for up to ``within``
    seconds while another process holds the file's lock.

    Two processes that switch a new database file to WAL at the same moment deadlock on
    its locks, and SQLite fails one of them at once with "database is locked", without
    calling the busy handler: the connection's ``timeout`` does not help. Measured with
    two processes opening 300 new files together, about one open in seven failed that
    way. A short pause and a second try do help: by then the other process has switched
    the file, and this one finds it in WAL mode already. Any other error is raised at once.
    (``monotonic`` and ``sleep``: the clock it gives up by and waits with, for tests.)
    """
    give_up_at = monotonic() + within
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or monotonic() >= give_up_at:
                raise
        # Jittered, so two processes that collided do not collide again in step.
        sleep(random.uniform(0.001, _LONGEST_PAUSE))
