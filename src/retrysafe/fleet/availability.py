"""Whether Redis answers: one flag the hot path reads, and log lines per outage.

A call that finds Redis away does not try it again: it reads ``up`` (one attribute) and
goes on with local protection. Only the background refresher probes Redis and, when it
answers again, sets ``up`` back: so during an outage no call waits on Redis at all, and
the one call that found it out waited at most the fleet's ``timeout``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from retrysafe.redact import printable

__all__ = ["Availability", "logger"]

logger = logging.getLogger("retrysafe.fleet")

#: Another "Redis is away" within this many seconds of the last one logs at DEBUG only
#: (a Redis that keeps flapping must not flood the log).
QUIET_FOR = 60.0


class Availability:
    """``up`` or not, told once in the log each way; ``where`` names Redis, redacted;
    ``monotonic`` is the clock outages are timed on (for tests)."""

    def __init__(self, where: str, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.where = where
        self._monotonic = monotonic
        self.up = True
        #: How many times Redis was found away (for tests and benchmarks).
        self.outages = 0
        self._lock = threading.Lock()
        self._warned_at: float | None = None
        #: Whether the outage under way was logged at WARNING (its end is then at INFO).
        self._loud = False
        #: When the outage under way began (monotonic seconds).
        self._away_since = 0.0

    def after_fork(self) -> None:
        """In a child process just forked: a new lock (another thread of the parent may
        have held it as it forked)."""
        self._lock = threading.Lock()

    def lost(self, error: BaseException) -> bool:
        """Redis failed an operation; True if this call found it out (it was up).

        An outage logged quietly (one soon after another) that goes on for ``QUIET_FOR``
        is logged at WARNING then, once: a long outage is never only at DEBUG."""
        with self._lock:
            now = self._monotonic()
            if not self.up:
                if self._loud or now - self._away_since < QUIET_FOR:
                    return False
                self._loud = True
                self._warned_at = now
                lasted = now - self._away_since
            else:
                lasted = None
                self.up = False
                self.outages += 1
                self._away_since = now
                loud = self._warned_at is None or now - self._warned_at >= QUIET_FOR
                if loud:
                    self._warned_at = now
                self._loud = loud
        if lasted is not None:
            logger.warning(
                "retrysafe fleet: Redis at %s has not answered for %.0f s (%s: %s); this "
                "process goes on with its local load protection",
                self.where,
                lasted,
                type(error).__name__,
                printable(str(error))[:200],
            )
            return False
        # redis-py's messages name a host and port or a script line, never a password.
        logger.log(
            logging.WARNING if loud else logging.DEBUG,
            "retrysafe fleet: Redis at %s is not answering (%s: %s); this process falls "
            "back to its local load protection until it answers again",
            self.where,
            type(error).__name__,
            printable(str(error))[:200],
        )
        return True

    def found(self) -> bool:
        """Redis answered the refresher; True if it had been away."""
        with self._lock:
            if self.up:
                return False
            self.up = True
            loud = self._loud
        # As loud as the outage's start: a Redis that flaps logs one WARNING and one INFO
        # per QUIET_FOR, and the rest at DEBUG.
        logger.log(
            logging.INFO if loud else logging.DEBUG,
            "retrysafe fleet: Redis at %s answers again; rejoined the fleet",
            self.where,
        )
        return True
