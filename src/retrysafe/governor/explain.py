"""Why the governor holds a call back, in words with the real numbers.

A refusal error names retrysafe's own setting and its values, so nobody reads
a local refusal as the server's answer. These run only when a call is held
back, never on the healthy path.
"""

from __future__ import annotations

from retrysafe.errors import seconds_text
from retrysafe.governor.breaker import CircuitBreaker
from retrysafe.governor.budget import RetryBudget
from retrysafe.governor.limiter import Limiter
from retrysafe.governor.settings import BreakerSettings, LimiterSettings

__all__ = [
    "explain_breaker",
    "explain_budget",
    "explain_cooldown",
    "explain_full_queue",
    "explain_pacing",
]


def explain_budget(budget: RetryBudget) -> tuple[str, float | None]:
    """The budget's state, and the seconds until it holds a token again (None: never)."""
    settings = budget.settings
    tokens = budget.tokens
    refill = settings.min_per_second
    retry_after = (1.0 - tokens) / refill if refill > 0 else None
    detail = (
        f"its retry budget holds {tokens:.2f} of the 1 token a retry spends (it earns "
        f"{settings.ratio:g} a call and {refill:g} a second, up to {settings.max_tokens:g}: "
        f"BudgetSettings(ratio={settings.ratio:g}, min_per_second={refill:g}, "
        f"max_tokens={settings.max_tokens:g}))"
    )
    return detail, retry_after


def explain_breaker(breaker: CircuitBreaker, now: float) -> tuple[str, float | None]:
    """The breaker's state, and the seconds until it lets a probe through (None: unknown)."""
    settings = breaker.settings
    open_until = breaker.open_until()
    trips = (
        f"BreakerSettings: {settings.consecutive_failures} failing calls in a row within "
        f"{settings.failure_window:g} s, or {settings.failure_ratio:.0%} of at least "
        f"{settings.ratio_min_calls} calls within {settings.ratio_window:g} s, open "
        f"{_periods(settings)}"
    )
    if open_until is None or now >= open_until:
        kept = breaker.probe_kept_for(now)
        if kept is not None:
            patience, until = kept
            return (
                "its circuit breaker is half-open and keeps its one probe for a caller that "
                "asked lately and lets an attempt run over twice as long as this call (a "
                f"probe lease of {patience:.1f} s): a shorter attempt could not tell a slow "
                f"dependency from a dead one ({trips})",
                max(0.0, until - now),
            )
    if open_until is None:
        return f"its circuit breaker has one probe in flight and waits for it ({trips})", None
    retry_after = max(0.0, open_until - now)
    opened = f"its circuit breaker is open for {seconds_text(retry_after)} more ({trips})"
    return opened, retry_after


def explain_cooldown(limiter: Limiter, cooldown: float) -> str:
    """The cooldown in force."""
    settings = limiter.settings
    if limiter.cooldown_announced:
        return (
            "the server announced its rate limit used up (a RateLimit or X-RateLimit-*"
            f" header): every caller of this dependency waits {seconds_text(cooldown)} more for its"
            " reset (LimiterSettings(pace_on_rate_limit_headers=True,"
            f" max_cooldown={settings.max_cooldown:g}))"
        )
    return (
        f"a 429 asked every caller of this dependency to wait {seconds_text(cooldown)} more (its "
        f"Retry-After, cut to at most max_cooldown: LimiterSettings(cooldown_on_429=True, "
        f"max_cooldown={settings.max_cooldown:g}))"
    )


def explain_full_queue(rate: float, settings: LimiterSettings, *, fleet: bool) -> str:
    """The pacing queue that has no room for one more slot."""
    whose = "the fleet's" if fleet else "its"
    shared = ", shared by RedisFleet" if fleet else ""
    return (
        f"{whose} pacing queue is full: its slots already reach {settings.max_cooldown:g} s"
        f" ahead, and one more would wait longer (LimiterSettings(requests_per_second="
        f"{rate:g}, burst={settings.burst}, max_cooldown={settings.max_cooldown:g}){shared})"
    )


def explain_pacing(limiter: Limiter, wait: float) -> str:
    """The paced slot that is too far away."""
    settings = limiter.settings
    return (
        f"its next paced slot is {wait:.2f} s away (LimiterSettings("
        f"requests_per_second={settings.requests_per_second:g}, burst={settings.burst}))"
    )


def _periods(settings: BreakerSettings) -> str:
    """How long it opens for, as its settings say: "5 s", or "0.5 s, doubling up to 5 s"
    where the first period is shorter."""
    first = min(settings.first_open_for, settings.open_for)
    if first == settings.open_for:
        return f"{settings.open_for:g} s"
    return f"{first:g} s, doubling up to {settings.open_for:g} s"
