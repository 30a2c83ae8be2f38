"""Frozen settings for the load-protection pieces; ``None`` for a piece turns it off."""

from __future__ import annotations

import dataclasses

from retrysafe.validation import check, check_number

__all__ = ["BreakerSettings", "BudgetSettings", "GovernorSettings", "LimiterSettings"]


def _positive(owner: str, field: str, value: float, *, allow_zero: bool = False) -> None:
    check_number(owner, field, value, positive=not allow_zero, infinite_ok=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BudgetSettings:
    """A retry budget: a token bucket shared by every call to one dependency.

    Each first attempt earns ``ratio`` tokens and each retry spends one, so
    retries stay near ``ratio`` of the traffic however many calls fail. The
    bucket holds at most ``max_tokens`` (it starts full) and refills at
    ``min_per_second`` so a quiet client can still retry now and then.
    """

    ratio: float = 0.1
    max_tokens: float = 20.0
    min_per_second: float = 0.5

    def __post_init__(self) -> None:
        _positive("BudgetSettings", "ratio", self.ratio, allow_zero=True)
        _positive("BudgetSettings", "max_tokens", self.max_tokens)
        _positive("BudgetSettings", "min_per_second", self.min_per_second, allow_zero=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BreakerSettings:
    """A circuit breaker: stop sending to a dependency that is clearly down.

    It opens after ``consecutive_failures`` unhealthy outcomes in a row within
    ``failure_window`` seconds, or when at least ``ratio_min_calls`` calls in the
    last ``ratio_window`` seconds failed at ``failure_ratio`` or more. It stays
    open ``open_for`` seconds (a 503's Retry-After may set it, up to
    ``max_open_for``), then lets exactly one probe through.
    """

    consecutive_failures: int = 5
    failure_window: float = 30.0
    failure_ratio: float = 0.5
    ratio_window: float = 60.0
    ratio_min_calls: int = 20
    open_for: float = 20.0
    max_open_for: float = 300.0
    use_retry_after: bool = True

    def __post_init__(self) -> None:
        owner = "BreakerSettings"
        check(self.consecutive_failures >= 1, owner, "consecutive_failures", "must be >= 1")
        check(self.ratio_min_calls >= 1, owner, "ratio_min_calls", "must be >= 1")
        check(
            0 < self.failure_ratio <= 1,
            owner,
            "failure_ratio",
            f"must be in (0, 1], got {self.failure_ratio!r}",
        )
        for field in ("failure_window", "ratio_window", "open_for", "max_open_for"):
            _positive(owner, field, getattr(self, field))
        check(
            self.open_for <= self.max_open_for,
            owner,
            "open_for",
            f"must be <= max_open_for ({self.open_for!r} > {self.max_open_for!r})",
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LimiterSettings:
    """Pacing and cooldowns for one dependency.

    With ``cooldown_on_429`` a 429's Retry-After pauses every caller of the
    dependency until it ends, so one client learns the limit for all.
    ``requests_per_second`` (with ``burst``) paces attempts steadily; ``None``
    means no pacing.
    """

    cooldown_on_429: bool = True
    max_cooldown: float = 300.0
    requests_per_second: float | None = None
    burst: int = 1

    def __post_init__(self) -> None:
        _positive("LimiterSettings", "max_cooldown", self.max_cooldown)
        if self.requests_per_second is not None:
            _positive("LimiterSettings", "requests_per_second", self.requests_per_second)
        check(self.burst >= 1, "LimiterSettings", "burst", f"must be >= 1, got {self.burst!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GovernorSettings:
    """Load protection per dependency. Set a piece to ``None`` to switch it off.

    ``nested_attempts`` caps the attempts of a call made inside another
    retrysafe call (same task), so retrying layers do not multiply; and a call
    whose nested call already retried a failure does not retry it again.
    ``None`` switches that guard off.
    """

    budget: BudgetSettings | None = BudgetSettings()
    breaker: BreakerSettings | None = BreakerSettings()
    limiter: LimiterSettings | None = LimiterSettings()
    nested_attempts: int | None = 2

    @classmethod
    def off(cls) -> GovernorSettings:
        """No budget, no breaker, no cooldowns: each call is on its own."""
        return cls(budget=None, breaker=None, limiter=None, nested_attempts=None)

    def __post_init__(self) -> None:
        check(
            self.nested_attempts is None or self.nested_attempts >= 1,
            "GovernorSettings",
            "nested_attempts",
            f"must be >= 1, got {self.nested_attempts!r}",
        )
