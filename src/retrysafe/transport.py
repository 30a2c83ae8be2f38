"""RetryTransport and AsyncRetryTransport: the I/O shells around the engine.

They wrap any httpx transport. Per request they build one :class:`Call`, then
only send attempts, read bodies within the attempt's time, and sleep as the
Call decides. There is no retry logic here.

Drop-in use keeps httpx's behaviour: the final response is returned whatever
its status, and a final transport failure re-raises httpx's own exception::

    client = httpx.Client(transport=retrysafe.RetryTransport())
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import socket
from collections.abc import Iterator, Sequence

import anyio
import httpx

from retrysafe.classify import AttemptTimedOut
from retrysafe.clock import Clock, SystemClock
from retrysafe.decisions import AttemptPlan, Decision, Fail, Succeed
from retrysafe.engine import Call, default_dependency
from retrysafe.governor import Governor
from retrysafe.nesting import RetryScope, retry_scope
from retrysafe.observe import EventHook, Observer
from retrysafe.policy import RetryPolicy
from retrysafe.redact import redact_httpx_logs
from retrysafe.scope import current_deadline
from retrysafe.watchdog import Alarm, watchdog

__all__ = ["AsyncRetryTransport", "CallOptions", "RetryTransport"]

#: The async attempt's cancel scope ends this much after its per-phase timeouts, so
#: httpx's own timeouts, which know how far the request got (a connect timeout means it
#: was never sent), fire first; the scope only bounds an attempt, such as a trickling
#: body, whose every phase kept within time.
_SCOPE_GRACE = 0.05

#: Request extension key under which a client passes per-call options.
OPTIONS_EXTENSION = "retrysafe"


@dataclasses.dataclass(frozen=True)
class CallOptions:
    """Per-call overrides carried in ``request.extensions["retrysafe"]``."""

    policy: RetryPolicy | None = None
    dependency: str | None = None


class _Shell:
    """What both shells share: configuration and turning a request into a Call."""

    def __init__(
        self,
        *,
        policy: RetryPolicy,
        clock: Clock | None,
        hooks: Sequence[EventHook],
        dependency: str | None,
        raise_errors: bool,
        governor: Governor | None,
        deadline_header: str | None,
    ) -> None:
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a retrysafe.RetryPolicy, got {type(policy).__name__}")
        self.policy = policy
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.governor = governor if governor is not None else Governor(clock=self.clock)
        self.deadline_header = deadline_header
        self.dependency = dependency
        self._observer = Observer(hooks)
        self._raise_errors = raise_errors
        redact_httpx_logs()

    def _new_call(self, request: httpx.Request, scope: RetryScope) -> Call:
        options = request.extensions.get(OPTIONS_EXTENSION)
        if not isinstance(options, CallOptions):
            options = CallOptions()
        dependency = options.dependency or self.dependency or default_dependency(request.url)
        return Call(
            request,
            policy=options.policy or self.policy,
            clock=self.clock,
            dependency=dependency,
            scope_deadline=current_deadline(),
            observer=self._observer,
            guard=self.governor.guard(dependency),
            retry_scope=scope,
            nested_attempts=self.governor.settings.nested_attempts,
        )

    def _prepare_attempt(
        self, request: httpx.Request, plan: AttemptPlan, timeouts: dict[str, float | None]
    ) -> None:
        """Bound each phase by the attempt's time and tell the server how long it has."""
        request.extensions["timeout"] = _attempt_timeouts(timeouts, plan.timeout)
        if self.deadline_header is not None and math.isfinite(plan.timeout):
            request.headers[self.deadline_header] = f"{plan.timeout:.3f}"

    def _give_up(self, fail: Fail) -> httpx.Response:
        """Hand a failure back the way this shell's caller expects it."""
        if fail.response is not None:
            # The report (with its error) rides on the response; httpx's auth and redirect
            # handling sees the response as usual, and retrysafe.Client raises afterwards.
            return fail.response
        if fail.cause is not None and not self._raise_errors:
            raise fail.cause
        raise fail.error from fail.cause


_PHASES = ("connect", "read", "write", "pool")


def _caller_timeouts(request: httpx.Request) -> dict[str, float | None]:
    """The per-phase timeouts the request came with, kept for every attempt to start from."""
    given = request.extensions.get("timeout") or {}
    return {phase: given.get(phase) for phase in _PHASES}


def _attempt_timeouts(given: dict[str, float | None], limit: float) -> dict[str, float | None]:
    """Each phase gets at most the attempt's time, keeping the caller's smaller ones.

    httpx spells "no timeout" as None, and sockets refuse an infinite one.
    """
    bounded: dict[str, float | None] = {}
    for phase in _PHASES:
        value = limit if given[phase] is None else min(given[phase] or 0.0, limit)
        bounded[phase] = value if math.isfinite(value) else None
    return bounded


def _shut_down_on_alarm(response: httpx.Response, delay: float) -> Alarm | None:
    """Arm the watchdog to shut the response's socket down when the attempt's time is up."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is None or not math.isfinite(delay):
        return None

    def shut_down() -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    return watchdog.arm(max(0.0, delay), shut_down)


class _TimeBoundStream(httpx.SyncByteStream):
    """A response body that raises AttemptTimedOut once the attempt's time is up.

    Per-read socket timeouts alone let a body that trickles one byte a second run
    forever; this bounds the whole body between chunks.
    """

    def __init__(self, inner: httpx.SyncByteStream, ends_at: float, clock: Clock) -> None:
        self._inner = inner
        self._ends_at = ends_at
        self._clock = clock

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            if self._clock.monotonic() > self._ends_at:
                raise AttemptTimedOut(
                    "the response body did not arrive within the attempt's timeout"
                )
            yield chunk

    def close(self) -> None:
        self._inner.close()


class RetryTransport(_Shell, httpx.BaseTransport):
    """Retries requests on any sync httpx transport, per the policy.

    Args:
        transport: the transport that sends each attempt (default ``httpx.HTTPTransport()``).
        policy: how to retry; a request may override it via ``CallOptions``.
        clock: time, sleep and randomness (default the system clock).
        hooks: called with every :class:`~retrysafe.RetryEvent`.
        dependency: the name calls are grouped under (default each URL's origin).
        raise_errors: raise :class:`~retrysafe.ApiError` instead of httpx's exceptions when
            no response came back (``retrysafe.Client`` sets this).
        governor: the load protection (retry budget, circuit breaker, cooldowns) per
            dependency; default a new ``Governor()``. Share one to share the state;
            ``Governor(GovernorSettings.off())`` switches it off.
        deadline_header: if set, each attempt carries this header with the seconds the
            server has to answer (e.g. ``"Request-Timeout"``), so nested services can
            share one deadline (see ``retrysafe.DeadlineMiddleware``).
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | None = None,
        raise_errors: bool = False,
        governor: Governor | None = None,
        deadline_header: str | None = None,
    ) -> None:
        super().__init__(
            policy=policy,
            clock=clock,
            hooks=hooks,
            dependency=dependency,
            raise_errors=raise_errors,
            governor=governor,
            deadline_header=deadline_header,
        )
        self.transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = _caller_timeouts(request)
        with retry_scope() as scope:
            call = self._new_call(request, scope)
            while True:
                step = call.begin_attempt()
                if isinstance(step, AttemptPlan):
                    try:
                        decision = self._attempt(call, request, step, timeouts)
                    except BaseException:
                        call.attempt_abandoned()
                        raise
                else:
                    decision = step
                if isinstance(decision, Succeed):
                    return decision.response
                if isinstance(decision, Fail):
                    return self._give_up(decision)
                self.clock.sleep(decision.seconds)

    def _attempt(
        self,
        call: Call,
        request: httpx.Request,
        plan: AttemptPlan,
        timeouts: dict[str, float | None],
    ) -> Decision:
        self._prepare_attempt(request, plan, timeouts)
        ends_at = self.clock.monotonic() + plan.timeout
        try:
            response = self.transport.handle_request(request)
        except httpx.TransportError as exc:
            return call.attempt_raised(exc, during_body=False)
        alarm = _shut_down_on_alarm(response, ends_at - self.clock.monotonic())
        try:
            if isinstance(response.stream, httpx.SyncByteStream):
                response.stream = _TimeBoundStream(response.stream, ends_at, self.clock)
            response.read()
        except (httpx.TransportError, httpx.DecodingError) as exc:
            response.close()
            failure: Exception = exc
            if alarm is not None and alarm.fired:
                failure = AttemptTimedOut("the body did not arrive within the attempt's timeout")
            return call.attempt_raised(failure, during_body=True)
        except BaseException:
            response.close()
            raise
        finally:
            if alarm is not None:
                alarm.cancel()
        return call.attempt_returned(response)

    def close(self) -> None:
        self.transport.close()

    def __repr__(self) -> str:
        return f"RetryTransport({self.transport!r}, policy={self.policy!r})"


class AsyncRetryTransport(_Shell, httpx.AsyncBaseTransport):
    """Retries requests on any async httpx transport, on asyncio or trio.

    Same arguments as :class:`RetryTransport`; the default transport is
    ``httpx.AsyncHTTPTransport()``. Each attempt (headers and body) runs under
    one cancel scope of the attempt's timeout (plus a small grace, see ``_SCOPE_GRACE``).
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | None = None,
        raise_errors: bool = False,
        governor: Governor | None = None,
        deadline_header: str | None = None,
    ) -> None:
        super().__init__(
            policy=policy,
            clock=clock,
            hooks=hooks,
            dependency=dependency,
            raise_errors=raise_errors,
            governor=governor,
            deadline_header=deadline_header,
        )
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = _caller_timeouts(request)
        with retry_scope() as scope:
            call = self._new_call(request, scope)
            while True:
                step = call.begin_attempt()
                if isinstance(step, AttemptPlan):
                    try:
                        decision = await self._attempt(call, request, step, timeouts)
                    except BaseException:
                        call.attempt_abandoned()
                        raise
                else:
                    decision = step
                if isinstance(decision, Succeed):
                    return decision.response
                if isinstance(decision, Fail):
                    return self._give_up(decision)
                await self.clock.async_sleep(decision.seconds)

    async def _attempt(
        self,
        call: Call,
        request: httpx.Request,
        plan: AttemptPlan,
        timeouts: dict[str, float | None],
    ) -> Decision:
        self._prepare_attempt(request, plan, timeouts)
        response: httpx.Response | None = None
        scope_timeout = plan.timeout + _SCOPE_GRACE if math.isfinite(plan.timeout) else None
        try:
            with anyio.fail_after(scope_timeout):
                response = await self.transport.handle_async_request(request)
                await response.aread()
        except TimeoutError:
            if response is not None:
                await response.aclose()
            timed_out = AttemptTimedOut("the attempt did not finish within its timeout")
            return call.attempt_raised(timed_out, during_body=response is not None)
        except (httpx.TransportError, httpx.DecodingError) as exc:
            if response is not None:
                await response.aclose()
            return call.attempt_raised(exc, during_body=response is not None)
        except BaseException:
            if response is not None:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
            raise
        return call.attempt_returned(response)

    async def aclose(self) -> None:
        await self.transport.aclose()

    def __repr__(self) -> str:
        return f"AsyncRetryTransport({self.transport!r}, policy={self.policy!r})"
