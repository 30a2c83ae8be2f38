"""The chaos server's memory: attempt counters, the request log and per-endpoint state.

All state is keyed by the ``key`` every endpoint takes, so tests running against one
shared server never see each other's attempts, buckets or ledgers. The server's event
loop is the only writer; tests read the same object from their own thread, so every
read and every multi-step decision holds :attr:`ChaosState.lock`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from retrysafe.chaos.limiter import TokenBucket

__all__ = [
    "CapacityPool",
    "ChaosRecord",
    "ChaosState",
    "RetryAfterGate",
    "StoredReply",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ChaosRecord:
    """One request as the chaos server saw it, and what the server did about it.

    ``time`` is ``time.monotonic()`` of the server process at arrival (the same clock a
    test in that process reads), so gaps between attempts can be measured exactly.
    ``action`` says what the reply was: ``"status:503"``, ``"reset"``, ``"close"``,
    ``"truncate"``, ``"hang"``, ``"early"`` (refused again for ignoring Retry-After),
    ``"drip"``, ``"sse"`` or ``"malformed:<kind>"``. ``detail`` adds what the endpoint
    did besides replying: ``"applied"``, ``"replayed"`` or ``"conflict"`` for idempotent
    writes, ``"served"`` or ``"shed"`` for ``/capacity``, ``"after N ms"`` for ``/delay``,
    ``"hop N of H"`` for ``/redirect-chain``, ``"N events every M ms"`` for streams;
    empty otherwise. Requests refused for invalid parameters (400), unknown paths and
    control-plane requests are not recorded.
    """

    time: float
    method: str
    path: str
    query: str
    endpoint: str
    key: str
    attempt: int
    idempotency_key: str | None
    body_sha256: str
    action: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict (the shape ``/_chaos/log`` returns)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(slots=True)
class RetryAfterGate:
    """When a key of ``/retry-after`` may come back (monotonic), and whether it was served."""

    not_before: float
    served: bool = False


@dataclasses.dataclass(slots=True)
class CapacityPool:
    """Requests in flight for one ``/capacity/{pool}``; requests hold the object they joined."""

    in_flight: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class StoredReply:
    """The reply an idempotent write committed, replayed for repeats of its key."""

    status: int
    body: bytes
    body_sha256: str


class ChaosState:
    """Everything the chaos app remembers between requests, safe to read from any thread.

    ``monotonic`` and ``wall_time`` are the clocks for durations (Retry-After enforcement,
    token buckets, outages) and for HTTP-dates; a simulation may pass its own.
    """

    def __init__(
        self,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall_time: Callable[[], float] = time.time,
    ) -> None:
        self.monotonic = monotonic
        self.wall_time = wall_time
        #: Held for every read and every read-decide-write step on the fields below.
        self.lock = threading.RLock()
        self._clear()

    def _clear(self) -> None:
        self.attempts: dict[tuple[str, str], int] = {}
        self.records: list[ChaosRecord] = []
        self.retry_after_gates: dict[str, RetryAfterGate] = {}
        self.buckets: dict[tuple[str, str], TokenBucket] = {}
        self.outage_starts: dict[str, float] = {}
        self.pools: dict[tuple[str, str], CapacityPool] = {}
        self.ledgers: dict[tuple[str, str], dict[str, int]] = {}
        self.stored_replies: dict[tuple[str, str, str], StoredReply] = {}
        self.write_requests: dict[tuple[str, str, str], int] = {}
        #: The fake Stripe's replay store: the first body and its reply per (state key,
        #: Idempotency-Key).
        self.stripe_replies: dict[tuple[str, str], tuple[bytes, dict[str, object]]] = {}
        self.next_write_id = 1

    def reset(self) -> None:
        """Forget every counter, log record, bucket, ledger and stored reply."""
        with self.lock:
            self._clear()

    def next_attempt(self, endpoint: str, key: str) -> int:
        """Count one more request for ``(endpoint, key)`` and return its 1-based number."""
        with self.lock:
            attempt = self.attempts.get((endpoint, key), 0) + 1
            self.attempts[(endpoint, key)] = attempt
            return attempt

    def append(self, record: ChaosRecord) -> None:
        """Add ``record`` to the request log."""
        with self.lock:
            self.records.append(record)

    def log(self, key: str | None = None) -> list[ChaosRecord]:
        """The request log, only ``key``'s records when a key is given.

        Records are in the order the server decided each reply (once the request body
        was read), which is arrival order for all practical purposes.
        """
        with self.lock:
            return [record for record in self.records if key is None or record.key == key]

    def ledger(self, resource: str, key: str = "") -> dict[str, int]:
        """Side effects applied on ``/idempotent/{resource}`` for ``key``, per Idempotency-Key.

        Writes sent without an Idempotency-Key are counted under ``""``.
        """
        with self.lock:
            return dict(self.ledgers.get((key, resource), {}))
