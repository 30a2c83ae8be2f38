"""What ``Client`` and ``AsyncClient`` add around httpx's request, shared by both.

The per-call options (idempotency key, policy, dependency, streaming) ride on
the request; the report rides back on the response; a named operation is kept
in the client's journal around its one send.
"""

from __future__ import annotations

import hashlib
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, Protocol, TypeVar

import httpx
from httpx._types import HeaderTypes, RequestExtensions

from retrysafe.decisions import CallReport
from retrysafe.errors import ApiError
from retrysafe.idempotency.journal import Journal, JournalState, state_after
from retrysafe.policy import RetryPolicy
from retrysafe.redact import Redactor, unshown_value, url_text_secrets
from retrysafe.request_facts import (
    IDEMPOTENCY_HEADER,
    KEY_SENT_BEFORE_EXTENSION,
    idempotency_key_of,
    new_idempotency_key,
)
from retrysafe.transport import (
    OPTIONS_EXTENSION,
    AsyncRetryTransport,
    CallOptions,
    RetryTransport,
)

__all__ = [
    "READ_OPTIONS",
    "STREAMED_OPTIONS",
    "IdempotencyMode",
    "begin_operation",
    "NO_KEY_EXTENSION",
    "add_auto_key",
    "key_fits_a_header",
    "check_typed_url",
    "scrub_refused_url",
    "upload_headers",
    "check_idempotency_mode",
    "check_journal",
    "check_typed_headers",
    "finish_operation",
    "jar_of",
    "mark_stream",
    "report_of",
    "ResponseWithExtensions",
    "warn_per_request_cookies",
    "with_call_options",
    "wrap_transports",
]

#: ``"auto"`` gives every POST and PATCH a key of its own; ``"off"`` keys only on request.
IdempotencyMode = Literal["off", "auto"]

_AUTO_KEYED_METHODS = frozenset({"POST", "PATCH"})
#: Request extension of a call made with ``idempotency_key=False``: it goes without a key,
#: even from a client with ``idempotency="auto"``.
NO_KEY_EXTENSION: Final = "retrysafe.no_key"
#: Redirects that ask for the same request at another URL (a 303 points at a result).
_RESEND_ELSEWHERE: Final = frozenset({307, 308})


def check_idempotency_mode(mode: str) -> IdempotencyMode:
    if mode not in ("off", "auto"):
        raise ValueError(
            f"idempotency must be 'off' or 'auto' (a key on every POST and PATCH), got {mode!r}"
        )
    return "auto" if mode == "auto" else "off"


def check_journal(journal: Journal | None) -> Journal | None:
    """``journal``, checked to be one (a path is a common slip: it is what a Journal opens)."""
    if journal is not None and not isinstance(journal, Journal):
        hint = (
            f"open it first: journal=Journal({journal!r})"
            if isinstance(journal, str)
            else "e.g. journal=Journal('operations.sqlite3')"
        )
        raise TypeError(
            f"journal must be a retrysafe.idempotency.Journal, got {type(journal).__name__}; {hint}"
        )
    return journal


def warn_per_request_cookies() -> None:
    """Warn as httpx does of ``cookies=`` given to one request, which httpx deprecates.

    httpx's own ``request()`` gives this warning; retrysafe's clients build and send
    the request themselves, so they give it here.
    """
    # httpx's own words, so that a warnings filter written for httpx's warning matches.
    warnings.warn(
        "Setting per-request cookies=<...> is being deprecated, because the expected "
        "behaviour on cookie persistence is ambiguous. Set cookies directly on the client "
        "instance instead.",
        DeprecationWarning,
        stacklevel=3,
    )


def with_call_options(
    headers: HeaderTypes | None,
    extensions: RequestExtensions | None,
    *,
    idempotency_key: str | bool | None,
    policy: RetryPolicy | None,
    dependency: str | None,
) -> tuple[HeaderTypes | None, RequestExtensions | None]:
    """The request's headers with its key, and its extensions with the per-call options."""
    if idempotency_key is None and policy is None and dependency is None:
        return headers, extensions  # the usual call: nothing to add
    # Made first: CallOptions checks the policy and dependency, before any key is made.
    call_options = (
        None
        if policy is None and dependency is None
        else CallOptions(policy=policy, dependency=dependency)
    )
    options = dict(extensions or {})
    if idempotency_key is False:
        options[NO_KEY_EXTENSION] = True  # (not even idempotency="auto"'s: see add_auto_key)
    elif idempotency_key is not None:
        if idempotency_key is not True:
            _check_key(idempotency_key)
        if headers:
            _check_one_key(httpx.Headers(headers), idempotency_key)
        if idempotency_key is True:
            # One key for the whole call: built once here, so every attempt sends it.
            idempotency_key = new_idempotency_key()
        headers = httpx.Headers(headers)
        headers[IDEMPOTENCY_HEADER] = idempotency_key
    if call_options is not None:
        options[OPTIONS_EXTENSION] = call_options
    return headers, options


def _check_key(idempotency_key: object) -> None:
    """Refuse an ``idempotency_key=`` that is no key: not a non-empty string, or not what
    a header carries as it is."""
    if not isinstance(idempotency_key, str) or not idempotency_key.strip():
        raise ValueError(
            "idempotency_key must be True (make one) or a non-empty string, "
            f"got {idempotency_key!r}"
        )
    if not key_fits_a_header(idempotency_key):
        raise ValueError(
            f"idempotency_key must be printable ASCII with no space at either end, as an "
            f"HTTP header value is, got {idempotency_key!r}; pass True for a fresh key, or "
            "derive one from your own id, e.g. hashlib.sha256(order_id.encode()).hexdigest()"
        )


def _check_one_key(headers: httpx.Headers, idempotency_key: str | bool) -> None:
    """Refuse a call given two keys: ``idempotency_key=`` and a different, non-blank
    ``Idempotency-Key`` in its headers (the same key again is one key). One would silently
    replace the other, and a write resent under a key its caller knows would go out under
    another, and be done twice."""
    given = {value.strip() for value in headers.get_list(IDEMPOTENCY_HEADER)} - {""}
    if given and given != {idempotency_key}:
        made = "True (make one)" if idempotency_key is True else "another key"
        raise ValueError(
            f"the call's headers carry an {IDEMPOTENCY_HEADER} and idempotency_key= is "
            f"{made}: give the key once, as idempotency_key= or as the header"
        )


def key_fits_a_header(key: str) -> bool:
    """Whether ``key`` is what an HTTP header carries as it is: printable ASCII, with no
    space at either end.

    httpx refuses any other character in a header given as ``headers=`` and h11 a
    space at either end, but a header set afterwards is sent as UTF-8: the server
    would store the key under bytes that the key read back (the error's, the report's)
    does not spell, and a write resent under that key would be a new one. The IETF
    draft's key is an ASCII string too."""
    return key.isascii() and key.isprintable() and key == key.strip()


def add_auto_key(request: httpx.Request) -> None:
    """``idempotency="auto"``: a key of its own for a POST or PATCH that carries none.

    Made as the request is sent, after httpx merged the client's default headers into
    it: a key the caller set (in the call's headers or the client's) is kept, and a
    request built with ``build_request()`` and sent with ``send()`` gets one too. A
    blank key header is no key, and is replaced. ``idempotency_key=False`` asks for
    none.
    """
    if (
        request.method in _AUTO_KEYED_METHODS
        and NO_KEY_EXTENSION not in request.extensions
        and idempotency_key_of(request) is None
    ):
        request.headers[IDEMPOTENCY_HEADER] = new_idempotency_key()


def mark_stream(request: httpx.Request, stream: bool) -> None:
    """Tell the transport whether the caller reads the body itself (``stream=True``)."""
    options = request.extensions.get(OPTIONS_EXTENSION)
    if options is None:
        options = STREAMED_OPTIONS if stream else READ_OPTIONS
    elif not isinstance(options, CallOptions):
        return  # (left as it is: the transport's drive refuses it, before anything is sent)
    elif options.stream != stream:
        options = CallOptions(policy=options.policy, dependency=options.dependency, stream=stream)
    request.extensions[OPTIONS_EXTENSION] = options


#: The options of a call with none of its own that streams its body, and of one that does
#: not (the clients put one of these on every such request).
STREAMED_OPTIONS = CallOptions(stream=True)
READ_OPTIONS = CallOptions()


class ResponseWithExtensions(Protocol):
    """A response that carries httpx's ``extensions``: an ``httpx.Response``, or the
    same response as an SDK built on an httpx fork annotates it (openai 3.x types its
    responses as ``httpx2.Response``, though the one an ``httpx.Client`` it was given
    returns is httpx's)."""

    @property
    def extensions(self) -> Mapping[str, Any]: ...


def _an_httpx2_response(response: object) -> bool:
    """Whether ``response`` is an ``httpx2.Response`` (one the openai SDK's own client
    returned: no report). Read only if httpx2 is loaded: otherwise none can exist."""
    httpx2 = sys.modules.get("httpx2")
    return httpx2 is not None and isinstance(response, httpx2.Response)


def report_of(response: httpx.Response | ResponseWithExtensions) -> CallReport | None:
    """What the call behind ``response`` did (attempts, waits, error), or None.

    None when the response did not come through retrysafe. The report is kept in
    ``response.extensions["retrysafe"]``; this reads it with its type.
    """
    if not isinstance(response, httpx.Response) and not _an_httpx2_response(response):
        raise TypeError(
            f"report_of takes an httpx.Response, got {type(response).__module__}."
            f"{type(response).__name__}; for requests use retrysafe.requests.report_of, "
            "for aiohttp retrysafe.aiohttp.report_of"
        )
    report = response.extensions.get(OPTIONS_EXTENSION)
    return report if isinstance(report, CallReport) else None


def scrub_refused_url(refused: httpx.InvalidURL, url: httpx.URL | str) -> None:
    """Scrub the secrets of the URL the caller typed out of httpx's refusal of it: httpx
    quotes the piece it could not parse, which for a password holding "?", "#" or "/"
    is a piece of the password ("Invalid port: 'SECRET'")."""
    if isinstance(url, str):
        Redactor(url_text_secrets(url)).scrub_exception(refused)


def check_typed_headers(headers: HeaderTypes | None) -> None:
    """Encode ``headers`` as httpx will, for a call or a client that hands them to httpx
    itself (``stream()``, the constructor): a value httpx cannot send is refused without
    being shown (see :func:`unshown_value`)."""
    if headers is not None:
        try:
            httpx.Headers(headers)
        except UnicodeEncodeError as refused:
            raise unshown_value(refused) from None


def check_typed_url(url: httpx.URL | str) -> None:
    """Parse ``url`` as httpx will, for a call that hands it to httpx's own ``stream()``:
    if httpx refuses it, its error goes without the URL's secrets (see
    :func:`scrub_refused_url`)."""
    if isinstance(url, str):
        try:
            httpx.URL(url)
        except httpx.InvalidURL as refused:
            scrub_refused_url(refused, url)
            raise


def upload_headers(headers: HeaderTypes | None, operation: str | None) -> HeaderTypes | None:
    """The headers of a multipart upload (``files=``) made under a name that outlives
    the call: a named operation's, or the idempotency key in its headers. The upload's
    boundary is derived from that name.

    httpx draws a random boundary for each multipart request, so the same upload would
    come out as other bytes when it is sent again (an operation run again after a crash,
    or a call resent under its key after an ambiguous failure): the journal would take
    it for a different request, and the server's idempotency check for a different body
    (422). A boundary derived from the name makes the same call give the same bytes. A
    Content-Type the caller set stays as it is; with no name, httpx's boundary stays.
    """
    merged = httpx.Headers(headers)
    name = operation if operation is not None else merged.get(IDEMPOTENCY_HEADER, "").strip()
    if not name or "content-type" in merged:
        return headers
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    merged["Content-Type"] = f"multipart/form-data; boundary=retrysafe-{digest}"
    return merged


def begin_operation(
    journal: Journal | None, operation: str, request: httpx.Request, key: str | bool | None
) -> Journal:
    """Record the operation durably and put its (possibly resumed) key on the request."""
    if journal is None:
        raise ValueError("operation= needs a journal: Client(journal=Journal('ops.sqlite3'))")
    if key is not None:
        raise ValueError("operation= keeps its own idempotency key; do not pass idempotency_key")
    if request.headers.get(IDEMPOTENCY_HEADER, "").strip():
        # (the journal's key would replace it: a write resent by hand under the header's
        # key would go out under another, and be done twice)
        raise ValueError(
            f"operation= keeps its own idempotency key; the request carries an "
            f"{IDEMPOTENCY_HEADER} header: drop it (the key is the journal's, in "
            "error.idempotency_key and the call's report)"
        )
    entry = journal.begin(operation, request)
    request.headers[IDEMPOTENCY_HEADER] = entry.key
    if entry.state in ("sent", "ambiguous"):
        # (a run before this one sent the key: its request may still be running there)
        request.extensions[KEY_SENT_BEFORE_EXTENSION] = True
    journal.mark_sent(operation)
    return journal


def finish_operation(journal: Journal, operation: str, outcome: httpx.Response | ApiError) -> None:
    if isinstance(outcome, ApiError):
        journal.finish(
            operation,
            state=state_after(outcome),
            attempts=outcome.attempts,
            status=outcome.status,
            reason=outcome.reason,
        )
        return
    report = report_of(outcome)
    attempts = report.attempts if report is not None else 1
    # A redirect that resends the request elsewhere, not followed: the write is not done
    # there, and the operation keeps its key for a run that follows it.
    state: JournalState = "failed" if outcome.status_code in _RESEND_ELSEWHERE else "done"
    journal.finish(
        operation, state=state, attempts=attempts, status=outcome.status_code, reason=None
    )


_Transport = TypeVar("_Transport")
_Shell = TypeVar("_Shell")


def wrap_transports(
    transport: _Transport,
    mounts: dict[Any, _Transport | None],
    wrap: Callable[[_Transport], _Shell],
) -> tuple[_Shell, dict[Any, _Shell | None]]:
    """Wrap the client's transport and every mounted one (proxies, custom mounts).

    httpx picks a transport per URL from these two; wrapping them all keeps
    httpx's own transport configuration intact.
    """
    _not_retrying_already(transport, "transport")
    for pattern, mounted in mounts.items():
        _not_retrying_already(mounted, f"the transport mounted at {pattern.pattern!r}")
    wrapped = {
        pattern: None if mounted is None else wrap(mounted) for pattern, mounted in mounts.items()
    }
    return wrap(transport), wrapped


def jar_of(client: httpx.Client | httpx.AsyncClient) -> Callable[[], httpx.Cookies | None]:
    """The client's cookie jar, read when asked (a client's ``cookies`` may be set anew),
    for its shells' :class:`~retrysafe.shell_settings.ShellSettings` (``client_cookies``);
    None once the client is gone. (A weak reference: the client holds its shells.)"""
    held = weakref.ref(client)

    def jar() -> httpx.Cookies | None:
        alive = held()
        return None if alive is None else alive.cookies

    return jar


def _not_retrying_already(transport: object, given_as: str) -> None:
    """Refuse a transport that retries already: the client wraps each of its transports
    in a retrying one, and two layers would nest (the inner one's retries counted as
    one attempt of the outer's, which retries less: see the nesting guard)."""
    if isinstance(transport, (RetryTransport, AsyncRetryTransport)):
        kind = type(transport).__name__
        raise TypeError(
            f"{given_as} is a retrysafe {kind}, and retrysafe's client retries through its "
            "transports itself: give the client the transport that sends (e.g. "
            "httpx.HTTPTransport(http2=True)) and the policy, governor and hooks as its own "
            f"arguments; or keep the {kind} under httpx's own client"
        )
