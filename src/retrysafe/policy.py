"""RetryPolicy: every knob of a retrying call, as one frozen, validated value."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ForwardRef

import httpx

from retrysafe.frozen_value import frozen_value
from retrysafe.validation import check, check_number

__all__ = ["DEFAULT_IDEMPOTENT_METHODS", "DEFAULT_RETRY_STATUSES", "RetryPolicy", "Rule"]

if TYPE_CHECKING:
    from retrysafe.classify import Verdict

    #: A rule looks at a response and returns a verdict, or None to defer to the defaults.
    Rule = Callable[[httpx.Response], Verdict | None]
else:
    # classify imports this module, so Verdict cannot be imported here; the reference
    # names its module, so typing.get_type_hints resolves it from any caller's module.
    Rule = Callable[[httpx.Response], ForwardRef("Verdict | None", module="retrysafe.classify")]

DEFAULT_RETRY_STATUSES: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504, 529})
DEFAULT_IDEMPOTENT_METHODS: frozenset[str] = frozenset(
    {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}
)


@frozen_value(kw_only=True)
class RetryPolicy:
    """How a call is retried. Frozen: derive variants with ``dataclasses.replace``.

    Attributes:
        attempts: most attempts per call, the first included (1 = never retry).
        attempt_timeout: seconds one attempt may take, body included.
        deadline: seconds the whole call may take, waits included (``math.inf``: none).
        min_attempt_time: no attempt starts with less than this left before the deadline.
        backoff_base: ceiling of the first full-jitter backoff wait.
        backoff_cap: largest backoff ceiling.
        retry_after_jitter: at most this much is added on top of a Retry-After hint,
            so clients told the same time do not return together; never subtracted.
        max_retry_after: a longer hint gives up at once with ``RetryAfterTooLong``
            (``None``: only the deadline limits it).
        retry_statuses: statuses that a later attempt may fix (error statuses, 400-599).
        idempotent_methods: methods safe to repeat without an idempotency key.
        quota_headers: headers whose value ``"0"`` on a 429 means "out of credits".
        rules: callables ``(httpx.Response) -> Verdict | None`` consulted first, in order.
        hedge_after: send a hedged copy of a request still unanswered after this long,
            and take whichever answers first: seconds (a number), or a percentile of
            the dependency's observed latency such as ``"p95"`` (see
            :mod:`retrysafe.latency`); ``None`` (the default): never hedge. Only
            requests safe to send twice are hedged (idempotent methods, or a write
            with an idempotency key) with a replayable body, and every copy spends
            from the retry budget. Copies count as attempts.
        max_hedges: most hedged copies per call (each after ``hedge_after`` more).

    The collections may be given as any collection (a list, a set...); they are
    kept as a ``frozenset`` (statuses, upper-case methods) or a ``tuple``
    (lower-case headers, rules), so a policy is hashable and compares by value.
    """

    attempts: int = 4
    attempt_timeout: float = 10.0
    deadline: float = 30.0
    min_attempt_time: float = 0.5
    backoff_base: float = 0.25
    backoff_cap: float = 8.0
    retry_after_jitter: float = 0.25
    max_retry_after: float | None = None
    retry_statuses: Collection[int] = DEFAULT_RETRY_STATUSES
    idempotent_methods: Collection[str] = DEFAULT_IDEMPOTENT_METHODS
    quota_headers: Collection[str] = ("x-api-remaining-credits",)
    rules: Sequence[Rule] = ()
    hedge_after: float | str | None = None
    max_hedges: int = 1

    def __post_init__(self) -> None:
        _require(
            isinstance(self.attempts, int) and not isinstance(self.attempts, bool),
            "attempts",
            f"must be a whole number, got {self.attempts!r}",
        )
        _require(self.attempts >= 1, "attempts", f"must be >= 1, got {self.attempts!r}")
        for name in ("attempt_timeout", "deadline"):
            _require_seconds(name, getattr(self, name), positive=True, infinite_ok=True)
        for name in ("min_attempt_time", "backoff_base", "backoff_cap", "retry_after_jitter"):
            _require_seconds(name, getattr(self, name), positive=False, infinite_ok=False)
        if self.max_retry_after is not None:
            _require_seconds(
                "max_retry_after", self.max_retry_after, positive=False, infinite_ok=True
            )
        _require(
            self.backoff_base <= self.backoff_cap,
            "backoff_base",
            f"must be <= backoff_cap ({self.backoff_base!r} > {self.backoff_cap!r})",
        )
        _require(
            self.min_attempt_time <= self.deadline,
            "min_attempt_time",
            f"must be <= deadline ({self.min_attempt_time!r} > {self.deadline!r}), "
            "or no attempt could ever start; for a short deadline lower it too, e.g. "
            f"RetryPolicy(deadline={self.deadline!r}, min_attempt_time={self.deadline / 2:g})",
        )
        statuses = _frozen(self.retry_statuses, "retry_statuses")
        for status in statuses:
            _require(
                isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599,
                "retry_statuses",
                f"must hold HTTP statuses 100-599, got {status!r}",
            )
            # Below 400 a response is never retried (2xx is a success, 1xx and 3xx are
            # httpx's to handle): such a status here would be ignored, silently.
            _require(
                status >= 400,
                "retry_statuses",
                f"must hold error statuses (400-599): a {status} is never retried; to retry "
                "a success whose body says it failed, add a rule (RetryPolicy(rules=...))",
            )
        methods = _frozen(self.idempotent_methods, "idempotent_methods")
        for method in methods:
            _require(
                isinstance(method, str) and method.isascii() and method.isalpha(),
                "idempotent_methods",
                f"must hold method names such as 'GET', got {method!r}",
            )
        headers = _tuple(self.quota_headers, "quota_headers")
        for header in headers:
            _require(
                isinstance(header, str) and header.strip() != "",
                "quota_headers",
                f"must hold header names, got {header!r}",
            )
        rules = _tuple(self.rules, "rules")
        for rule in rules:
            _require(callable(rule), "rules", f"must hold callables, got {rule!r}")
        _check_hedging(self.hedge_after, self.max_hedges, self.attempts)
        # Normalise so comparisons later are exact: upper-case methods, lower-case headers.
        object.__setattr__(self, "retry_statuses", frozenset(statuses))
        object.__setattr__(self, "idempotent_methods", frozenset(m.upper() for m in methods))
        object.__setattr__(self, "quota_headers", tuple(h.strip().lower() for h in headers))
        object.__setattr__(self, "rules", tuple(rules))


def _check_hedging(hedge_after: object, max_hedges: object, attempts: int) -> None:
    """``hedge_after``: None, seconds > 0, or a percentile string; ``max_hedges`` >= 1;
    and room for a copy: copies count toward ``attempts``."""
    if isinstance(hedge_after, str):
        from retrysafe.latency import parse_percentile

        try:
            parse_percentile(hedge_after)
        except ValueError as exc:
            raise ValueError(f"RetryPolicy.hedge_after {exc}") from None
    elif hedge_after is not None:
        _require(
            isinstance(hedge_after, (int, float)) and not isinstance(hedge_after, bool),
            "hedge_after",
            "must be seconds (a number), a percentile such as 'p95', or None (no hedging); "
            f"got {hedge_after!r}",
        )
        _require_seconds("hedge_after", hedge_after, positive=True, infinite_ok=False)
    _require(
        isinstance(max_hedges, int) and not isinstance(max_hedges, bool) and max_hedges >= 1,
        "max_hedges",
        f"must be a whole number >= 1 (hedge_after=None turns hedging off), got {max_hedges!r}",
    )
    if hedge_after is not None:
        _require(
            attempts >= 2,
            "hedge_after",
            "needs attempts >= 2: a hedged copy counts as an attempt, so attempts=1 leaves "
            f"room for none (got attempts={attempts!r}); raise attempts or drop hedge_after",
        )
        assert isinstance(max_hedges, int)
        _require(
            max_hedges <= attempts - 1,
            "max_hedges",
            f"must be at most attempts - 1 = {attempts - 1}: each hedged copy counts as an "
            f"attempt, so {max_hedges} copies could never all be sent (got max_hedges="
            f"{max_hedges!r}, attempts={attempts!r}); raise attempts or lower max_hedges",
        )


def _require(condition: bool, field: str, rule: str) -> None:
    check(condition, "RetryPolicy", field, rule)


def _require_seconds(field: str, value: object, *, positive: bool, infinite_ok: bool) -> None:
    check_number(
        "RetryPolicy", field, value, positive=positive, infinite_ok=infinite_ok, unit=" seconds"
    )


def _frozen(values: Any, field: str) -> frozenset[Any]:
    _require(
        isinstance(values, Iterable) and not isinstance(values, (str, bytes)),
        field,
        f"must be a collection, got {values!r}",
    )
    return frozenset(values)


def _tuple(values: Any, field: str) -> tuple[Any, ...]:
    _require(
        isinstance(values, Iterable) and not isinstance(values, (str, bytes)),
        field,
        f"must be a collection, got {values!r}",
    )
    return tuple(values)
