"""What the SQL stores share: the table's name, the columns a record is read from, and
when to purge lapsed records."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Awaitable
from typing import Protocol

import anyio

from retrysafe.idempotency.store import StoreUnavailable

__all__ = [
    "DEFAULT_PURGE_EVERY",
    "DEFAULT_PURGE_INTERVAL",
    "DEFAULT_PURGE_LIMIT",
    "DEFAULT_TABLE",
    "RECORD_COLUMNS",
    "PurgeSchedule",
    "check_purge_limit",
    "check_table_name",
]

#: The table both SQL stores use unless told otherwise.
DEFAULT_TABLE = "retrysafe_idempotency"

#: The columns :func:`retrysafe.idempotency.records.record_from_fields` decodes, in order.
RECORD_COLUMNS = "state, fingerprint, expires_at, status, headers, body"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_table_name(table: str) -> str:
    """Return ``table`` if it is a plain SQL identifier; it is spliced into statements."""
    if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
        raise ValueError(f"table must be a plain SQL identifier, got {table!r}")
    return table


#: A purge runs after this many claims by one store object...
DEFAULT_PURGE_EVERY = 100
#: ...or once this many seconds of the claims' ``now`` have passed since the last one.
DEFAULT_PURGE_INTERVAL = 60.0
#: Rows one purge deletes at most. Above DEFAULT_PURGE_EVERY, since each claim adds at
#: most one row: steady purging removes lapsed rows faster than claims can add them.
DEFAULT_PURGE_LIMIT = 500


def check_purge_limit(limit: int | None) -> int | None:
    """Return ``limit`` if it is None or a positive row count."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"purge_limit must be a positive number of rows, got {limit!r}")
    return limit


logger = logging.getLogger("retrysafe.idempotency")


class Purge(Protocol):
    """A store's ``purge_expired``."""

    def __call__(self, *, now: float, limit: int | None = None) -> Awaitable[int]: ...


class PurgeSchedule:
    """Says which claims should also purge: every ``every`` claims, or the first claim
    whose ``now`` is ``interval`` seconds past the last purge (and the very first claim).

    ``None`` turns either trigger off; both off means claims never purge. Thread-safe.
    """

    def __init__(self, *, every: int | None, interval: float | None, limit: int) -> None:
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int) or every < 1
        ):
            raise ValueError(
                f"purge_every must be a positive number of claims or None, got {every!r}"
            )
        if interval is not None and not interval > 0:
            raise ValueError(f"purge_interval must be positive seconds or None, got {interval!r}")
        checked = check_purge_limit(limit)
        assert checked is not None
        self.every = every
        self.interval = interval
        self.limit: int = checked
        self._lock = threading.Lock()
        self._claims = 0
        self._last: float | None = None

    def due(self, now: float) -> bool:
        """Count one claim made at ``now``; True when it should purge (and the count restarts)."""
        if self.every is None and self.interval is None:
            return False
        with self._lock:
            self._claims += 1
            by_count = self.every is not None and self._claims >= self.every
            by_time = self.interval is not None and (
                self._last is None or now - self._last >= self.interval
            )
            if not (by_count or by_time):
                return False
            self._claims = 0
            self._last = now
            return True

    async def purge_if_due(self, now: float, purge: Purge) -> None:
        """Count a claim made at ``now`` and, when due, delete one bounded batch.

        Called after the claim is committed and its answer in hand: a failed purge is
        logged and left to the next one, and cancellation waits for this one batch.
        """
        if not self.due(now):
            return
        with anyio.CancelScope(shield=True):
            try:
                await purge(now=now, limit=self.limit)
            except StoreUnavailable as exc:
                logger.warning("purging lapsed idempotency records failed: %s", exc)
