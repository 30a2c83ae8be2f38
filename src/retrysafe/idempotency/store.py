"""The protocol every idempotency store implements, and the one error stores raise."""

from __future__ import annotations

import secrets
from typing import Protocol, runtime_checkable

from retrysafe.idempotency.records import Claimed, IdempotencyRecord, StoredResponse

__all__ = ["IdempotencyStore", "StoreUnavailable", "new_token"]


class StoreUnavailable(Exception):
    """The store could not be reached or did not answer; the middleware fails closed (503).

    Attributes:
        store: the store's class name.
        reason: what went wrong, in one line.
    """

    def __init__(self, store: str, reason: str) -> None:
        super().__init__(f"{store} is unavailable: {reason}")
        self.store = store
        self.reason = reason


@runtime_checkable
class IdempotencyStore(Protocol):
    """Atomic storage of idempotency records keyed by (caller scope, key).

    Time is passed in (``now``, wall-clock seconds) rather than read by the store, so one
    injected clock governs leases and retention; servers sharing a store need clocks
    that agree to well within the lease. Every method raises
    :class:`StoreUnavailable` when the backend cannot be used.
    """

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, now: float, lease: float
    ) -> Claimed | IdempotencyRecord:
        """Atomically take the key unless a live record holds it.

        Returns :class:`Claimed` when the key was free or its record had lapsed
        (``expires_at <= now``); the new record is in flight until ``now + lease``.
        Otherwise returns the live record untouched.
        """
        ...

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
        """Finish a claim: keep ``response`` for replay until ``now + ttl``.

        ``response=None`` keeps a ``not_replayable`` record instead. Returns ``False``,
        changing nothing, when ``token`` no longer owns the key: another claim took it
        over, or the lapsed claim was removed (stores may remove lapsed records any time).
        Completing again with the same token and outcome changes nothing and returns
        ``True``, so a write whose reply was lost can be retried.
        """
        ...

    async def extend(self, scope: str, key: str, token: str, *, now: float, lease: float) -> bool:
        """Renew a claim still in flight: it now holds the key until ``now + lease``.

        Atomic and fenced like :meth:`complete`: returns ``False``, changing nothing, when
        ``token`` no longer owns an in-flight record for the key.
        """
        ...

    async def release(self, scope: str, key: str, token: str) -> bool:
        """Give the key up so a repeat runs afresh; ``False`` if ``token`` no longer owns it."""
        ...

    async def close(self) -> None:
        """Release connections; later calls raise :class:`StoreUnavailable`."""
        ...


def new_token() -> str:
    """A fresh, unguessable owner token for one claim."""
    return secrets.token_hex(16)
