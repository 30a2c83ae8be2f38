"""What one attempt's outcome means: success, worth another try, or final.

:func:`classify_response` and :func:`classify_exception` turn an outcome into a
:class:`Verdict`. They answer only "could asking again change the answer, and
might the server already have acted?"; whether a retry actually happens
(attempts, deadline, safety of repeating) is the engine's decision.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Final, Literal

import httpx

from retrysafe.frozen_value import frozen_value
from retrysafe.governor.breaker import Health
from retrysafe.hints import exhausted_until, retry_after_hint, server_says_retry
from retrysafe.policy import RetryPolicy

__all__ = [
    "SUCCESS",
    "AttemptTimedOut",
    "NEVER_SENT_OUTCOMES",
    "InvalidVerdict",
    "Processed",
    "Verdict",
    "classify_exception",
    "classify_response",
    "headers_decide",
    "health",
    "may_have_acted",
    "retryable_later",
    "status_reason",
]

#: Whether the server may have acted on the request: "no" means it certainly did not
#: (never connected, or it refused before doing any work), "maybe" means it might have.
Processed = Literal["no", "maybe"]

_KINDS: Final = frozenset({"success", "retry", "permanent"})
_PROCESSED: Final = frozenset({"no", "maybe"})

#: Statuses by which a server says it refused the request before doing any work: 529 is
#: "overloaded" (Anthropic's API; a 503 by another number, which its SDKs retry).
_REFUSED_BEFORE_WORK = frozenset({408, 429, 503, 529})


class InvalidVerdict(ValueError):
    """A :class:`Verdict` made with a wrong field. Raised in a rule, it is a bug in the
    rule and propagates: it is never taken for the body the rule could not parse."""


@frozen_value
class Verdict:
    """The meaning of one outcome.

    ``kind`` is ``"success"``, ``"retry"`` (another attempt may succeed) or
    ``"permanent"`` (the same request will fail the same way). ``reason`` is a
    stable snake_case code. ``after`` is the server's wait hint in seconds.
    ``processed`` says whether the server may have acted; the engine repeats a
    non-idempotent request only when it did not, or a key guards it.
    """

    kind: Literal["success", "retry", "permanent"]
    reason: str
    after: float | None = None
    processed: Processed = "maybe"

    def __post_init__(self) -> None:
        # A rule builds verdicts: a wrong one is refused here, with the field it got
        # wrong, not found later as a negative wait or a TypeError inside the engine.
        if self.kind not in _KINDS:
            raise InvalidVerdict(
                f"Verdict.kind must be 'success', 'retry' or 'permanent', got {self.kind!r}"
            )
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise InvalidVerdict(
                "Verdict.reason must be a short code naming the outcome, e.g. "
                f"'error_in_body', got {self.reason!r}"
            )
        after = self.after
        if after is not None and (
            isinstance(after, bool) or not isinstance(after, (int, float)) or not after >= 0
        ):
            raise InvalidVerdict(
                "Verdict.after must be None or the seconds to wait before the retry "
                f"(>= 0), got {after!r}"
            )
        if self.processed not in _PROCESSED:
            raise InvalidVerdict(
                f"Verdict.processed must be 'no' or 'maybe', got {self.processed!r}"
            )

    @classmethod
    def success(cls) -> Verdict:
        """The call succeeded; return the response."""
        return SUCCESS

    @classmethod
    def retry(
        cls, reason: str, after: float | None = None, *, processed: Processed = "maybe"
    ) -> Verdict:
        """Another attempt may succeed, after ``after`` seconds if given."""
        return cls("retry", reason, after, processed)

    @classmethod
    def permanent(cls, reason: str) -> Verdict:
        """Asking again cannot help; fail now."""
        return cls("permanent", reason)

    @property
    def retryable(self) -> bool:
        return self.kind == "retry"


#: The one success verdict (verdicts are frozen values, so one instance serves all).
SUCCESS = Verdict("success", "success")


class AttemptTimedOut(httpx.TimeoutException):
    """One attempt used up its whole time budget (headers and body together)."""


#: Stable reason codes per status. Written out rather than derived from
#: ``http.HTTPStatus`` because its phrases change between Python versions.
_STATUS_REASONS = {
    400: "bad_request",
    401: "unauthorized",
    402: "payment_required",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    410: "gone",
    411: "length_required",
    412: "precondition_failed",
    413: "content_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    416: "range_not_satisfiable",
    417: "expectation_failed",
    418: "im_a_teapot",
    421: "misdirected_request",
    422: "unprocessable_content",
    423: "locked",
    424: "failed_dependency",
    425: "too_early",
    426: "upgrade_required",
    428: "precondition_required",
    429: "too_many_requests",
    431: "request_header_fields_too_large",
    451: "unavailable_for_legal_reasons",
    500: "internal_server_error",
    501: "not_implemented",
    502: "bad_gateway",
    503: "service_unavailable",
    504: "gateway_timeout",
    505: "http_version_not_supported",
    507: "insufficient_storage",
    508: "loop_detected",
    511: "network_authentication_required",
    529: "overloaded",
}


def status_reason(status: int) -> str:
    """A stable snake_case code for a status: ``bad_gateway``, ``status_599``..."""
    return _STATUS_REASONS.get(status, f"status_{status}")


def retry_after_of(response: httpx.Response, now: float) -> float | None:
    """The response's wait hint in seconds: ``retry-after-ms`` when usable (the more
    precise), else ``Retry-After``; None when neither is usable."""
    return retry_after_hint(response, now)


def is_out_of_credits(response: httpx.Response, policy: RetryPolicy) -> bool:
    """A quota header reading exactly ``0``; a missing, empty, negative or garbled one is not."""
    return any(str(response.headers.get(name, "")).strip() == "0" for name in policy.quota_headers)


def is_replay(response: httpx.Response) -> bool:
    """The server answered from its idempotency store: its stored outcome is final."""
    return str(response.headers.get("idempotent-replayed", "")).strip().lower() == "true"


def headers_decide(response: httpx.Response, policy: RetryPolicy, *, keyed: bool) -> bool:
    """Whether an error answer's status and headers settle its verdict, so that its body,
    however it arrives (slowly, huge, cut off), cannot change it.

    Only three things read an error's body: a policy's rules; a keyed 409 that says
    nothing of its key in an ``Idempotency-Problem`` header, whose JSON body may (a
    problem document, Stripe's ``idempotency_error``); and a keyed 400 or 422, likewise
    for a key reused. A replay's verdict never rests on its key. Everything else, a
    429's quota and wait included, is read from the headers (see
    :func:`classify_response`).
    """
    if policy.rules:
        return False
    if not keyed or response.status_code not in _KEY_STATUSES or is_replay(response):
        return True
    headers = response.headers
    return _KEY_PROBLEM_HEADER in headers or "json" not in headers.get("content-type", "")


def classify_response(
    response: httpx.Response,
    policy: RetryPolicy,
    *,
    keyed: bool,
    now: float,
    key_may_be_in_use: bool = False,
) -> Verdict:
    """Classify a complete response (body read), as docs/retries.md tabulates.

    ``keyed``: the request carries an idempotency key. ``key_may_be_in_use``: an
    earlier attempt under that key may still be running on the server, so a 409 that
    says nothing of the key means it is in use (see :func:`_keyed_conflict`).

    Rules run first and may override anything; a rule raising ``ValueError``
    (say, ``response.json()`` on a truncated body) means the body is unreadable.
    A replayed response never turns into a retry: the stored outcome will not
    change; it is judged as the app's own answer, whatever its key. ``now`` is wall
    time, for HTTP-date Retry-After values.
    """
    if response.status_code < 400 and not policy.rules:
        return SUCCESS  # the hot path: a success needs no header looked at
    verdict = _apply_rules(response, policy)
    if is_replay(response):
        if verdict is None:
            # The key's request has ended, and this is its own answer: it says nothing of
            # the key (a replayed 409 is the app's, not "in use").
            verdict = _default_verdict(
                response, policy, keyed=False, key_may_be_in_use=False, now=now
            )
        if verdict.kind == "retry":
            return Verdict.permanent(verdict.reason)
        return verdict
    if verdict is not None:
        if verdict.kind == "retry" and verdict.after is None:
            verdict = dataclasses.replace(verdict, after=retry_after_of(response, now))
        return verdict
    verdict = _default_verdict(
        response, policy, keyed=keyed, key_may_be_in_use=key_may_be_in_use, now=now
    )
    return _heed_server(verdict, response, now)


#: Verdicts a server's ``x-should-retry: true`` does not reopen: the answer is final
#: whatever the server's generic retry advice says.
_FINAL_REASONS = frozenset({"quota_exhausted", "result_not_replayable", "idempotency_key_reused"})


def _heed_server(verdict: Verdict, response: httpx.Response, now: float) -> Verdict:
    """Let ``x-should-retry`` / ``Stripe-Should-Retry`` overturn the table's verdict.

    ``false`` makes a retryable outcome final (``server_said_no_retry``; a key in use
    stays ``idempotency_key_in_use``), keeping its wait and whether the server may have
    acted; ``true``
    makes a final one retryable (``server_said_retry``), as processed "maybe"
    unless the status says the server refused before any work, so a write
    without a key is still never repeated. A success, quota exhaustion or a key's
    unreplayable result stay as they are (a replay and a rule's verdict never get
    here).
    """
    if verdict.kind == "success" or verdict.reason in _FINAL_REASONS:
        return verdict
    says = server_says_retry(response)
    if says is None:
        return verdict
    if verdict.kind == "retry":
        if says:
            return verdict
        # Final now, keeping what the outcome told: the server's wait (the error's
        # retry_after, a 429's cooldown) and whether it may have acted. A key in use stays
        # one: an attempt under it may still be running there, whatever this answer says.
        reason = verdict.reason if verdict.reason in _KEY_ALREADY_USED else "server_said_no_retry"
        return Verdict("permanent", reason, verdict.after, verdict.processed)
    if not says:
        return verdict
    status = response.status_code
    processed: Processed = "no" if status in _REFUSED_BEFORE_WORK else "maybe"
    return Verdict.retry("server_said_retry", retry_after_of(response, now), processed=processed)


#: What a keyed 409 may say of its key, as the ``Idempotency-Problem`` header's value
#: (``retrysafe.idempotency``) or the end of its problem document's ``type`` (servers
#: following it without the header): the key's first request is still running; or it
#: ran, and its response could not be kept.
_IN_FLIGHT = "request-in-flight"
_NOT_REPLAYABLE = "result-not-replayable"
#: What a keyed 422 (or Stripe's 400) says when the key already names another request.
_KEY_REUSED = "key-reused"
_KEY_PROBLEM_HEADER: Final = "idempotency-problem"
#: The statuses whose verdict, for a keyed request, may rest on what the body says of the key.
_KEY_STATUSES: Final = frozenset({400, 409, 422})


def _key_statement(response: httpx.Response) -> tuple[str, str] | None:
    """What an error answer to a keyed request says of its key, and where it says so:
    ``("header", value)`` from an ``Idempotency-Problem`` header (``retrysafe.idempotency``),
    ``("problem", slug)`` from a problem document's ``type`` (its last segment, whole:
    servers following the middleware without the header), ``("stripe", "")`` from Stripe's
    ``{"error": {"type": "idempotency_error", ...}}``; None when it says nothing of it."""
    said = response.headers.get(_KEY_PROBLEM_HEADER)
    if said is not None:
        return "header", str(said).strip().lower()
    content_type = response.headers.get("content-type", "")
    if "json" not in content_type:
        return None
    try:
        document = response.json()
    except (ValueError, httpx.ResponseNotRead):
        return None
    if not isinstance(document, dict):
        return None
    if "problem+json" in content_type:
        kind = document.get("type")
        # ("...:key-reused" names key-reused; "...:not-key-reused" does not)
        return ("problem", re.split(r"[:/#]", kind)[-1]) if isinstance(kind, str) else None
    error = document.get("error")
    if isinstance(error, dict) and error.get("type") == "idempotency_error":
        return "stripe", ""
    return None


def _key_problem(response: httpx.Response) -> str | None:
    """What a 409 says of the request's key: ``request-in-flight``,
    ``result-not-replayable``, another problem the middleware's header names, or None when
    it says nothing of the key (it may be the app's own conflict).

    Stripe's error body, ``{"error": {"type": "idempotency_error", ...}}``, on a 409 is
    another request under the key still in progress (a key reused with other parameters is
    a 400)."""
    statement = _key_statement(response)
    if statement is None:
        return None
    where, said = statement
    if where == "stripe":
        return _IN_FLIGHT
    if where == "problem" and said not in (_IN_FLIGHT, _NOT_REPLAYABLE):
        return None
    return said


def _key_reused(response: httpx.Response) -> bool:
    """Whether a keyed 400 or 422 says the key was already used for another request:
    ``key-reused`` (``retrysafe.idempotency``'s 422, by header or problem type), or
    Stripe's ``idempotency_error`` on a 400 (its answer to a key reused; on a 409 the key
    is in use)."""
    statement = _key_statement(response)
    if statement is None:
        return False
    where, said = statement
    if where == "stripe":
        return response.status_code == 400
    return said == _KEY_REUSED


def _keyed_conflict(response: httpx.Response, now: float, *, key_may_be_in_use: bool) -> Verdict:
    """A 409 to a request with an idempotency key.

    The key is in use (retry, after the server's ``Retry-After``) when the server says
    so, or asks to be asked again later (``Retry-After``), or, saying nothing of the
    key, when an earlier attempt under it may still be running there. A key whose
    request ran but whose result was not kept is final. Any other 409 is the app's own
    conflict (a name taken, a version out of date): final, like a 409 without a key.
    """
    said = _key_problem(response)
    if said == _NOT_REPLAYABLE:
        # The work ran but its result was not kept: asking again cannot get it.
        return Verdict.permanent("result_not_replayable")
    if said == _IN_FLIGHT or (
        said is None and (key_may_be_in_use or "retry-after" in response.headers)
    ):
        # An attempt under this key still runs there: wait for it; the key guards the work.
        return Verdict.retry(
            "idempotency_key_in_use", retry_after_of(response, now), processed="no"
        )
    return Verdict.permanent(status_reason(409))


def _apply_rules(response: httpx.Response, policy: RetryPolicy) -> Verdict | None:
    for rule in policy.rules:
        try:
            verdict = rule(response)
        except InvalidVerdict:
            raise
        except ValueError:
            # A rule that cannot parse the body (response.json() on an HTML error page,
            # truncated JSON, an empty 200) has found an unreadable body, not a bug.
            # Any other exception is a bug in the rule and propagates.
            return Verdict.retry("unreadable_body")
        if verdict is not None:
            if not isinstance(verdict, Verdict):
                raise TypeError(
                    f"the rule {rule!r} returned {type(verdict).__name__}: a rule returns a "
                    "retrysafe.Verdict (e.g. Verdict.permanent('error_in_body')) or None"
                )
            return verdict
    return None


def _default_verdict(
    response: httpx.Response,
    policy: RetryPolicy,
    *,
    keyed: bool,
    key_may_be_in_use: bool,
    now: float,
) -> Verdict:
    status = response.status_code
    if status < 400:
        return Verdict.success()
    if status == 429:
        if is_out_of_credits(response, policy):
            return Verdict.permanent("quota_exhausted")
        after = retry_after_of(response, now)
        if after is None:  # no Retry-After: the announced reset says how long, if it is 0 left
            after = exhausted_until(response, now)
        if status not in policy.retry_statuses:
            # A policy that leaves 429 out of its statuses takes a rate limit as final; the
            # wait the server asked for still rides on the error, and still pauses the
            # dependency's other calls (the cooldown).
            return Verdict("permanent", "rate_limited", after, "no")
        return Verdict.retry("rate_limited", after, processed="no")
    if status == 409 and keyed:
        return _keyed_conflict(response, now, key_may_be_in_use=key_may_be_in_use)
    if keyed and (status == 400 or status == 422) and _key_reused(response):
        # The key already names another request: no attempt under it can succeed.
        return Verdict.permanent("idempotency_key_reused")
    if status in policy.retry_statuses:
        processed: Processed = "no" if status in _REFUSED_BEFORE_WORK else "maybe"
        return Verdict.retry(
            status_reason(status), retry_after_of(response, now), processed=processed
        )
    # (final, with the server's wait on it if it gave one: the error's retry_after)
    return Verdict("permanent", status_reason(status), retry_after_of(response, now))


_NEVER_SENT: tuple[tuple[type[Exception], str], ...] = (
    (httpx.ConnectTimeout, "connect_timeout"),
    (httpx.PoolTimeout, "pool_timeout"),
    (httpx.ConnectError, "connect_error"),
    (httpx.ProxyError, "proxy_error"),
)
#: The outcomes of an attempt that never reached the server (nothing of it was sent).
NEVER_SENT_OUTCOMES: Final = frozenset(reason for _, reason in _NEVER_SENT)
_MAYBE_SENT: tuple[tuple[type[Exception], str], ...] = (
    (AttemptTimedOut, "attempt_timeout"),
    (httpx.WriteTimeout, "write_timeout"),
    (httpx.ReadTimeout, "read_timeout"),
    (httpx.TimeoutException, "timeout"),
    (httpx.WriteError, "write_error"),
    (httpx.ReadError, "connection_reset"),
    (httpx.RemoteProtocolError, "remote_protocol_error"),
    (httpx.NetworkError, "network_error"),
)
_PERMANENT: tuple[tuple[type[Exception], str], ...] = (
    (httpx.UnsupportedProtocol, "unsupported_protocol"),
    (httpx.LocalProtocolError, "invalid_request"),
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions behind it: httpx's error, httpcore's, h2's."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def _from_h2(kind: type) -> bool:
    return kind.__module__.startswith("h2.")


def h2_protocol_error(exc: BaseException) -> bool:
    """Whether ``exc`` carries an error of the ``h2`` library (httpx's, around httpcore's,
    around h2's). httpcore raises every h2 protocol error on a connection as a
    ``LocalProtocolError``, an answer the server garbled (an undecodable or oversized
    header block) as much as a request h2 refuses to send."""
    return any(_from_h2(type(seen)) for seen in _chain(exc))


def _refused_at_stream_limit(exc: BaseException) -> bool:
    """Whether ``exc`` is h2 refusing to open the request's stream because the HTTP/2
    connection's streams are all open: nothing of the request was sent, and another
    connection may take it. (httpcore lets a request through to h2 while streams it
    forgot, those of attempts cut short, still count there.)"""
    return any(
        _from_h2(type(seen)) and type(seen).__name__ == "TooManyStreamsError"
        for seen in _chain(exc)
    )


#: HTTP/2's REFUSED_STREAM error code: the server reset the stream before any processing.
_REFUSED_STREAM: Final = 0x7


def _refused_unprocessed(exc: BaseException) -> bool:
    """Whether ``exc`` is the server saying, over HTTP/2, that it did not process the
    request (RFC 9113, section 8.7): a RST_STREAM with REFUSED_STREAM, or a GOAWAY whose
    last stream is 0, so that no stream of the connection was processed. (httpcore
    raises both as a RemoteProtocolError around h2's event.)"""
    for seen in _chain(exc):
        event = seen.args[0] if seen.args else None
        kind = type(event)
        if _from_h2(kind):
            if kind.__name__ == "StreamReset":
                return getattr(event, "error_code", None) == _REFUSED_STREAM
            if kind.__name__ == "ConnectionTerminated":
                return getattr(event, "last_stream_id", None) == 0
            return False
    return False


def classify_exception(exc: Exception, *, during_body: bool) -> Verdict:
    """Classify an exception by how far the request got.

    Errors before the connection was made mean the server never saw the
    request; anything later (a timeout waiting for the answer, a reset, a
    truncated or undecodable body) means it may have acted.
    """
    if during_body:
        if isinstance(exc, httpx.TimeoutException):
            return Verdict.retry("read_timeout")
        if isinstance(exc, httpx.DecodingError):
            return Verdict.retry("undecodable_body")
        return Verdict.retry("truncated_body")
    if isinstance(exc, httpx.RemoteProtocolError) and _refused_unprocessed(exc):
        return Verdict.retry("refused_stream", processed="no")
    for kinds, processed in ((_NEVER_SENT, "no"), (_MAYBE_SENT, "maybe")):
        for kind, reason in kinds:
            if isinstance(exc, kind):
                return Verdict.retry(reason, processed="no" if processed == "no" else "maybe")
    if isinstance(exc, httpx.LocalProtocolError) and _refused_at_stream_limit(exc):
        return Verdict.retry("stream_limit", processed="no")
    for kind, reason in _PERMANENT:
        if isinstance(exc, kind):
            # Refused on this side (bad URL scheme, an unsendable header): nothing left.
            return Verdict("permanent", reason, None, "no")
    if isinstance(exc, httpx.DecodingError):
        return Verdict.retry("undecodable_body")
    return Verdict.permanent("transport_error")


#: Reasons of a keyed 409 by which the server says an attempt under the key ran there.
_KEY_ALREADY_USED: Final = frozenset({"idempotency_key_in_use", "result_not_replayable"})


def may_have_acted(verdict: Verdict, response: httpx.Response | None) -> bool:
    """Whether the server may have acted on this attempt.

    A 4xx says it did not, except a 409 to a keyed request (our own earlier attempt
    under that key is still running there, or it ran and its result was not kept:
    ``result_not_replayable``, the work is done, whatever it returned), and a 4xx the
    server asks to be sent again (``x-should-retry: true``), which the verdict reads
    as maybe processed unless its status refuses before any work.
    """
    if verdict.reason in _KEY_ALREADY_USED:
        return True
    if (
        response is not None
        and 400 <= response.status_code < 500
        and verdict.reason != "server_said_retry"
    ):
        return False
    return verdict.processed == "maybe"


#: Final outcomes that asking again later may still fix (see :func:`retryable_later`).
_RETRYABLE_LATER: Final = frozenset({"rate_limited", "idempotency_key_in_use"})


def retryable_later(verdict: Verdict, response: httpx.Response | None) -> bool:
    """Whether a final outcome may still be fixed by asking again later: a rate limit the
    policy does not wait out (``retry_statuses`` without 429), or a key in use the server
    said not to ask again about now; never a replayed answer, which asking again only
    replays. The call stops all the same; its error says ``retryable``."""
    return verdict.reason in _RETRYABLE_LATER and not (response is not None and is_replay(response))


#: The outcomes of an attempt that ran out of time waiting for its answer (its own limit,
#: or httpx's read or write timeout): the breaker weighs them against how long healthy
#: answers take. (A connect timeout is not about answers: it always counts.)
TIMEOUT_REASONS: Final = frozenset({"attempt_timeout", "write_timeout", "read_timeout", "timeout"})


#: Outcomes of a request the client itself held back, never sent: its pool full, or its
#: HTTP/2 connection's streams all open. The dependency never saw it: they count neither
#: for nor against its health, and a retry of one is no extra load (see engine.py).
CLIENTS_OWN_QUEUE: Final = frozenset({"pool_timeout", "stream_limit"})


def health(verdict: Verdict, status: int | None) -> Health:
    """What an outcome says about the dependency: only server-side trouble is unhealthy.

    5xx, timeouts, transport errors and unreadable bodies count; 4xx (429 included)
    means the server is answering, and a permanent verdict is about the request. A pool
    timeout, or an HTTP/2 stream refused at its limit, is the client's own queue (more
    requests at once than its connections, or their streams): the dependency never saw
    the request, and the attempts holding them tell how it answers.
    """
    if verdict.kind == "success":
        return "healthy"
    if (
        verdict.kind == "permanent"
        or (status is not None and 400 <= status < 500)
        or verdict.reason in CLIENTS_OWN_QUEUE
    ):
        return "neutral"
    return "unhealthy"
