"""RetryAdapter: requests' transport adapter driven by retrysafe's engine.

Mounted on a ``requests.Session``, it sends each attempt through requests' own
``HTTPAdapter`` (connection pools, TLS, proxies as configured) and leaves every
decision to the same :class:`~retrysafe.drive.Drive` and engine the httpx shells
use: same retry table, same Retry-After handling, same errors, and the same
governor when one is shared with httpx clients::

    session = requests.Session()
    adapter = RetryAdapter(policy=RetryPolicy(deadline=10))
    session.mount("http://", adapter)
    session.mount("https://", adapter)

The engine sees the requests objects through httpx views
(:mod:`retrysafe.foreign_shell`).
"""

from __future__ import annotations

import contextlib
import math
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import urljoin, urlparse

import requests
import requests.auth
from requests.adapters import HTTPAdapter
from requests.models import REDIRECT_STATI
from requests.sessions import SessionRedirectMixin
from requests.structures import CaseInsensitiveDict
from requests.utils import requote_uri, rewind_body
from urllib3.poolmanager import ProxyManager
from urllib3.util import Timeout as Urllib3Timeout

from retrysafe.attempt_plan import hard_end_after, phase_limit
from retrysafe.clock import Clock
from retrysafe.decisions import AttemptPlan, CallReport, Fail, ReadBody, Succeed, Wait
from retrysafe.drive import Drive, Step
from retrysafe.errors import ApiError
from retrysafe.foreign_shell import (
    RedirectTrail,
    TraceHeaders,
    body_bytes,
    idempotency_mode,
    one_copy_at_a_time,
    request_view,
    response_view,
)
from retrysafe.governor import Governor
from retrysafe.observe import EventHook
from retrysafe.policy import RetryPolicy
from retrysafe.redact import redact_urllib3_logs, unshown_value
from retrysafe.request_facts import IDEMPOTENCY_HEADER, DependencyNamer, new_idempotency_key
from retrysafe.requests.deadline_watch import Watch, bound_pools, current_watch, watchdog
from retrysafe.requests.errors import as_requests_error
from retrysafe.requests.failures import attempt_failure
from retrysafe.requests.kept_body import read_at_most, read_keeping_raw
from retrysafe.rewound_file import can_seek
from retrysafe.shell_settings import ShellSettings

__all__ = ["RetryAdapter", "report_of"]

_AUTO_KEYED_METHODS = frozenset({"POST", "PATCH"})
_REPORT_ATTRIBUTE = "_retrysafe_report"
_trail = RedirectTrail("retrysafe_requests_redirect")

#: requests' ``timeout=`` argument: seconds, a (connect, read) pair, or urllib3's Timeout.
TimeoutArg = float | tuple[float | None, float | None] | Urllib3Timeout | None


def report_of(response: requests.Response) -> CallReport | None:
    """What the call behind ``response`` did (attempts, waits, key), or None if the
    response did not come through a :class:`RetryAdapter`."""
    report = getattr(response, _REPORT_ATTRIBUTE, None)
    return report if isinstance(report, CallReport) else None


class RetryAdapter(HTTPAdapter):
    """A ``requests`` transport adapter that retries per ``policy`` and raises ``ApiError``.

    Args:
        policy: how to retry (attempts, timeouts, one deadline for the whole call).
        governor: load protection (retry budget, circuit breaker, cooldowns) per
            dependency; pass the ``Governor`` an httpx ``retrysafe.Client`` uses to
            share its state. Default: one of the adapter's own.
        clock, hooks, dependency, deadline_header: as for ``retrysafe.RetryTransport``.
        idempotency: ``"auto"`` gives every POST and PATCH without an
            ``Idempotency-Key`` header a fresh key, the same on every attempt;
            ``"off"`` (default) keys only requests that carry the header.
        raise_on_status: True (default): a call that ends on a failing response raises
            its ``ApiError``, as a call that got no response does. False: such a call
            returns its last response instead (``report_of(response).error`` holds the
            error), as urllib3's ``Retry(raise_on_status=False)`` did.
        pool_connections, pool_maxsize, pool_block: as for ``HTTPAdapter``.

    Every error raised is retrysafe's and also a requests exception (see
    :mod:`retrysafe.requests.errors`). ``timeout=`` given to requests still bounds
    each socket operation; each attempt's own time, and the call's deadline, bound
    the attempt as a whole, from connect to the last body byte (the socket is shut
    down when it runs out). With ``stream=True`` the attempt ends at the headers of a
    success and the body is handed over unread.
    """

    def __init__(
        self,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        governor: Governor | None = None,
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | DependencyNamer | None = None,
        deadline_header: str | None = None,
        idempotency: Literal["off", "auto"] = "off",
        raise_on_status: bool = True,
        pool_connections: int = 10,
        pool_maxsize: int = 10,
        pool_block: bool = False,
    ) -> None:
        self.settings = ShellSettings.build(
            policy=one_copy_at_a_time(policy, "RetryAdapter"),
            clock=clock,
            governor=governor,
            hooks=hooks,
            dependency=dependency,
            raise_errors=True,
            deadline_header=deadline_header,
        )._replace(returns_answers=not raise_on_status)  # (else the error carries its body)
        self.idempotency = idempotency_mode(idempotency)
        redact_urllib3_logs()  # urllib3 logs each request's query at DEBUG
        self.raise_on_status = raise_on_status
        # requests' own retries stay off: every repeat is the engine's decision.
        super().__init__(
            pool_connections=pool_connections,
            pool_maxsize=pool_maxsize,
            max_retries=0,
            pool_block=pool_block,
        )

    @property
    def policy(self) -> RetryPolicy:
        """The policy of this adapter's calls."""
        return self.settings.policy

    @property
    def governor(self) -> Governor:
        """The load protection this adapter's calls share."""
        return self.settings.governor

    # -- requests' hooks ---------------------------------------------------------------

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        bound_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> ProxyManager:
        manager: ProxyManager = super().proxy_manager_for(proxy, **proxy_kwargs)
        bound_pools(manager)
        return manager

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: TimeoutArg = None,
        verify: bool | str = True,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """Send ``request`` as one retrying call; raise its ``ApiError`` if it fails."""
        method = (request.method or "GET").upper()
        headers = request.headers
        url = request.url or ""
        # (the redirect's next hop, if it is one: a 307 or 308 keeps the hop's key)
        chain, hop_key = _trail.take(url, method)
        if (
            self.idempotency == "auto"
            and method in _AUTO_KEYED_METHODS
            and not (headers.get(IDEMPOTENCY_HEADER) or "").strip()  # (a blank one is no key)
        ):
            headers[IDEMPOTENCY_HEADER] = hop_key or new_idempotency_key()
        body = request.body
        view = request_view(
            method,
            url,
            _header_pairs(headers),
            replayable=body is None or isinstance(body, (bytes, str)) or _rewindable(request),
            stream=stream,
            chain=chain,
            content=body_bytes(body),
        )
        attempt = _Attempt(self, request, stream, timeout, verify, cert, proxies)
        drive = Drive(self.settings, view)
        if drive.traced:
            attempt.trace_headers = TraceHeaders(view)
        try:
            step: Step = drive.next_attempt()
            while True:
                if type(step) is AttemptPlan:
                    step = attempt.run(drive, step)
                elif type(step) is Wait:
                    self.settings.clock.sleep(step.seconds)
                    step = drive.next_attempt()
                else:
                    break
        except BaseException as exc:
            drive.abandoned(exc)  # interrupted (a KeyboardInterrupt)
            attempt.discard()
            raise
        finally:
            drive.close()
        return self._finish(drive, step, attempt)

    def _finish(self, drive: Drive, step: Step, attempt: _Attempt) -> requests.Response:
        """Return the response of a success; raise (or return) a failure's."""
        response = attempt.response
        try:
            drive.finish(step)
        except ApiError as error:
            raise as_requests_error(
                error, cause=error.__cause__, response=response, request=attempt.request
            ) from error.__cause__
        if type(step) is Succeed:
            assert response is not None
            setattr(response, _REPORT_ATTRIBUTE, step.report)
            _trail.leave(drive.request, _redirect_target(response))
            _hand_over_body(response, attempt.timeout[1])
            return response
        assert isinstance(step, Fail)
        assert response is not None
        setattr(response, _REPORT_ATTRIBUTE, step.report)
        _hand_over_body(response, attempt.timeout[1])  # (a final answer, unread: yours)
        if not self.raise_on_status or _challenge_to_answer(attempt.request, response):
            return response
        raise as_requests_error(
            step.error, cause=step.cause, response=response, request=attempt.request
        ) from step.cause

    def __repr__(self) -> str:
        return f"RetryAdapter(policy={self.policy!r})"


def _carry_cookie_header(drive: Drive, request: requests.PreparedRequest) -> None:
    """Send the next attempt with the ``Cookie`` header the drive set on its view of the
    request from the cookies the retried answer set (:mod:`retrysafe.carried_cookies`).
    (The session's jar, which the adapter cannot reach, keeps only the final answer's.)"""
    cookie = drive.request.headers.get("cookie")
    if cookie is None:
        request.headers.pop("Cookie", None)
    else:
        request.headers["Cookie"] = cookie


def _hand_over_body(response: requests.Response, read: float | None) -> None:
    """The caller reads the body of ``response`` (streamed) itself now: its reads get the
    caller's own read timeout, not the attempt's.

    The attempt's read timeout holds what the deadline had left when the attempt started,
    which after a retry may be less than a gap between two chunks of a healthy body.
    urllib3 set it on the connection's socket, which the body's reads go on using."""
    if response._content_consumed:  # type: ignore[attr-defined]
        return
    sock = getattr(getattr(response.raw, "_connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.settimeout(read)


def _within_total(given: object, total: float | None) -> float | None:
    """One of urllib3's ``Timeout`` phases in seconds (None: no limit), no longer than
    ``total``; a phase left at urllib3's default is the socket default, as in urllib3."""
    if given is Urllib3Timeout.DEFAULT_TIMEOUT:
        given = socket.getdefaulttimeout()
    if not isinstance(given, (int, float)) or (total is not None and total < given):
        return total
    return given


def _challenge_to_answer(request: requests.PreparedRequest, response: requests.Response) -> bool:
    """Whether ``response`` is an authentication challenge that a hook on ``request`` may
    answer by sending the request again: a 401 with ``WWW-Authenticate``, to a request
    that carried no credentials yet, with a response hook of an auth handler's
    (``HTTPDigestAuth`` and other ``requests.auth.AuthBase`` handlers that answer a
    challenge register one; a logging hook is no answer).

    Such a response goes back to requests even when failures raise: the hooks run on
    what the adapter returns, so a raised 401 would end the handshake before its
    second step (and a 401 to a request that did carry credentials still raises).
    """
    return (
        response.status_code == 401
        and "WWW-Authenticate" in response.headers
        and "Authorization" not in request.headers
        and any(
            isinstance(getattr(hook, "__self__", None), requests.auth.AuthBase)
            for hook in request.hooks.get("response", ())
        )
    )


#: requests' own reading of a redirect's Location (a method that uses no session state).
_REDIRECTS = SessionRedirectMixin()


def _redirect_target(response: requests.Response) -> str | None:
    """The URL requests sends a redirect's next hop to (None: not a redirect).

    Worked out as ``Session.resolve_redirects`` does, re-quoting included (a Location
    of ``/next step`` is followed to ``/next%20step``): the next hop continues the
    chain only if its URL is exactly this one.
    """
    # The status first: ``is_redirect`` looks for a Location header first, and on
    # requests' headers a name that is missing costs a KeyError raised and caught.
    if response.status_code not in REDIRECT_STATI:
        return None
    location = _REDIRECTS.get_redirect_target(response)
    if not location:
        return None
    if location.startswith("//"):  # scheme-relative
        location = f"{urlparse(response.url).scheme}:{location}"
    parsed = urlparse(location)
    location = parsed.geturl()
    if not parsed.netloc:
        return urljoin(response.url, requote_uri(location))
    return requote_uri(location)


def _followed(response: requests.Response) -> bool:
    """Whether ``response`` is a redirect requests may follow: it reads the body before
    it follows, so a streamed call reads it within the attempt (its chain's time) too."""
    return response.status_code in REDIRECT_STATI and "location" in response.headers


class _CutShort(Exception):
    """The watchdog ended the attempt, yet requests returned what it had read."""


def _rewindable(request: requests.PreparedRequest) -> bool:
    """Whether ``request``'s body is a file requests can seek back to where it began
    (``requests.utils.rewind_body``): requests noted its position as it prepared it, and
    the file says it can seek. (A pipe, a generator: spent once sent.)"""
    if not isinstance(getattr(request, "_body_position", None), int):
        return False
    return callable(getattr(request.body, "seek", None)) and can_seek(request.body)


class _Attempt:
    """Sends one attempt of a call through ``HTTPAdapter.send``, bounded by its time."""

    __slots__ = (
        "adapter",
        "cert",
        "proxies",
        "request",
        "response",
        "streamed",
        "timeout",
        "trace_headers",
        "verify",
    )

    def __init__(
        self,
        adapter: RetryAdapter,
        request: requests.PreparedRequest,
        streamed: bool,
        timeout: TimeoutArg,
        verify: bool | str,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None,
        proxies: Mapping[str, str] | None,
    ) -> None:
        self.adapter = adapter
        self.request = request
        #: The caller streams the body (``stream=True``): one read here keeps its raw bytes.
        self.streamed = streamed
        self.timeout = _connect_and_read(timeout)
        self.verify = verify
        self.cert = cert
        self.proxies = proxies
        #: The last attempt's response (None if it got none).
        self.response: requests.Response | None = None
        #: What a call instrument writes on each attempt's stand-in request (None: none
        #: follows the call), copied onto the request sent.
        self.trace_headers: TraceHeaders | None = None

    def run(self, drive: Drive, plan: AttemptPlan) -> Step:
        """Send the attempt and read as much as the engine needs, within its time."""
        self.discard()
        if self.trace_headers is not None:
            self.trace_headers.copy_onto(drive.request, self.request.headers)
        if plan.number > 1:
            # A retry: what the drive's view of the request carries of the cookies the
            # answers before it set (carried_cookies) goes on the request sent.
            _carry_cookie_header(drive, self.request)
            if _rewindable(self.request):
                # (a file body: sent again from where it began, as requests does on a
                # redirect; the engine sends no retry of a body that cannot be)
                rewind_body(self.request)
        limit = phase_limit(plan)
        header = self.adapter.settings.deadline_header
        if header is not None and math.isfinite(plan.timeout):
            # (the attempt's whole time: the server has until its hard end)
            self.request.headers[header] = f"{plan.timeout:.3f}"
        watch: Watch | None = None
        token = None
        if math.isfinite(limit):
            started = time.monotonic()
            watch = watchdog.watch(started + hard_end_after(plan), started + limit)
            token = current_watch.set(watch)
        response: requests.Response | None = None
        try:
            try:
                response = HTTPAdapter.send(
                    self.adapter,
                    self.request,
                    stream=True,
                    timeout=self._bounded_timeout(limit),  # type: ignore[arg-type]
                    verify=self.verify,
                    cert=self.cert,
                    proxies=self.proxies,
                )
                if watch is not None and watch.expired:
                    # Cut in the head: http.client takes the bytes it had as the whole
                    # head, so this "response" is what was left of one.
                    response.close()
                    response = None
                    raise _CutShort()
                # (a success's body, and a redirect's, which requests reads to follow it; an
                # error answer's only if the engine asks: its status must not be lost to it)
                read_now = plan.reads_at_once(response.status_code) or _followed(response)
                body = self._read(response, watch) if read_now else None
                step = drive.returned(plan, _view_of(drive, response, body))
                if type(step) is ReadBody:
                    body = self._read(response, watch, step.at_most)
                    step = drive.returned(plan, _view_of(drive, response, body))
                self.response = response
                return step
            except _CutShort as exc:
                failure = attempt_failure(exc, expired=True)
            except (requests.RequestException, OSError) as exc:
                failure = attempt_failure(exc, expired=watch is not None and watch.expired)
            except UnicodeEncodeError as refused:
                raise unshown_value(refused, _SEND_BYTES) from None
            except Exception as exc:
                # urllib3 lets a few of its own through (an empty pool); a rule's bug is not
                # one of them and goes on to the caller.
                if type(exc).__module__.split(".")[0] != "urllib3":
                    raise
                failure = attempt_failure(exc, expired=watch is not None and watch.expired)
        except BaseException:
            if response is not None:
                response.close()
            raise
        finally:
            if watch is not None:
                watchdog.release(watch)
                current_watch.reset(token)  # type: ignore[arg-type]
        answer = None
        if response is not None:
            response.close()
            answer = _view_of(drive, response, None)  # (its head: the body did not come)
            self.response = response  # (an error raised on it still names it: its status)
        return drive.raised(plan, failure, during_body=answer is not None, answer=answer)

    def _bounded_timeout(self, limit: float) -> tuple[float | None, float | None]:
        """The caller's (connect, read) timeouts, neither longer than the attempt's time."""
        connect, read = self.timeout
        bound = None if limit == math.inf else limit
        if bound is not None:
            connect = bound if connect is None or connect > bound else connect
            read = bound if read is None or read > bound else read
        return connect, read

    def _read(
        self, response: requests.Response, watch: Watch | None, at_most: int | None = None
    ) -> bytes:
        """The whole body (``at_most``: only so much of it, see kept_body.read_at_most),
        unless the watchdog cut it short (then it is not the body). A streamed call's
        whole body stays readable from ``response.raw`` (see kept_body)."""
        if at_most is not None:
            body = read_at_most(response, at_most)
        elif self.streamed:
            body = read_keeping_raw(response)
        else:
            body = response.content
        if watch is not None and watch.expired:
            raise _CutShort()
        return body

    def discard(self) -> None:
        """Close the previous attempt's response (its connection goes back to the pool)."""
        if self.response is not None:
            self.response.close()
            self.response = None


#: What to do about a header value http.client cannot send as latin-1 (see unshown_value).
_SEND_BYTES = "send bytes, e.g. value.encode('utf-8'), if the server expects UTF-8"


def _view_of(drive: Drive, response: requests.Response, body: bytes | None) -> Any:
    return response_view(response.status_code, _header_pairs(response.headers), body, drive.policy)


def _header_pairs(headers: Mapping[str, str]) -> Iterable[tuple[str, str]]:
    """The (name, value) pairs of requests' headers, as ``headers.items()`` gives them.

    requests' ``CaseInsensitiveDict`` keeps exactly these pairs as the values of its
    ``_store``; reading them there skips the generic ``items()`` view, which looks
    every name up again (a few microseconds per view, two views per attempt).
    """
    if type(headers) is CaseInsensitiveDict:
        pairs: Iterable[tuple[str, str]] = headers._store.values()  # type: ignore[attr-defined]
        return pairs
    return headers.items()  # a plain mapping put there by hand, or a subclass


def _connect_and_read(timeout: TimeoutArg) -> tuple[float | None, float | None]:
    """requests' ``timeout=`` as a (connect, read) pair of seconds (None: no limit)."""
    if timeout is None:
        return None, None
    if isinstance(timeout, Urllib3Timeout):
        # (its read_timeout needs a connect under way once total is set: urllib3 counts
        # the connect against the total. Before one, urllib3 itself bounds connect and
        # each read by the total, and so does each attempt here.)
        total = timeout.total if isinstance(timeout.total, (int, float)) else None
        return (
            _within_total(timeout._connect, total),
            _within_total(timeout._read, total),
        )
    if isinstance(timeout, tuple):
        if len(timeout) != 2:
            raise ValueError(f"timeout must be seconds or a (connect, read) pair, got {timeout!r}")
        return timeout[0], timeout[1]
    return timeout, timeout
