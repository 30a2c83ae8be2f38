"""RetryMiddleware: an aiohttp client middleware driven by retrysafe's engine.

aiohttp 3.12 and later call client middlewares around each request they send
(``ClientSession(middlewares=(...,))``, or per request). This one turns each request
into one retrying call: it sends attempts through the rest of aiohttp's chain and
leaves every decision to the same :class:`~retrysafe.drive.Drive` and engine the
httpx shells use, so the retry table, Retry-After handling, errors and a shared
governor are the same::

    async with aiohttp.ClientSession(middlewares=(RetryMiddleware(),)) as session:
        async with session.get(url) as response:
            data = await response.json()

Each attempt, from connect to the last body byte, runs under one timeout of its
time on the event loop, so the call's deadline holds whatever the server trickles.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import sys
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import aiohttp
import anyio
from aiohttp import ClientHandlerType, ClientRequest, ClientResponse
from aiohttp.base_protocol import BaseProtocol
from aiohttp.multipart import MultipartWriter
from aiohttp.payload import BytesPayload, IOBasePayload
from yarl import URL

from retrysafe.aiohttp.errors import as_aiohttp_error
from retrysafe.aiohttp.failures import WaitedInThePool, attempt_failure, raised_downstream
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
from retrysafe.kept_body import READ_PIECE, BodyStart
from retrysafe.observe import EventHook
from retrysafe.policy import RetryPolicy
from retrysafe.request_facts import IDEMPOTENCY_HEADER, DependencyNamer, new_idempotency_key
from retrysafe.rewound_file import can_seek
from retrysafe.shell_settings import ShellSettings

__all__ = ["RetryMiddleware", "report_of"]

_AUTO_KEYED_METHODS = frozenset({"POST", "PATCH"})
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_REPORT_ATTRIBUTE = "_retrysafe_report"
_trail = RedirectTrail("retrysafe_aiohttp_redirect")

if sys.version_info >= (3, 11):
    #: Bounds an attempt on the event loop; raises TimeoutError when it runs out, and
    #: its ``expired()`` tells that TimeoutError from aiohttp's own (asyncio's costs
    #: about a third of anyio's cancel scope).
    _time_limit = asyncio.timeout
else:  # pragma: no cover - Python 3.10

    class _ScopeLimit:
        """anyio's cancel scope, asked as asyncio's ``Timeout`` is: has it run out?"""

        def __init__(self, scope: anyio.CancelScope) -> None:
            self._scope = scope

        def expired(self) -> bool:
            return self._scope.cancel_called

    @contextlib.asynccontextmanager
    async def _time_limit(seconds: float | None) -> AsyncIterator[_ScopeLimit]:
        with anyio.fail_after(seconds) as scope:
            yield _ScopeLimit(scope)


def report_of(response: ClientResponse) -> CallReport | None:
    """What the call behind ``response`` did (attempts, waits, key), or None if the
    response did not come through a :class:`RetryMiddleware`."""
    report = getattr(response, _REPORT_ATTRIBUTE, None)
    return report if isinstance(report, CallReport) else None


class RetryMiddleware:
    """An aiohttp client middleware that retries per ``policy`` and raises ``ApiError``.

    Args:
        policy: how to retry (attempts, timeouts, one deadline for the whole call).
        governor: load protection per dependency; pass the ``Governor`` an httpx
            ``retrysafe.AsyncClient`` uses to share its state.
        clock, hooks, dependency, deadline_header: as for ``retrysafe.AsyncRetryTransport``.
        idempotency: ``"auto"`` gives every POST and PATCH without an
            ``Idempotency-Key`` header a fresh key, the same on every attempt.
        raise_on_status: False: a call ending on a failing response returns that
            response (its report holds the error) instead of raising.
        stream: False (default): each attempt reads the whole body within its time,
            and the caller gets it from ``read()``/``text()``/``json()``. True: a
            success is handed over at its headers, the body unread (for streaming
            replies; retries end at the headers). Use a second middleware with
            ``stream=True`` per request (``session.get(url, middlewares=(...,))``)
            sharing the same ``governor`` to stream some calls only.

    Errors raised are retrysafe's and also aiohttp exceptions (see
    :mod:`retrysafe.aiohttp.errors`). aiohttp's ``ClientTimeout`` still applies, as
    the bound of the whole request including retries.
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
        stream: bool = False,
    ) -> None:
        self.settings = ShellSettings.build(
            policy=one_copy_at_a_time(policy, "RetryMiddleware"),
            clock=clock,
            governor=governor,
            hooks=hooks,
            dependency=dependency,
            raise_errors=True,
            deadline_header=deadline_header,
        )._replace(returns_answers=not raise_on_status)  # (else the error carries its body)
        self.idempotency = idempotency_mode(idempotency)
        self.raise_on_status = raise_on_status
        self.stream = stream

    @property
    def policy(self) -> RetryPolicy:
        """The policy of this middleware's calls."""
        return self.settings.policy

    @property
    def governor(self) -> Governor:
        """The load protection this middleware's calls share."""
        return self.settings.governor

    async def __call__(self, request: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
        """Send ``request`` as one retrying call through ``handler`` (aiohttp's chain)."""
        method = request.method.upper()
        headers = request.headers
        url = str(request.url)
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
            headers.items(),
            replayable=_replayable(body),
            stream=self.stream,
            chain=chain,
            content=body_bytes(body._value) if isinstance(body, BytesPayload) else None,
        )
        attempt = _Attempt(self.settings, request, handler)
        drive = Drive(self.settings, view)
        if drive.traced:
            attempt.trace_headers = TraceHeaders(view)
        try:
            step: Step = drive.next_attempt()
            while True:
                if type(step) is AttemptPlan:
                    step = await attempt.run(drive, step)
                elif type(step) is Wait:
                    await self.settings.clock.async_sleep(step.seconds)
                    step = drive.next_attempt()
                else:
                    break
        except BaseException as exc:
            drive.abandoned(exc)  # interrupted (a cancel, a KeyboardInterrupt)
            attempt.discard()
            raise
        finally:
            drive.close()
        return self._finish(drive, step, attempt.response)

    def _finish(self, drive: Drive, step: Step, response: ClientResponse | None) -> ClientResponse:
        """Return the response of a success; raise (or return) a failure's."""
        try:
            drive.finish(step)
        except ApiError as error:
            raise as_aiohttp_error(error, cause=error.__cause__, response=response) from (
                error.__cause__
            )
        if type(step) is Succeed:
            assert response is not None
            setattr(response, _REPORT_ATTRIBUTE, step.report)
            _trail.leave(drive.request, _redirect_target(response))
            return response
        assert isinstance(step, Fail)
        assert response is not None
        setattr(response, _REPORT_ATTRIBUTE, step.report)
        if not self.raise_on_status:
            return response
        raise as_aiohttp_error(step.error, cause=step.cause, response=response) from step.cause

    def __repr__(self) -> str:
        return f"RetryMiddleware(policy={self.policy!r})"


def _redirect_target(response: ClientResponse) -> str | None:
    """Where a redirect response points, resolved against its URL (None: not one)."""
    if response.status not in _REDIRECT_STATUSES:
        return None
    location = response.headers.get("Location")
    if not location:
        return None
    try:
        return str(response.url.join(URL(location)))
    except ValueError:
        return None


class _Progress:
    """How far the attempt in flight got: whether it started opening a connection, and
    whether it got one (so may have sent anything)."""

    __slots__ = ("connect_started", "connected", "marked", "started", "time_limit")

    def __init__(self) -> None:
        self.connected = False
        #: Whether the connector marks when it starts opening a connection for it.
        self.marked = False
        #: When the attempt started, and the time it has (``time.monotonic()``, seconds).
        self.started = 0.0
        self.time_limit = math.inf
        #: When the connector started opening a connection for it (its own connect, not
        #: a wait in the session's queue); None before.
        self.connect_started: float | None = None

    def start(self, time_limit: float, marked: bool) -> None:
        """A new attempt starts, with ``time_limit`` seconds."""
        self.connected = False
        self.marked = marked
        self.started = time.monotonic()
        self.time_limit = time_limit
        self.connect_started = None


#: The progress of the attempt the running task sends, for its connector to mark.
_sending: contextvars.ContextVar[_Progress | None] = contextvars.ContextVar(
    "retrysafe_aiohttp_attempt", default=None
)


def _marks_connecting(request: ClientRequest) -> bool:
    """Have the connector of ``request``'s session mark, on the progress of the attempt
    its task sends, when it starts opening a connection for it (once per connector);
    False where it cannot (aiohttp's insides changed, or no session).

    aiohttp's connector makes a request wait its turn when its ``limit`` (or
    ``limit_per_host``) is reached, and opens a connection only once one is free
    (``_create_connection``, in the request's task). An attempt cut before that waited
    in the client's own queue; one cut after, connecting to the server."""
    try:
        connector = request.session.connector
        if connector is None:
            return False
        if getattr(connector, "_retrysafe_marks_connecting", False):
            return True
        create = connector._create_connection
    except AttributeError:
        return False

    async def create_connection(*args: Any, **kwargs: Any) -> Any:
        progress = _sending.get()
        if progress is not None:
            progress.connect_started = time.monotonic()
        return await create(*args, **kwargs)

    connector._create_connection = create_connection  # type: ignore[method-assign]
    connector._retrysafe_marks_connecting = True  # type: ignore[attr-defined]
    return True


class _Attempt:
    """Sends one attempt of a call through aiohttp's handler, bounded by its time."""

    __slots__ = ("handler", "progress", "request", "response", "settings", "trace_headers")

    def __init__(
        self, settings: ShellSettings, request: ClientRequest, handler: ClientHandlerType
    ) -> None:
        self.settings = settings
        self.request = request
        self.handler = handler
        self.progress = _Progress()
        self.response: ClientResponse | None = None
        #: What a call instrument writes on each attempt's stand-in request (None: none
        #: follows the call), copied onto the request sent.
        self.trace_headers: TraceHeaders | None = None
        _note_connection(request, self.progress)

    async def run(self, drive: Drive, plan: AttemptPlan) -> Step:
        """Send the attempt and read as much as the engine needs, within its time."""
        self.discard()
        if _session_closed(self.request):
            # (closed by the caller between attempts: aiohttp's handler cannot send on it)
            raise aiohttp.ClientConnectionError(
                "the session was closed during the call: no more attempts are sent"
            )
        if self.trace_headers is not None:
            self.trace_headers.copy_onto(drive.request, self.request.headers)
        if plan.number > 1:
            # A retry: what the drive's view of the request carries of the cookies the
            # answers before it set (carried_cookies) goes on the request sent.
            _carry_cookie_header(drive, self.request)
        limit = plan.timeout
        header = self.settings.deadline_header
        if header is not None and math.isfinite(limit):
            self.request.headers[header] = f"{limit:.3f}"
        self.progress.start(limit, _marks_connecting(self.request))
        response: ClientResponse | None = None
        failure: Exception
        sending = _sending.set(self.progress)
        try:
            try:
                async with _time_limit(None if limit == math.inf else limit) as time_limit:
                    response = await self.handler(self.request)
                    # (an error answer's body only if the engine asks: see Call)
                    body = await _read(response) if plan.reads_at_once(response.status) else None
                    step = drive.returned(plan, _view_of(drive, response, body))
                    if type(step) is ReadBody:
                        body = await _read(response, step.at_most)
                        step = drive.returned(plan, _view_of(drive, response, body))
                self.response = response
                return step
            except aiohttp.ClientError as exc:
                if raised_downstream(exc) or _session_closed(self.request):
                    raise  # (a session closed under the attempt ends the call, as it is)
                if isinstance(exc, aiohttp.ConnectionTimeoutError) and self._queued():
                    # (the session's ClientTimeout(connect=...) covers its queue too)
                    failure = attempt_failure(
                        WaitedInThePool("no connection of the session came free in time")
                    )
                else:
                    failure = attempt_failure(exc)
            except TimeoutError as exc:
                if not time_limit.expired():
                    # aiohttp's own: the session's ClientTimeout(total=...), around the
                    # whole call, ran out. The caller waits no longer: no more attempts.
                    raise
                # The attempt's own time ran out: before a connection, nothing was sent.
                if self.progress.connected:
                    failure = attempt_failure(exc)
                elif self._queued():
                    failure = attempt_failure(
                        WaitedInThePool("no connection of the session came free in time")
                    )
                else:
                    failure = attempt_failure(aiohttp.ConnectionTimeoutError())
        except BaseException:
            if response is not None:
                response.close()
            raise
        finally:
            _sending.reset(sending)
        answer = None
        if response is not None:
            response.close()
            answer = _view_of(drive, response, None)  # (its head: the body did not come)
            self.response = response  # (an error raised on it still names it: its status)
        return drive.raised(plan, failure, during_body=answer is not None, answer=answer)

    def _queued(self) -> bool:
        """Whether the attempt in flight, cut, spent its time in its session's queue for
        a connection: the connector never handed it one, and started opening one for it
        only with less than half its time left (a connect given so little is the
        queue's doing, as a starved connect is on httpx). The client's own queue, as
        httpx's pool timeout: never sent, and no news of the server (taken for connect
        timeouts, such waits opened the circuit on a healthy server: trial91)."""
        progress = self.progress
        if not progress.marked or progress.connected:
            return False
        started = progress.connect_started
        return started is None or started - progress.started > progress.time_limit / 2

    def discard(self) -> None:
        """Release the previous attempt's response (its connection goes back to the pool)."""
        if self.response is not None:
            self.response.release()
            self.response = None


def _replayable(body: object) -> bool:
    """Whether aiohttp can send ``body`` again, the same: none, bytes (a string, a form,
    JSON), a file that can seek (aiohttp notes where the file was as it first sends it,
    and seeks back there before each send after), or a multipart body (``FormData``,
    ``MultipartWriter``) made of those alone. A stream or a generator is not: what it
    sends again depends on where it was left."""
    if body == b"" or isinstance(body, BytesPayload):
        return True
    if isinstance(body, IOBasePayload):
        # (aiohttp 3.12.0 neither seeks back nor has `consumed`: it would send the rest of
        # the file, so there a file body goes once)
        return getattr(body, "consumed", True) is False and can_seek(body._value)
    if isinstance(body, MultipartWriter):
        return all(_replayable(part) for part, _, _ in body)
    return False


def _carry_cookie_header(drive: Drive, request: ClientRequest) -> None:
    """Send the next attempt with the ``Cookie`` header the drive set on its view of the
    request from the cookies the retried answer set (:mod:`retrysafe.carried_cookies`).
    (The session's jar, which the middleware does not reach, is aiohttp's to fill.)"""
    cookie = drive.request.headers.get("cookie")
    if cookie is None:
        request.headers.popall("Cookie", None)
    else:
        request.headers["Cookie"] = cookie


def _session_closed(request: ClientRequest) -> bool:
    """Whether the session ``request`` is sent with has been closed (by its caller)."""
    session = getattr(request, "session", None)
    return session is not None and bool(session.closed)


def _note_connection(request: ClientRequest, progress: _Progress) -> None:
    """Have ``request`` mark ``progress`` once aiohttp hands it a connection to send on.

    aiohttp sends a request with ``request.send(connection)`` right after connecting;
    wrapping it on this one request is how a timeout before it (connecting) is told
    from one after (the request may have reached the server).
    """
    send = request.send

    async def send_on(connection: Any) -> ClientResponse:
        progress.connected = True
        return await send(connection)

    try:
        request.send = send_on  # type: ignore[method-assign, assignment]
    except AttributeError:  # pragma: no cover - a ClientRequest with __slots__
        progress.connected = True  # cannot tell: count it as maybe sent


async def _read(response: ClientResponse, at_most: int | None = None) -> bytes:
    """Read ``response``'s body, and leave it on ``response.content`` to be read again.

    ``read()`` keeps a copy that ``read()``, ``text()`` and ``json()`` return later, but
    leaves aiohttp's stream, ``response.content``, at its end. A caller that reads the
    stream (``content.read()``, ``iter_chunked()``, stripe's ``AIOHTTPClient``) would
    find it empty: the body was read here, for the engine, not by the caller. So the
    stream is replaced by one holding the whole body.

    ``at_most``: read only so much of it (an error answer a streamed call raises on, see
    ``retrysafe.kept_body.read_at_most``), leave the rest unread and close the
    connection; the response then holds the bytes read, as its stream and as what
    ``read()`` returns.
    """
    if at_most is None:
        body = await response.read()
    else:
        body = await _read_at_most(response, at_most)
        # read() would go to the connection, closed: it reads this stream instead, for
        # read(), text() and json() to return; the caller's stream is the next one
        response.content = _holding(body)
        await response.read()
    response.content = _holding(body)
    return body


def _holding(body: bytes) -> aiohttp.StreamReader:
    """An aiohttp stream that gives ``body``, then ends."""
    loop = asyncio.get_running_loop()
    stream = aiohttp.StreamReader(
        # (a protocol with no transport: nothing is read from a socket any more; and the
        # body fits under the stream's limit, so it never asks to pause reading)
        BaseProtocol(loop),
        limit=max(len(body), 2**16),
        loop=loop,
    )
    if body:
        stream.feed_data(body)
    stream.feed_eof()
    return stream


async def _read_at_most(response: ClientResponse, at_most: int) -> bytes:
    """The decoded body up to ``at_most`` bytes; the connection closed if more came."""
    start = BodyStart(at_most)
    async for chunk in response.content.iter_chunked(READ_PIECE):
        if not start.take(chunk):
            # The rest goes unread: its connection is closed, not the response, which
            # (released, as close() marks it) would refuse read() the bytes read.
            connection = response.connection
            if connection is not None:
                connection.close()
            break
    return start.content


def _view_of(drive: Drive, response: ClientResponse, body: bytes | None) -> Any:
    return response_view(response.status, response.headers.items(), body, drive.policy)
