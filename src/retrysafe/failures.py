"""Turning a call that gives up into the error a caller can act on.

:func:`give_up_error` is the one place an :class:`~retrysafe.ApiError` is built.
Its class follows from why the call stopped: the deadline, a Retry-After or
cooldown too long, an open circuit, or else the last outcome itself (the
status class for a response, ``BadResponse`` for a body that could not be read,
``TransportError`` when no response came back). The failing body is kept
bounded, parsed when JSON, and scrubbed of the request's secrets.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Literal

import httpx

from retrysafe.classify import TIMEOUT_REASONS, Verdict
from retrysafe.errors import (
    ApiError,
    AttemptRecord,
    BadResponse,
    BudgetExhausted,
    CircuitOpen,
    ClientError,
    CooldownActive,
    DeadlineExceeded,
    PacingDelayed,
    QuotaExhausted,
    RateLimited,
    Refused,
    RetryAfterTooLong,
    ServerError,
    TransportError,
)
from retrysafe.policy import RetryPolicy
from retrysafe.redact import SCRUB_MARGIN, Redactor, printable

__all__ = ["CallSummary", "StopKind", "describe_body", "give_up_error"]

#: How much of a failing body an error keeps (``ApiError.body``), and shows in its message.
_BODY_LIMIT = 64 * 1024
_EXCERPT_LIMIT = 200

#: Why the call stopped, as far as the error's class goes: ``"outcome"`` lets the last
#: attempt's outcome pick it; the others name the limit that stopped the call (the
#: last four are retrysafe's own load protection).
StopKind = Literal["outcome", "deadline", "retry_after", "circuit", "budget", "cooldown", "pacing"]
_REFUSALS: dict[str, type[Refused]] = {
    "circuit": CircuitOpen,
    "budget": BudgetExhausted,
    "cooldown": CooldownActive,
    "pacing": PacingDelayed,
}


@dataclasses.dataclass(frozen=True)
class CallSummary:
    """The call-wide facts every error carries."""

    method: str
    url: str
    attempts: int
    history: tuple[AttemptRecord, ...]
    elapsed: float
    processed: Literal["no", "maybe"]
    idempotency_key: str | None = None
    #: Retries the earlier hops of the call's redirect chain used (0: none, or no chain).
    earlier_retries: int = 0
    #: Seconds the earlier hops of the call's redirect chain took (0.0: none, or no chain).
    earlier_hops_elapsed: float = 0.0


def give_up_error(
    stop: StopKind,
    *,
    reason: str,
    outcome: str,
    retryable: bool,
    summary: CallSummary,
    verdict: Verdict | None,
    response: httpx.Response | None,
    cause: BaseException | None,
    during_body: bool,
    retry_after: float | None,
    redactor: Redactor,
    detail: str = "",
    spent_body: bool = False,
    attempt_timeout: float = math.inf,
) -> tuple[ApiError, str]:
    """The error for a call that stops now, and a one-line excerpt of the failing body
    (``spent_body``: the request's body could not be sent again; ``attempt_timeout``:
    the policy's, the time an attempt the deadline does not cut short is given)."""
    body, excerpt = describe_body(response, redactor)
    if cause is not None:
        redactor.scrub_exception(cause)  # (it becomes the error's __cause__, or is raised)
    fields: dict[str, Any] = {
        "reason": reason,
        "outcome": outcome,
        "method": summary.method,
        "url": summary.url,
        "retryable": retryable,
        "status": response.status_code if response is not None else None,
        "body": body,
        "body_excerpt": excerpt,
        "attempts": summary.attempts,
        "history": summary.history,
        "response": response,
        "elapsed": summary.elapsed,
        "processed": summary.processed,
        "idempotency_key": summary.idempotency_key,
        "spent_body": spent_body,
        "earlier_retries": summary.earlier_retries,
        "earlier_hops_elapsed": summary.earlier_hops_elapsed,
    }
    error: ApiError
    if stop == "deadline":
        slow = _attempts_too_short(summary.history, attempt_timeout)
        error = DeadlineExceeded(attempts_too_short=slow, **fields)
    elif stop == "retry_after":
        error = RetryAfterTooLong(retry_after=retry_after or 0.0, detail=detail, **fields)
    elif stop in _REFUSALS:
        error = _REFUSALS[stop](retry_after=retry_after, detail=detail, **fields)
    elif response is not None:
        status = response.status_code
        if verdict is not None and verdict.reason == "quota_exhausted":
            error = QuotaExhausted(**fields)
        elif status == 429:
            error = RateLimited(retry_after=verdict.after if verdict else None, **fields)
        elif 400 <= status < 500:
            error = ClientError(**fields)
        elif status >= 500:
            error = ServerError(retry_after=verdict.after if verdict else None, **fields)
        else:
            error = BadResponse(**fields)
    elif during_body and not isinstance(cause, httpx.TimeoutException):
        error = BadResponse(**fields)
    else:
        error = TransportError(**fields)
    return error, excerpt


def _attempts_too_short(history: tuple[AttemptRecord, ...], attempt_timeout: float) -> bool:
    """Whether every attempt timed out, one at least given the whole ``attempt_timeout``
    (not cut short by the deadline): an answer slower than an attempt may take, which a
    longer deadline would only meet with more attempts cut the same way (trial98). When
    the deadline cut them all (review95: ``deadline=2`` against a 3 s answer, the default
    10 s attempts), a longer deadline is the fix."""
    return (
        bool(history)
        and all(record.outcome in TIMEOUT_REASONS for record in history)
        and any(record.timeout >= attempt_timeout for record in history)
    )


def explain_wait_too_long(
    wait: float, left: float, policy: RetryPolicy, *, capped: bool = True
) -> str:
    """Why a wait of ``wait`` seconds is more than a call with ``left`` seconds of its
    deadline may take: the policy's ``max_retry_after`` (when ``capped``), or the
    deadline, with the time kept for the attempt after the wait."""
    limit = policy.max_retry_after
    if capped and limit is not None and wait > limit:
        return f"RetryPolicy(max_retry_after={limit:g}) caps what a call waits"
    kept = policy.min_attempt_time
    # (time left rounded down and the wait up: 1.4996 s left must not read "1.50 s" beside
    # a 1.00 s wait and 0.5 s kept, which would seem to fit)
    shown_left = math.floor(max(0.0, left) * 1000) / 1000
    shown_wait = math.ceil(wait * 1000) / 1000
    return (
        f"{shown_left:.3f} s of the deadline were left, too little for a wait of"
        f" {shown_wait:.3f} s and the {kept:g} s kept for the attempt after it"
        f" (RetryPolicy(min_attempt_time={kept:g}))"
    )


def describe_body(response: httpx.Response | None, redactor: Redactor) -> tuple[Any, str]:
    """The failing body, parsed when JSON, bounded and scrubbed, plus a one-line excerpt.

    The request's secrets are scrubbed however the server wrote them (escaped, encoded,
    or as a JSON key); the excerpt, which goes into messages and log lines, also has
    every control character escaped (:func:`~retrysafe.redact.printable`). The body
    itself is the caller's data and keeps its characters.
    A streamed body the call never read is not read here: it stays the caller's.
    """
    if response is None or not _is_read(response):
        return None, ""
    # Cut where the limit falls, but scrubbed with what follows it: a secret across the
    # cut is replaced whole, not left with its head (a JSON-escaped echo can be 6 times
    # as long as the secret: hence the margin read past the limit).
    encoding = response.encoding or "utf-8"
    kept = len(response.content[:_BODY_LIMIT].decode(encoding, errors="replace"))
    extended = response.content[: _BODY_LIMIT + SCRUB_MARGIN].decode(encoding, errors="replace")
    text = redactor.scrub_before(extended, kept)
    body: Any = text
    if len(response.content) <= _BODY_LIMIT:
        try:
            # Scrubbed as text (every written form), then again once decoded, keys
            # included: a raw secret can read as a JSON escape ("a\\tb") of another string.
            body = _scrub_json(json.loads(text), redactor)
        except ValueError:
            body = text
    excerpt = printable(" ".join(text.split()))
    if len(excerpt) > _EXCERPT_LIMIT:
        excerpt = excerpt[: _EXCERPT_LIMIT - 3] + "..."
    return body, excerpt


def _is_read(response: httpx.Response) -> bool:
    try:
        response.content  # noqa: B018 - raises ResponseNotRead on an unread stream
    except httpx.ResponseNotRead:
        return False
    return True


def _scrub_json(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor.scrub(value)
    if isinstance(value, list):
        return [_scrub_json(item, redactor) for item in value]
    if isinstance(value, dict):
        return {redactor.scrub(key): _scrub_json(item, redactor) for key, item in value.items()}
    return value
