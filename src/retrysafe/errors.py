"""The errors a caller can act on.

Every final failure raises an :class:`ApiError` subclass that says what
happened (``reason``, ``status``, ``body``), whether trying again later could
help (``retryable``), and what each attempt did (``history``). Catch the
subclass that matches what you would do about it::

    try:
        client.get(url)
    except retrysafe.ClientError:      # fix the request
        ...
    except retrysafe.RateLimited as e:  # slow down, e.retry_after
        ...
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Final, Literal

import httpx

from retrysafe.named_tuple import NamedTuple

__all__ = [
    "ApiError",
    "AttemptRecord",
    "BadResponse",
    "BudgetExhausted",
    "CircuitOpen",
    "CooldownActive",
    "PacingDelayed",
    "Refused",
    "ClientError",
    "DeadlineExceeded",
    "QuotaExhausted",
    "RateLimited",
    "RetryAfterTooLong",
    "ServerError",
    "TransportError",
]


class AttemptRecord(NamedTuple):
    """What one attempt did (an immutable record: a named tuple, cheap to make).

    ``attempt`` is its number, from 1 (as a :class:`~retrysafe.RetryEvent`'s), ``status``
    is the response status (None when no response came back),
    ``exception`` the exception's class name, ``outcome`` what it got, as a code,
    ``started`` seconds from the start of the call, ``elapsed`` the attempt's own
    duration and ``wait`` the sleep that followed it (0.0 for the last).
    """

    attempt: int
    outcome: str
    status: int | None
    exception: str | None
    started: float
    elapsed: float
    timeout: float
    wait: float = 0.0


_UNSAFE_ADVICE = (
    "not repeated, since the server may already have acted on it: check before sending "
    "it again, or send it with an idempotency key (idempotency_key=True, or an Idempotency-Key "
    "header) to make retries safe"
)
_SPENT_BODY_ADVICE = (
    "not repeated, since its body was a stream (a generator, or a file that cannot be "
    "rewound), spent once sent: send the body as bytes to let retries send it again"
)
_UNSAFE_AND_SPENT_ADVICE = (
    "not repeated, since the server may already have acted on it and its body was a "
    "stream, spent once sent: check before sending it again, and send the body as bytes "
    "with an idempotency key (idempotency_key=True, or an Idempotency-Key header) to make "
    "retries safe"
)


def seconds_text(seconds: float) -> str:
    """A wait or a period as a message writes it: to a tenth of a second, and "under
    0.1 s" for less (where "0.0 s more" and "try again in 0.0 s" read as nonsense)."""
    return f"{seconds:.1f} s" if seconds >= 0.05 else "under 0.1 s"


class ApiError(Exception):
    """A call failed for good. Fields say why; ``str()`` is one line with advice.

    The request's method and URL are kept with secrets redacted; ``response`` is
    the last response (body read) or None when none came back.
    ``processed`` is ``"maybe"`` when any attempt may have been acted on by the
    server (check, or resend under the same idempotency key, before writing
    again) and ``"no"`` when surely none was. ``retryable`` says whether trying again
    later may help, and is safe: with a ``spent_body``, by sending the body again.
    """

    advice: ClassVar[str] = "see .reason and .history"
    #: (Class-level defaults, for an error pickled before these fields existed.)
    earlier_retries: int = 0
    earlier_hops_elapsed: float = 0.0

    def __init__(
        self,
        *,
        reason: str,
        outcome: str,
        method: str,
        url: str,
        retryable: bool,
        status: int | None = None,
        body: Any = None,
        body_excerpt: str = "",
        attempts: int = 0,
        history: tuple[AttemptRecord, ...] = (),
        response: httpx.Response | None = None,
        elapsed: float = 0.0,
        processed: Literal["no", "maybe"] = "no",
        idempotency_key: str | None = None,
        spent_body: bool = False,
        earlier_retries: int = 0,
        earlier_hops_elapsed: float = 0.0,
    ) -> None:
        self.reason = reason
        self.outcome = outcome
        self.method = method
        self.url = url
        self.retryable = retryable
        self.status = status
        self.body = body
        self.attempts = attempts
        self.history = history
        self.response = response
        self.elapsed = elapsed
        self.processed = processed
        #: The key the request carried (every attempt the same): resend under it after
        #: an ambiguous failure, and the server runs the work at most once.
        self.idempotency_key = idempotency_key
        #: The request's body was a stream (a generator, a file that cannot be rewound),
        #: spent once sent: it could not be sent again, whatever else allowed a repeat.
        self.spent_body = spent_body
        #: Retries the earlier hops of the call's redirect chain used: one retry allowance
        #: serves the whole chain, and ``attempts`` counts this hop's only.
        self.earlier_retries = earlier_retries
        #: Seconds the earlier hops of the call's redirect chain took (0.0: none, or no
        #: chain): one deadline serves the whole chain, and ``elapsed`` counts them too.
        self.earlier_hops_elapsed = earlier_hops_elapsed
        super().__init__(self._message(body_excerpt))

    def _message(self, body_excerpt: str) -> str:
        what = f"HTTP {self.status} {self.outcome}" if self.status is not None else self.outcome
        if body_excerpt:
            what += f" ({body_excerpt})"
        why = "" if self.reason == self.outcome else f", gave up: {self.reason}"
        plural = "" if self.attempts == 1 else "s"
        advice = self._unsafe_advice() if self.reason == "unsafe_to_repeat" else self._advice()
        return (
            f"{self.method} {self.url} failed: {what} after {self.attempts} attempt{plural}"
            f"{self._earlier_hops()} in {self.elapsed:.2f}s{why}; {advice}"
        )

    def _earlier_hops(self) -> str:
        """That the attempts counted are this hop's, on a later hop of a redirect chain; and
        what the earlier hops used of the call's retries, if any."""
        retries = self.earlier_retries
        if not retries:
            return " on this hop" if self.earlier_hops_elapsed > 0 else ""
        plural = "y" if retries == 1 else "ies"
        return f" on this hop (its redirect chain's earlier hops used {retries} retr{plural})"

    def _unsafe_advice(self) -> str:
        """Why the request was not repeated: the server may have acted on it, its body
        was spent, or both."""
        if not self.spent_body:
            return _UNSAFE_ADVICE
        if self.processed == "maybe" and self.idempotency_key is None:
            return _UNSAFE_AND_SPENT_ADVICE
        return _SPENT_BODY_ADVICE

    def _advice(self) -> str:
        """What to do, with this error's own numbers in it (never an attribute's name)."""
        retry_after = getattr(self, "retry_after", None)
        if retry_after is None:
            return self.advice
        return f"{self.advice}; try again in {seconds_text(retry_after)}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(reason={self.reason!r}, status={self.status!r}, "
            f"retryable={self.retryable!r}, attempts={self.attempts!r}, "
            f"method={self.method!r}, url={self.url!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle through their args; ours are keyword-only, so rebuild by hand.
        return (_rebuild, (type(self), self._shareable_state(), str(self)))

    def _shareable_state(self) -> dict[str, Any]:
        """The fields a pickled error carries: every one, its response's request's secrets
        left behind (see :func:`_shareable`; the requests shell's errors add their own)."""
        state = self.__dict__.copy()
        if isinstance(state.get("response"), httpx.Response):
            state["response"] = _shareable(state["response"])
        return state


def _shareable(response: httpx.Response) -> httpx.Response:
    """The copy of ``response`` a pickled error carries: what httpx pickles of it (status,
    headers, the body read, no stream), with the values of its secret headers hidden
    (``Set-Cookie``), and its request's, the request's URL redacted and body left out,
    and the request's secrets scrubbed from the body if the server echoed them.

    A pickled error may leave the process (a task queue's result store, a cache), and
    the request it answers holds the caller's credentials: ``Authorization``, an
    ``api_key`` in the query, a password in the body.
    """
    from retrysafe.kept_body import was_cut
    from retrysafe.redact import Redactor, hidden_values

    shared = copy.copy(response)  # (httpx's own pickled state: detached, its body kept)
    shared.headers = httpx.Headers(hidden_values(response.headers.multi_items()))
    shared.history = [_shareable(earlier) for earlier in response.history]  # (redirects)
    request = response._request
    content = shared.__dict__.get("_content")  # (the body read, httpx's own field)
    redactor = Redactor([]) if request is None else Redactor.for_request(request)
    if request is not None:
        shared.request = shareable_request(request)
    if isinstance(content, bytes):
        shared._content = redactor.scrub_bytes(
            content, cut=was_cut(response), at_most=PICKLED_BODY_AT_MOST
        )
    return shared


#: The most of a response's body a pickled error carries (bytes, about): the first MiB,
#: as much as a streamed call reads of an error answer. Scrubbing the request's secrets
#: out of it takes time in proportion (about 1 s for 16 MB that is not text), and the
#: error's own ``body`` keeps 64 KiB.
PICKLED_BODY_AT_MOST: Final = 1024 * 1024


def shareable_request(request: httpx.Request) -> httpx.Request:
    """The copy of ``request`` a pickled error carries: its method, its URL redacted, its
    headers with the values of secret ones hidden, and no body (see :func:`_shareable`)."""
    from retrysafe.redact import hidden_values, redact_url

    headers = httpx.Headers(hidden_values(request.headers.multi_items()))
    return httpx.Request(request.method, redact_url(request.url), headers=headers)


def _rebuild(cls: type[ApiError], state: dict[str, Any], message: str) -> ApiError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


#: Methods that only read (RFC 9110's safe methods): whether the server acted on one does
#: not matter before it is sent again.
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


def _received_note(error: ApiError) -> str:
    """Whether the server may have acted on the request, for an error that ends with no
    usable answer: before a write is sent again, the caller must know."""
    if error.processed == "no":
        if any(record.status is not None for record in error.history):
            # (an attempt answered 503 or 429: the server got the request and refused it
            # before doing the work, so "never received it" would be false; trial69)
            return "; the server did not act on it"
        return "; the server never received it"
    if error.method in _SAFE_METHODS:
        return ""  # (reading it twice changes nothing: nothing to check before sending again)
    note = "; the server may have processed it: check before sending a write again"
    if error.idempotency_key is not None:
        note += f", or resend it under the same idempotency key ({error.idempotency_key})"
    return note


#: Where a client error's advice points to learn what was wrong (when a body came).
_SEE_BODY: Final = " (see .body)"


class ClientError(ApiError):
    """The request itself is wrong (400, 401, 403, 404, 422...): fix it; repeating won't help.

    Unless ``retryable``: a 408, or a 409 saying another request under the same
    idempotency key is still running, may be answered later.
    """

    advice = f"fix the request{_SEE_BODY}; repeating it will not help"

    def _advice(self) -> str:
        if self.reason == "result_not_replayable":
            # (nothing is wrong with the request: it ran, and sending it under a new key
            # would run it again)
            return (
                "the server already ran this request under its idempotency key "
                f"({self.idempotency_key}) but kept no answer to replay: check its outcome "
                "there before acting on it, and do not send it again under a new key"
            )
        if self.reason == "idempotency_key_reused":
            return (
                f"the server already holds the idempotency key ({self.idempotency_key}) for "
                "another request (another body, method or path), and did not run this one: "
                "a different request needs a key of its own; the same one must be sent "
                "exactly as it was first"
            )
        if not self.retryable:
            if self.body is None:  # (no body came, or it was not read: none to see)
                return super()._advice().replace(_SEE_BODY, "")
            return super()._advice()
        if self.status == 409 and self.idempotency_key is not None:
            return (
                "another request under the same idempotency key is still running on the "
                "server (or the server running it stopped, and its claim has not lapsed yet); "
                "try again later under the same key for its result"
            )
        return "the server may take it later; try again later"


class RateLimited(ApiError):
    """429 "too fast" that outlasted the retries (or that a policy leaving 429 out of
    ``retry_statuses`` does not wait out): slow down and try again after ``retry_after``."""

    advice = "slow down: send fewer requests"

    def __init__(self, *, retry_after: float | None = None, **fields: Any) -> None:
        self.retry_after = retry_after
        super().__init__(**fields)


class QuotaExhausted(ApiError):
    """429 with the quota header at 0: out of credits; nothing helps until the quota resets."""

    advice = "out of credits: top up or wait for the quota to renew; retrying will not help"


class ServerError(ApiError):
    """The server failed (5xx) on every attempt allowed: try later or report it upstream.

    ``retry_after`` is the wait the last response asked for (its ``Retry-After``), if any.
    """

    advice = "the server is failing; try again later or contact its operators"

    def __init__(self, *, retry_after: float | None = None, **fields: Any) -> None:
        self.retry_after = retry_after
        super().__init__(**fields)

    def _message(self, body_excerpt: str) -> str:
        if self.idempotency_key is None:
            return super()._message(body_excerpt)
        # A gateway's 5xx may come after the server acted: as for a lost answer, whether
        # it may have, and the key that gets its result (unkeyed, a write was not repeated,
        # and its own advice says so).
        return super()._message(body_excerpt) + _received_note(self)


class TransportError(ApiError):
    """No usable response: the connection failed, reset or timed out.

    ``sent`` is another name for ``processed``, kept from the first releases:
    ``"no"`` when the request never reached the server (safe to repeat), ``"maybe"``
    when it may have been processed (check before repeating a write).
    """

    advice = "no usable answer came (connect, timeout or reset); check the network or try later"

    def _advice(self) -> str:
        if self.outcome == "invalid_request":
            # httpx refused to send the request as built (e.g. a header value it cannot
            # write): nothing left this process, and no network will fix it.
            return (
                "the request could not be sent as built: httpx refused a header or the body "
                "(a header value with a space at either end or a line break, say; the "
                "error's __cause__ names it); fix it"
            )
        if self.outcome == "pool_timeout":
            # The attempt's time went on waiting for a connection of the client's own:
            # nothing reached the server, and the network is not to blame.
            return (
                "the client's connection pool stayed full for the attempt's whole time (more "
                "requests at once than httpx.Limits(max_connections=...) allows, each held "
                "as long as the server takes); send fewer at once, or raise the limit"
            )
        if self.outcome == "unsupported_protocol":
            # The URL has no scheme httpx can send (a relative URL without base_url, a
            # typo'd or missing scheme): no network will fix it either.
            return (
                "the URL cannot be sent: it needs http:// or https:// (a relative URL needs "
                "the client's base_url); fix it"
            )
        return super()._advice()

    @property
    def sent(self) -> Literal["no", "maybe"]:
        """The same fact as :attr:`processed` (the name this error first had for it)."""
        return self.processed

    def _message(self, body_excerpt: str) -> str:
        if self.reason == "unsafe_to_repeat":
            return super()._message(body_excerpt)
        return super()._message(body_excerpt) + _received_note(self)


class BadResponse(ApiError):
    """The response was unreadable, truncated or rejected by a rule."""

    advice = "the response could not be used; check the API's status or the rule that rejected it"

    def _message(self, body_excerpt: str) -> str:
        # A body cut off, or one a rule rejected, came after the server took the request:
        # a write may have been done, and its key gets the result (trial72).
        if self.reason == "unsafe_to_repeat":
            return super()._message(body_excerpt)
        return super()._message(body_excerpt) + _received_note(self)


class Refused(ApiError):
    """retrysafe's own load protection refused to send this call, or its next retry.

    Not the server's answer: the dependency's retry budget, circuit breaker,
    cooldown or pacing (``protection``) said no. ``detail`` names the setting
    behind it with the real numbers; ``retry_after`` is when it would say yes
    (None if unknown); ``attempts`` says how many this call had sent before (0:
    nothing was sent), and ``status``/``outcome`` what the last one got.
    """

    protection: ClassVar[str] = "load protection"

    def __init__(
        self, *, retry_after: float | None = None, detail: str = "", **fields: Any
    ) -> None:
        self.retry_after = retry_after
        self.detail = detail
        super().__init__(**fields)

    def _message(self, body_excerpt: str) -> str:
        refused = "the call" if self.attempts == 0 else "a retry"
        text = f"{self.method} {self.url}: retrysafe refused {refused} ({self.protection})"
        if self.detail:
            text += f": {self.detail}"
        if self.attempts == 0:
            text += "; nothing was sent"
        else:
            what = f"HTTP {self.status} {self.outcome}" if self.status is not None else self.outcome
            if body_excerpt:
                what += f" ({body_excerpt})"
            plural = "" if self.attempts == 1 else "s"
            text += f"; {self.attempts} attempt{plural} sent before, the last got {what}"
        return f"{text}; {self._advice()}"


class CircuitOpen(Refused):
    """The dependency's circuit breaker is open: fail fast rather than add to an outage.

    ``retry_after`` is how long until the breaker lets a probe through, if known.
    """

    protection = "circuit breaker"
    advice = (
        "the dependency has been failing; wait for it to recover (BreakerSettings tunes "
        "this; if only some of its endpoints fail, a narrower dependency=, such as "
        "dependency_by_path(1), keeps the others apart)"
    )


class BudgetExhausted(Refused):
    """The dependency's retry budget is spent: retries are already too large a share
    of the traffic to it, as during an outage."""

    protection = "retry budget"
    advice = "retries to this dependency are over their share (BudgetSettings tunes this)"


class CooldownActive(Refused):
    """A 429's Retry-After paused every caller of the dependency for longer than this
    call may wait (or than ``max_retry_after``)."""

    protection = "cooldown"
    advice = (
        "the server asked every caller of this dependency to pause; if its limit is per "
        "endpoint, call with a narrower dependency=, such as dependency_by_path(1)"
    )


class PacingDelayed(Refused):
    """The dependency's pacing (``LimiterSettings.requests_per_second``) has no slot
    for this call before its deadline, or its queue of waiting callers is full (it
    already reaches ``LimiterSettings.max_cooldown`` ahead)."""

    protection = "pacing"
    advice = "lower the rate of calls or raise the deadline (LimiterSettings tunes this)"


class DeadlineExceeded(ApiError):
    """The call's deadline ran out before an attempt could succeed.

    ``attempts_too_short``: every attempt timed out, one at least given the policy's
    whole ``attempt_timeout``; the answer is slower than an attempt may take, and a longer
    deadline would only buy more attempts cut the same way."""

    advice = "out of time: raise the deadline or make the call cheaper"
    #: (a class default: errors pickled before the field existed read it as False)
    attempts_too_short = False

    def __init__(self, *, attempts_too_short: bool = False, **fields: Any) -> None:
        self.attempts_too_short = attempts_too_short
        super().__init__(**fields)

    def _advice(self) -> str:
        if self.attempts == 0 and self.earlier_hops_elapsed > 0:
            # (the redirect hop this error is about sent nothing; the chain's earlier hops,
            # which did, took the time: attempts and history count this hop's only)
            return (
                "no attempt started on this hop: less than the policy's min_attempt_time was"
                " left of the deadline after its redirect chain's earlier hops took"
                f" {self.earlier_hops_elapsed:.2f}s; raise the deadline (an enclosing"
                " retrysafe.deadline's too), or call the final URL directly"
            )
        if self.attempts == 0:  # (nothing was sent: "make the call cheaper" cannot apply)
            return (
                "no attempt started: the deadline had no room left for one (less than the"
                " policy's min_attempt_time; an enclosing retrysafe.deadline or a wait may"
                " have used it up); raise the deadline, or lower"
                " RetryPolicy(min_attempt_time=...) if it is above 0"
            )
        if self.attempts_too_short:
            # (trial98: a 3 s body under attempts of 2 s is cut every time)
            took = max(record.elapsed for record in self.history)
            allowed = max(record.timeout for record in self.history)
            return (
                f"out of time: every attempt timed out, the longest after {seconds_text(took)}"
                f" of the {seconds_text(allowed)} an attempt may take; if the server is slow"
                " rather than down, give an attempt longer (RetryPolicy(attempt_timeout=...),"
                " or httpx's own timeout if that cut them sooner): a longer deadline alone"
                " only buys more attempts cut the same way"
            )
        return super()._advice()

    def _message(self, body_excerpt: str) -> str:
        # An attempt that ran out of time may have reached the server and been acted on:
        # "raise the deadline" alone would invite sending a write again blind.
        if self.attempts == 0 or self.reason == "unsafe_to_repeat":
            return super()._message(body_excerpt)
        return super()._message(body_excerpt) + _received_note(self)


class RetryAfterTooLong(ApiError):
    """The server asked for a wait (``retry_after``) longer than the time or limit left.

    ``detail`` says which: the policy's ``max_retry_after``, or the time left of the
    deadline, with the time kept for the attempt after the wait."""

    advice = "the server asked to wait longer than this call may"
    #: (a class default: errors pickled before the field existed read it as "")
    detail = ""

    def __init__(self, *, retry_after: float, detail: str = "", **fields: Any) -> None:
        self.retry_after = retry_after
        self.detail = detail
        super().__init__(**fields)

    def _advice(self) -> str:
        if not self.detail:
            return super()._advice()
        return (
            f"the server asked to wait {seconds_text(self.retry_after)}, longer than this"
            f" call may: {self.detail}; try again in {seconds_text(self.retry_after)}"
        )
