"""Judging a demo case: what a call did (:class:`Happened`), what was expected of it
(:class:`Expected`), and extra checks against the chaos server's record of the case.

Checks are frozen values, so a case states them as data: ``ServerSaw(1)`` for a write
that must be sent once, ``LedgerEffects("orders", 1)`` for one that must take effect once.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from retrysafe import ApiError
    from retrysafe.chaos import ChaosRecord, KeyedChaos

__all__ = [
    "Check",
    "CheckResult",
    "Evidence",
    "Expected",
    "FailsFast",
    "Happened",
    "LedgerEffects",
    "RetryAfterIs",
    "SameIdempotencyKey",
    "ServerSaw",
    "WaitedAtLeast",
]


@dataclasses.dataclass(frozen=True)
class Happened:
    """What one case's call did, read from its response report or its error.

    ``error`` is the error's class name (None on success) and ``reason`` its reason code
    (``"success"`` otherwise); ``retried_after`` says what each attempt that was followed
    by a retry got (``"HTTP 429"``, ``"truncated_body"``) and ``waits`` the sleeps after them.
    """

    error: str | None
    status: int | None
    reason: str
    attempts: int
    waits: tuple[float, ...]
    elapsed: float
    retried_after: tuple[str, ...] = ()
    sent: str | None = None
    retry_after: float | None = None
    idempotency_key: str | None = None
    message: str = ""

    @property
    def outcome(self) -> str:
        """``"success"`` or the error's class name."""
        return self.error or "success"

    @property
    def retried(self) -> bool:
        return self.attempts > 1


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One extra check: what it verifies, whether it held, and what was seen."""

    check: str
    ok: bool
    seen: str


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What a check may look at: the call's outcome and the chaos server's view of it."""

    happened: Happened
    chaos: KeyedChaos

    @property
    def requests(self) -> list[ChaosRecord]:
        """The requests the server received for this case, in arrival order."""
        return self.chaos.log()


class Check(Protocol):
    """A frozen value that verifies one more fact about a case beyond its outcome."""

    def describe(self) -> str: ...

    def evaluate(self, evidence: Evidence) -> CheckResult: ...


@dataclasses.dataclass(frozen=True)
class ServerSaw:
    """The server received exactly ``requests`` requests (a write sent once, not twice)."""

    requests: int

    def describe(self) -> str:
        return f"server received {self.requests} request(s)"

    def evaluate(self, evidence: Evidence) -> CheckResult:
        seen = len(evidence.requests)
        return CheckResult(self.describe(), seen == self.requests, f"{seen} request(s)")


@dataclasses.dataclass(frozen=True)
class LedgerEffects:
    """``/idempotent/{resource}`` applied its side effect exactly ``effects`` times."""

    resource: str
    effects: int

    def describe(self) -> str:
        return f"ledger of {self.resource!r} shows {self.effects} effect(s)"

    def evaluate(self, evidence: Evidence) -> CheckResult:
        ledger = evidence.chaos.ledger(self.resource)
        applied = sum(ledger.values())
        return CheckResult(self.describe(), applied == self.effects, f"ledger {ledger}")


@dataclasses.dataclass(frozen=True)
class SameIdempotencyKey:
    """Every attempt carried the same Idempotency-Key: the one the call reports."""

    def describe(self) -> str:
        return "same Idempotency-Key on every attempt"

    def evaluate(self, evidence: Evidence) -> CheckResult:
        keys = {record.idempotency_key for record in evidence.requests}
        expected = evidence.happened.idempotency_key
        ok = expected is not None and keys == {expected}
        return CheckResult(
            self.describe(), ok, f"{len(keys)} distinct key(s): {sorted(map(str, keys))}"
        )


@dataclasses.dataclass(frozen=True)
class WaitedAtLeast:
    """The retry reached the server no sooner than ``seconds`` after the first attempt."""

    seconds: float

    def describe(self) -> str:
        return f"retry arrived >= {self.seconds:g} s after the first attempt"

    def evaluate(self, evidence: Evidence) -> CheckResult:
        times = [record.time for record in evidence.requests]
        if len(times) < 2:
            return CheckResult(self.describe(), False, f"{len(times)} request(s)")
        gap = times[1] - times[0]
        return CheckResult(self.describe(), gap >= self.seconds, f"gap {gap:.3f} s")


@dataclasses.dataclass(frozen=True)
class RetryAfterIs:
    """The error carries the server's Retry-After, so the caller knows when to come back."""

    seconds: float

    def describe(self) -> str:
        return f"error.retry_after == {self.seconds:g}"

    def evaluate(self, evidence: Evidence) -> CheckResult:
        seen = evidence.happened.retry_after
        return CheckResult(self.describe(), seen == self.seconds, f"retry_after {seen}")


@dataclasses.dataclass(frozen=True)
class FailsFast:
    """The call gave up within ``seconds`` instead of waiting for a hopeless retry."""

    seconds: float

    def describe(self) -> str:
        return f"gave up within {self.seconds:g} s"

    def evaluate(self, evidence: Evidence) -> CheckResult:
        elapsed = evidence.happened.elapsed
        return CheckResult(self.describe(), elapsed < self.seconds, f"{elapsed:.3f} s")


@dataclasses.dataclass(frozen=True)
class Expected:
    """What retrysafe should do: succeed or raise ``error``, after exactly ``attempts``.

    ``reason`` and ``sent``, when given, must match the error's; ``checks`` are verified
    against the chaos server's record of the case.
    """

    error: type[ApiError] | None
    attempts: int
    reason: str | None = None
    sent: str | None = None
    checks: tuple[Check, ...] = ()

    @property
    def outcome(self) -> str:
        """``"success"`` or the expected error's class name."""
        return "success" if self.error is None else self.error.__name__

    @property
    def retried(self) -> bool:
        return self.attempts > 1

    def mismatches(self, happened: Happened) -> list[str]:
        """Every way ``happened`` differs from this expectation, as readable lines."""
        found: list[str] = []
        pairs: list[tuple[str, object, object]] = [
            ("outcome", self.outcome, happened.outcome),
            ("attempts", self.attempts, happened.attempts),
        ]
        if self.reason is not None:
            pairs.append(("reason", self.reason, happened.reason))
        if self.sent is not None:
            pairs.append(("sent", self.sent, happened.sent))
        for field, expected, seen in pairs:
            if expected != seen:
                found.append(f"{field}: expected {expected}, happened {seen}")
        return found
