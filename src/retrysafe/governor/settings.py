"""Frozen settings for the load-protection pieces; ``None`` for a piece turns it off."""

from __future__ import annotations

from retrysafe.frozen_value import frozen_value
from retrysafe.validation import check, check_number

__all__ = ["BreakerSettings", "BudgetSettings", "GovernorSettings", "LimiterSettings"]


#: The shortest ``burst_window`` above 0: its slots are a tenth of it, numbered by the
#: clock's seconds, and a window of 1e-320 s overflowed the numbering.
_SHORTEST_WINDOW = 0.001


def _positive(owner: str, field: str, value: float, *, allow_zero: bool = False) -> None:
    check_number(owner, field, value, positive=not allow_zero, infinite_ok=False)


@frozen_value(kw_only=True)
class BudgetSettings:
    """A retry budget: a token bucket shared by every call to one dependency.

    Each call's first attempt earns ``ratio`` tokens as it ends (calls gathered by
    the thousand earn as their answers come, with the retries they pay for), and each
    retry spends one, so retries stay near ``ratio`` of the traffic however many calls
    fail. The bucket holds at most ``max_tokens`` (it starts full) and refills at
    ``min_per_second`` so a quiet client can still retry now and then. With a
    ``burst_window``, what calls earn while it is full is also kept that many seconds,
    and retries spend that first.

    Why these defaults (measured with ``benchmarks/load_protection.py``: 200
    concurrent calls sharing one client, the default 4-attempt ``RetryPolicy``):

    - ``ratio=0.27``: a healthy caller must lose nothing to the budget up to
      20 % independent failures (in traffic spread over time, or in bursts of
      calls started together: see ``burst_window``), where a 4-attempt retrier makes
      0.2 + 0.04 + 0.008 = 0.248 retries per call, so the ratio must exceed
      that (a seeded simulation of 100,000 calls at 20 % loses 0.28 points at
      0.25, none at 0.27). In a full outage the budget alone lets
      ``1 + ratio`` attempts per call through (plus what is kept: the bucket,
      and what the last ``burst_window`` earned), so 0.3 is the ceiling for the
      1.3x target. The references sit below a 20 % failure rate's need: gRPC's
      0.1 (the old default, which refused 30 of 200 calls at 20 % failures,
      issue 9) and Finagle's and Envoy's 20 %.
    - ``max_tokens=60``: the bucket must absorb the retries of many calls
      failing at once, not just a steady trickle. With 200 concurrent calls at
      20 % failures, 20 tokens lost 2.5 points to a plain retrier even at ratio
      0.28 (97.3 % against 99.8 %); 60 lost none (99.8 %). Finagle (10/s over
      10 s) and the AWS SDK (500 / 5) keep about 100 retries; 60 is enough,
      and in an outage the whole bucket is extra load (+0.03x per 2,000 calls:
      1.30x measured with the budget alone). It also carries six
      ``RetryPolicy(attempts=10)`` calls of 9 retries each.
    - ``min_per_second=0.5``: a quiet client (a few calls a minute, earning
      little) still gets a retry every two seconds; Finagle's floor of 10/s
      suits a busy server, not a client library, where it would lift the
      budget for every caller under ~40 calls/s.
    - ``burst_window=0``: the bucket alone. Earned as first attempts end, a burst's
      earnings come along with its retries: 1,000 calls gathered at once lost none
      to the budget at 10 and 20 % failures (``benchmarks/budget_burst.py``), where,
      earned as they were admitted, 32 to 49 ended in ``BudgetExhausted`` at 10 %.
      Keeping what a full bucket turns away, as Finagle keeps its deposits, is for a
      burst whose failures end long after its successes (attempts that time out):
      give it more than ``attempt_timeout`` plus the backoff, such as 15. Its price:
      an outage that begins after busy healthy traffic first sees up to ``ratio``
      times the calls of the last window in retries, once (the budget alone: 2.32
      requests a call over a 3 s outage after 12 s of 100 calls a second, against
      1.47 with the bucket alone; the breaker opens after 20 failures in a row and
      ends it sooner).
    """

    ratio: float = 0.27
    max_tokens: float = 60.0
    min_per_second: float = 0.5
    burst_window: float = 0.0

    def __post_init__(self) -> None:
        _positive("BudgetSettings", "ratio", self.ratio, allow_zero=True)
        _positive("BudgetSettings", "max_tokens", self.max_tokens)
        _positive("BudgetSettings", "min_per_second", self.min_per_second, allow_zero=True)
        _positive("BudgetSettings", "burst_window", self.burst_window, allow_zero=True)
        if 0 < self.burst_window < _SHORTEST_WINDOW:
            raise ValueError(
                f"BudgetSettings: burst_window={self.burst_window!r} is shorter than "
                f"{_SHORTEST_WINDOW} s, too short to keep anything: give 0 to keep only "
                "the bucket, or a number of seconds such as 10"
            )


@frozen_value(kw_only=True)
class BreakerSettings:
    """A circuit breaker: stop sending to a dependency that is clearly down.

    It opens after ``consecutive_failures`` unhealthy outcomes in a row within
    ``failure_window`` seconds, or when at least ``ratio_min_calls`` calls in the
    last ``ratio_window`` seconds failed at ``failure_ratio`` or more. Opening
    after a while closed, it stays open ``first_open_for`` seconds, then lets
    exactly one probe through; each time a probe fails (a longer blip, or the
    dependency is down), or it opens again within ``open_for`` of closing, the
    period doubles, up to ``open_for``. A 503's Retry-After may set any period,
    up to ``max_open_for``. Evidence is counted per call: a call's own retries
    are not new failures (see ``CircuitBreaker``).

    Why these defaults (measured with ``benchmarks/load_protection.py``, 200
    concurrent calls, and against Polly v8 and resilience4j):

    - ``failure_ratio=0.8``, ``ratio_min_calls=100``, ``ratio_window=30``:
      Polly v8's minimum throughput 100 and 30 s sampling window (resilience4j:
      100 calls), but a higher ratio than their 0.5, because here the ratio
      counts *calls* that ended failed, and the retry budget, not the breaker,
      is what bounds retries in a brownout. At 50 % independent failures with
      the budget spent, about 0.4 of calls end failed, and with 0.5 the noise of
      a 100-call window kept opening the breaker: 5-12 % of calls succeeded
      against a plain retrier's 92 %. At 0.8 it opens when the dependency is
      mostly down; a full outage opens it sooner through the run of 20.
    - ``consecutive_failures=20``: the rule that also opens for a caller too
      quiet for 100 calls. Under concurrency the outcomes of independent
      failures interleave into runs; at 5 (the old default) a 50 % failure rate
      made runs long enough to open it ~48 times per 10,000 calls (the old
      defaults saved 10 % of calls at 50 % failures, a plain retrier 90 %); at
      20 no run that long appears below ~70 %, while in a real outage 20
      failing calls in a row take a fraction of a second.
    - ``open_for=5``: Polly's 5 s break (resilience4j waits 60 s). Open, a
      dependency gets one probe per period, so a short period costs nothing in
      an outage and bounds the time to recover once it ends.
    - ``first_open_for=0.5``: a brownout shorter than a plain retrier's patience
      (0.3 to 1 s of 503s at 50 to 200 calls a second) opens the breaker, and
      opened for 5 s it refused the healthy calls of the 4.7 s after the
      dependency recovered (951 of 1,200 calls failed where a plain retrier saved
      all but 2). A first period of 0.5 s probes soon after a blip ends, and
      doubling it after each failed probe follows a longer one (a 1 s blip at
      50 calls a second); a dependency that is down fails the probes (periods of
      0.5, 1, 2 and 4 s, then ``open_for`` from 7.5 s on). Taken as ``open_for``
      where it is larger; set it to ``open_for`` for one fixed period.
    """

    consecutive_failures: int = 20
    failure_window: float = 30.0
    failure_ratio: float = 0.8
    ratio_window: float = 30.0
    ratio_min_calls: int = 100
    open_for: float = 5.0
    first_open_for: float = 0.5
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
        for field in (
            "failure_window",
            "ratio_window",
            "open_for",
            "first_open_for",
            "max_open_for",
        ):
            _positive(owner, field, getattr(self, field))
        check(
            self.open_for <= self.max_open_for,
            owner,
            "open_for",
            f"must be <= max_open_for ({self.open_for!r} > {self.max_open_for!r})",
        )


@frozen_value(kw_only=True)
class LimiterSettings:
    """Pacing and cooldowns for one dependency.

    With ``cooldown_on_429`` a 429's Retry-After pauses every caller of the
    dependency until it ends, so one client learns the limit for all. With
    ``pace_on_rate_limit_headers`` a response announcing its rate limit used up
    (``RateLimit: ...;r=0``, ``X-RateLimit-Remaining: 0``...) pauses them until the
    announced reset, before any 429. ``requests_per_second`` (with ``burst``) paces
    attempts steadily; ``None`` means no pacing.
    """

    cooldown_on_429: bool = True
    max_cooldown: float = 300.0
    requests_per_second: float | None = None
    burst: int = 1
    pace_on_rate_limit_headers: bool = True

    def __post_init__(self) -> None:
        _positive("LimiterSettings", "max_cooldown", self.max_cooldown)
        if self.requests_per_second is not None:
            _positive("LimiterSettings", "requests_per_second", self.requests_per_second)
        check(self.burst >= 1, "LimiterSettings", "burst", f"must be >= 1, got {self.burst!r}")


@frozen_value(kw_only=True)
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
        for field, value, kind in (
            ("budget", self.budget, BudgetSettings),
            ("breaker", self.breaker, BreakerSettings),
            ("limiter", self.limiter, LimiterSettings),
        ):
            if value is not None and not isinstance(value, kind):
                raise TypeError(
                    f"GovernorSettings.{field} must be a retrysafe.{kind.__name__} or None "
                    f"(None switches it off), got {type(value).__name__}; "
                    f"e.g. {field}=retrysafe.{kind.__name__}()"
                )
        check(
            self.nested_attempts is None
            or (
                isinstance(self.nested_attempts, int)
                and not isinstance(self.nested_attempts, bool)
                and self.nested_attempts >= 1
            ),
            "GovernorSettings",
            "nested_attempts",
            f"must be a whole number >= 1 or None, got {self.nested_attempts!r}",
        )
