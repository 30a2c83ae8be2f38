"""A claim while its handler runs: renew its lease, then write its outcome, retrying an
unavailable store for as long as the claim is surely still its own."""

from __future__ import annotations

import logging
from typing import Protocol

import anyio

from retrysafe.idempotency.decisions import Finish
from retrysafe.idempotency.records import StoredResponse
from retrysafe.idempotency.settings import IdempotencySettings
from retrysafe.idempotency.store import IdempotencyStore, StoreUnavailable

__all__ = ["FINISH_RETRY_DELAYS", "OUTCOME_RETRY_INTERVAL", "HeldClaim", "WallClock"]

logger = logging.getLogger("retrysafe.idempotency")

#: Seconds to wait before each further try at writing an outcome the store refused with
#: :class:`StoreUnavailable`: a blip costs the client a moment, not a second run.
FINISH_RETRY_DELAYS = (0.05, 0.25, 1.0)

#: Seconds between the further tries at keeping an outcome (the work was done) while the
#: store stays unavailable, until the claim's lease ends (see :meth:`HeldClaim.finish`).
OUTCOME_RETRY_INTERVAL = 1.0


class WallClock(Protocol):
    """Anything with wall-clock ``time()``: :class:`retrysafe.SystemClock`, ``FakeClock``."""

    def time(self) -> float: ...


class HeldClaim:
    """One claim on (caller, key), held by the request whose handler is running.

    :meth:`renew_until_finished` pushes the lease forward every third of its length, so a
    handler that runs longer than the lease keeps the key and never runs twice.
    :meth:`finish` writes the outcome, retrying a store that is unavailable, and stops the
    renewal. Log lines name the caller and the key, never the owner token.

    ``leased_at``: when the store stamped the claim's lease (wall-clock seconds; now if
    not given). The claim knows when its lease ends from it and from each renewal.
    """

    def __init__(
        self,
        store: IdempotencyStore,
        caller: str,
        key: str,
        token: str,
        *,
        clock: WallClock,
        settings: IdempotencySettings,
        leased_at: float | None = None,
    ) -> None:
        self.caller = caller
        self.key = key
        self._store = store
        self._token = token
        self._clock = clock
        self._settings = settings
        self._finished = False
        #: When the lease ends as last stamped (wall-clock seconds): until then no other
        #: request can take the key over, so the handler cannot run again.
        self.lease_ends = (clock.time() if leased_at is None else leased_at) + settings.lease

    async def renew_now(self) -> bool:
        """Renew the lease once, from the current time; ``False`` if the claim was lost.
        Renewed, the lease ends a lease from now (:attr:`lease_ends`).

        Raises :class:`StoreUnavailable` when the store cannot be used.
        """
        now = self._clock.time()
        renewed = await self._store.extend(
            self.caller, self.key, self._token, now=now, lease=self._settings.lease
        )
        if renewed:
            self.lease_ends = max(self.lease_ends, now + self._settings.lease)
        return renewed

    async def renew_until_finished(self) -> None:
        """Renew the lease until :meth:`finish` or :meth:`stop`; run it in a task group,
        and cancel the group's scope from the task that owns it once the handler is over
        (else it ends at its next renewal).

        A store that is briefly unavailable is tried again at the next renewal. A claim
        that was lost (the lease ran out and another request took the key over) is logged
        as an error and renewal stops; the handler runs on, and the fencing token keeps
        its late outcome from overwriting the new owner's.

        It runs in no cancel scope of its own that another task cancels: anyio (4.16) hands
        the cancels such a scope has yet to take back to the task group when the group is
        being cancelled too (the request cancelled from outside), and the group takes them
        back from the request's task, so the server's cancel of the request was no longer
        counted (``Task.cancelling()`` 0, every time).
        """
        interval = self._settings.lease / 3
        while not self._finished:
            await anyio.sleep(interval)
            if self._finished:
                return
            try:
                renewed = await self.renew_now()
            except StoreUnavailable as exc:
                logger.warning(
                    "could not renew the lease on idempotency key %r of caller %r;"
                    " trying again in %g s: %s",
                    self.key,
                    self.caller,
                    interval,
                    exc,
                )
                continue
            except Exception:
                # A broken store must not take the running handler down with it.
                logger.exception(
                    "renewing the lease on idempotency key %r of caller %r failed;"
                    " it is no longer renewed",
                    self.key,
                    self.caller,
                )
                return
            if not renewed and not self._finished:
                logger.error(
                    "the claim on idempotency key %r of caller %r was lost while its"
                    " handler ran: the lease ran out and another request took the key"
                    " over; this request's outcome will not be stored",
                    self.key,
                    self.caller,
                )
                return

    def stop(self) -> None:
        """Stop renewing the lease (the handler is over): no renewal starts after this."""
        self._finished = True

    async def finish(self, finish: Finish, response: StoredResponse | None) -> bool:
        """Release the key or keep the outcome (``response``; ``None`` for not replayable);
        whether it was recorded.

        Tries again after each of :data:`FINISH_RETRY_DELAYS` while the store is
        unavailable, renewing the lease meanwhile. An outcome to keep (the work was done)
        is then tried every :data:`OUTCOME_RETRY_INTERVAL` for as long as the lease holds
        the key: lost, the key would lapse with no outcome and a retry would run the
        handler again, so the response waits for the store rather than that. Logs an error
        if the outcome could not be stored at all. Call it shielded from cancellation.
        """
        try:
            tries = 0
            waited = 0.0
            started = self._clock.time()
            while True:
                tries += 1
                try:
                    done = await self._write(finish, response)
                except StoreUnavailable as exc:
                    delay = self._next_delay(finish, tries, started, waited)
                    if delay is not None:
                        await anyio.sleep(delay)
                        waited += delay
                        continue
                    logger.error(
                        "the outcome (%s) of idempotency key %r of caller %r could not be"
                        " stored after %d tries over %.1f s; %s: %s",
                        finish,
                        self.key,
                        self.caller,
                        tries,
                        max(waited, self._clock.time() - started),
                        self._given_up_because(finish),
                        exc,
                    )
                    return False
                if not done:
                    logger.warning(
                        "the lease on idempotency key %r of caller %r ran out and another"
                        " request took the key over; this request's outcome (%s) was not"
                        " recorded",
                        self.key,
                        self.caller,
                        finish,
                    )
                return done
        finally:
            self.stop()

    def _given_up_because(self, finish: Finish) -> str:
        """What an outcome given up on leaves, for the log line."""
        if finish == "release":
            return "the key stays in flight until its lease ends"
        if self._clock.time() >= self.lease_ends:
            return "its lease has run out, so a retry may run the handler again"
        return (
            "the key stays in flight until its lease ends, and a retry after that runs the"
            " handler again"
        )

    def _next_delay(
        self, finish: Finish, tries: int, started: float, waited: float
    ) -> float | None:
        """How long to wait before try ``tries + 1`` at writing the outcome; None: give up.

        A key to release is tried :data:`FINISH_RETRY_DELAYS` more times (left in flight,
        it lapses with its lease: nothing runs twice). An outcome to keep is tried until
        the lease ends, and for one lease's length at most (a store that renews the lease
        but never takes the outcome must not hold the response for ever): by the clock or,
        on a clock that stands still (a test's), by the time waited since the first try."""
        if tries <= len(FINISH_RETRY_DELAYS):
            return FINISH_RETRY_DELAYS[tries - 1]
        if finish == "release":
            return None
        until = min(self.lease_ends, started + self._settings.lease)
        left = min(until - self._clock.time(), until - started - waited)
        if left <= 0:
            return None
        return min(OUTCOME_RETRY_INTERVAL, left)

    async def _write(self, finish: Finish, response: StoredResponse | None) -> bool:
        if finish == "release":
            return await self._store.release(self.caller, self.key, self._token)
        return await self._store.complete(
            self.caller,
            self.key,
            self._token,
            response,
            now=self._clock.time(),
            ttl=self._settings.ttl,
        )

    def __repr__(self) -> str:
        return f"HeldClaim(key={self.key!r}, finished={self._finished!r})"
