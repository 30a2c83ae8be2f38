"""MemoryStore: idempotency records in a dict, for tests and single-process servers."""

from __future__ import annotations

import dataclasses
import threading

from retrysafe.idempotency.records import (
    Claimed,
    IdempotencyRecord,
    RecordState,
    StoredResponse,
)
from retrysafe.idempotency.store import StoreUnavailable, new_token

__all__ = ["MemoryStore"]

#: Lapsed records are swept out once per this many claims.
_SWEEP_EVERY = 256


@dataclasses.dataclass(frozen=True)
class _Entry:
    record: IdempotencyRecord
    token: str


class MemoryStore:
    """Records in process memory: fast, but private to one process and lost on restart.

    Use it in tests and for single-process servers only; several worker processes need a
    shared store (:class:`SQLiteStore`, :class:`RedisStore`, :class:`PostgresStore`).
    Safe to share between threads and event loops: each operation holds a lock briefly.
    Lapsed records are swept out every few hundred claims, so memory stays bounded by
    the records still live.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._claims_until_sweep = _SWEEP_EVERY
        self._closed = False

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, now: float, lease: float
    ) -> Claimed | IdempotencyRecord:
        with self._lock:
            self._check_open()
            self._sweep_now_and_then(now)
            entry = self._entries.get((scope, key))
            if entry is not None and entry.record.expires_at > now:
                return entry.record
            token = new_token()
            record = IdempotencyRecord("in_flight", fingerprint, now + lease)
            self._entries[(scope, key)] = _Entry(record, token)
            return Claimed(token)

    async def complete(
        self,
        scope: str,
        key: str,
        token: str,
        response: StoredResponse | None,
        *,
        now: float,
        ttl: float,
    ) -> bool:
        state: RecordState = "completed" if response is not None else "not_replayable"
        with self._lock:
            self._check_open()
            entry = self._entries.get((scope, key))
            if entry is None or entry.token != token:
                return False
            if entry.record.state != "in_flight":
                return entry.record.state == state  # already completed by this claim
            record = IdempotencyRecord(state, entry.record.fingerprint, now + ttl, response)
            self._entries[(scope, key)] = _Entry(record, token)
            return True

    async def extend(self, scope: str, key: str, token: str, *, now: float, lease: float) -> bool:
        with self._lock:
            self._check_open()
            entry = self._entries.get((scope, key))
            if entry is None or entry.token != token or entry.record.state != "in_flight":
                return False
            record = dataclasses.replace(entry.record, expires_at=now + lease)
            self._entries[(scope, key)] = _Entry(record, token)
            return True

    async def release(self, scope: str, key: str, token: str) -> bool:
        with self._lock:
            self._check_open()
            entry = self._entries.get((scope, key))
            if entry is None or entry.token != token or entry.record.state != "in_flight":
                return False
            del self._entries[(scope, key)]
            return True

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            self._entries.clear()

    def _sweep_now_and_then(self, now: float) -> None:
        self._claims_until_sweep -= 1
        if self._claims_until_sweep > 0:
            return
        self._claims_until_sweep = _SWEEP_EVERY
        lapsed = [place for place, entry in self._entries.items() if entry.record.expires_at <= now]
        for place in lapsed:
            del self._entries[place]

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable("MemoryStore", "the store is closed")

    def __repr__(self) -> str:
        return f"MemoryStore(records={len(self._entries)})"
