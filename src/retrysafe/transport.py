"""RetryTransport and AsyncRetryTransport: the I/O shells around the engine.

They wrap any httpx transport. Per request they make one
:class:`~retrysafe.drive.Drive` (the engine plus the governor, effects and
contexts) and then only send attempts, read bodies and sleep. The two differ
in nothing else; there is no retry logic here.

Drop-in use keeps httpx's behaviour: the final response is returned whatever
its status, the body of a success reaches httpx unbuffered (so streaming works),
and a final transport failure re-raises httpx's own exception::

    client = httpx.Client(transport=retrysafe.RetryTransport())
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import httpx

from retrysafe.attempt_deadline import AttemptDeadlineReached, bound_transport
from retrysafe.classify import AttemptTimedOut
from retrysafe.clock import Clock
from retrysafe.decisions import AttemptPlan, ReadBody, Wait
from retrysafe.drive import OPTIONS_EXTENSION, CallOptions, Drive, ShellSettings, Step
from retrysafe.governor import Governor
from retrysafe.observe import EventHook
from retrysafe.policy import RetryPolicy
from retrysafe.redact import redact_httpx_logs
from retrysafe.request_facts import DependencyNamer

if TYPE_CHECKING:  # loaded by the first asyncio attempt that needs a time limit
    from retrysafe.attempt_watchdog import AttemptWatchdog, Watch

__all__ = ["OPTIONS_EXTENSION", "AsyncRetryTransport", "CallOptions", "RetryTransport"]

#: An attempt's hard end comes this much after its per-phase timeouts, so httpx's own
#: timeouts, which know how far the request got (a connect timeout means it was never
#: sent), fire first; the hard end only bounds an attempt, such as a server trickling
#: its headers or body, whose every single read kept within time.
_GRACE = 0.05
_PHASES = ("connect", "read", "write", "pool")


def _bound(given: Mapping[str, Any], limit: float) -> dict[str, float | None]:
    """httpx's per-phase timeouts ``given``, none of them longer than ``limit``."""
    bounded: dict[str, float | None] = {}
    for phase in _PHASES:
        value = given.get(phase)
        value = limit if value is None or value > limit else value
        # httpx spells "no timeout" as None, and sockets refuse an infinite one.
        bounded[phase] = value if value != math.inf else None
    return bounded


_PHASE_NAMES = frozenset(_PHASES)


def _prepare(request: httpx.Request, drive: Drive, plan: AttemptPlan) -> None:
    """Bound each phase by the attempt's time and tell the server how long it has."""
    limit = plan.timeout
    given = drive.caller_timeouts
    values = given.values()
    if given.keys() == _PHASE_NAMES and None not in values:
        longest = max(values)
        if longest <= limit and longest != math.inf:
            # Every phase already ends within the attempt's time (httpx's default 5 s
            # against the default 10 s attempt): the caller's own timeouts stand (a
            # copy: a transport that changes its request's must not change the caller's).
            request.extensions["timeout"] = dict(given)
        else:
            request.extensions["timeout"] = _bound(given, limit)
    else:
        request.extensions["timeout"] = _bound(given, limit)
    header = drive.settings.deadline_header
    if header is not None and math.isfinite(limit):
        request.headers[header] = f"{limit:.3f}"


#: An attempt with no time limit of its own (its reads are bounded, or it has no end).
_NO_LIMIT: contextlib.nullcontext[None] = contextlib.nullcontext()
#: Whether this Python's asyncio can take a cancel back (Task.uncancel, 3.11+), which
#: the attempt watchdog needs; None until an asyncio attempt first asks.
_can_uncancel: bool | None = None


def _running_asyncio_loop() -> Any:
    """The running asyncio loop, or None (on trio, or with no loop at all)."""
    # Not imported here: `import retrysafe` leaves asyncio to whoever runs a loop.
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio)
        return None


def _new_watchdog(loop: Any) -> AttemptWatchdog | None:
    """A watchdog for ``loop``'s attempts; None when there is no asyncio loop (trio) or
    it cannot take a cancel back (Python before 3.11)."""
    global _can_uncancel
    if loop is None:
        return None
    if _can_uncancel is None:
        import asyncio

        _can_uncancel = hasattr(asyncio.Task, "uncancel")
    if not _can_uncancel:
        return None
    from retrysafe.attempt_watchdog import AttemptWatchdog

    return AttemptWatchdog(loop)


class _Shell:
    """What both shells expose of their one frozen settings value."""

    settings: ShellSettings

    @property
    def policy(self) -> RetryPolicy:
        """The default policy of this transport's calls."""
        return self.settings.policy

    @property
    def governor(self) -> Governor:
        """The load protection this transport's calls share."""
        return self.settings.governor


class RetryTransport(_Shell, httpx.BaseTransport):
    """Retries requests on any sync httpx transport, per the policy.

    Args:
        transport: the transport that sends each attempt (default ``httpx.HTTPTransport()``).
        policy: how to retry; a request may override it via ``CallOptions``.
        clock: time, sleep and randomness (default the system clock).
        hooks: called with every :class:`~retrysafe.RetryEvent`.
        dependency: the name calls are grouped under for load protection: a string, or a
            callable naming each request (e.g. ``dependency_by_path(1)``); default each
            URL's origin.
        raise_errors: raise :class:`~retrysafe.ApiError` instead of httpx's exceptions when
            no response came back (``retrysafe.Client`` sets this).
        governor: the load protection (retry budget, circuit breaker, cooldowns) per
            dependency; default a new ``Governor()``. Share one to share the state;
            ``Governor(GovernorSettings.off())`` switches it off.
        deadline_header: if set, each attempt carries this header with the seconds the
            server has to answer (e.g. ``"Request-Timeout"``), so nested services can
            share one deadline (see ``retrysafe.DeadlineMiddleware``).

    On httpx's own ``HTTPTransport`` every byte of an attempt, from connect to the
    end of its body, is bounded by the attempt's time (see
    :mod:`retrysafe.attempt_deadline`); over HTTP/2 a timed-out attempt cancels only
    its own stream.
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | DependencyNamer | None = None,
        raise_errors: bool = False,
        governor: Governor | None = None,
        deadline_header: str | None = None,
    ) -> None:
        self.settings = ShellSettings.build(
            policy=policy,
            clock=clock,
            governor=governor,
            hooks=hooks,
            dependency=dependency,
            raise_errors=raise_errors,
            deadline_header=deadline_header,
        )
        self.transport = transport if transport is not None else httpx.HTTPTransport()
        bound_transport(self.transport)
        redact_httpx_logs()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        drive = Drive(self.settings, request)
        try:
            step: Step = drive.next_attempt()
            while True:
                if type(step) is AttemptPlan:
                    if drive.policy.hedge_after is None:
                        step = self._attempt(drive, request, step)
                    else:
                        step = self._hedged_attempt(drive, request, step)
                elif type(step) is Wait:
                    self.settings.clock.sleep(step.seconds)
                    step = drive.next_attempt()
                else:
                    return drive.finish(step)
        except BaseException:
            drive.abandoned()  # cancelled in an attempt or a wait: give back what it held
            raise
        finally:
            drive.close()

    def _attempt(self, drive: Drive, request: httpx.Request, plan: AttemptPlan) -> Step:
        """Send one attempt and read as much of it as the engine needs, within its time."""
        _prepare(request, drive, plan)
        ends_at = time.monotonic() + plan.timeout + _GRACE
        drive.attempt_ends_at = ends_at if plan.timeout != math.inf else None
        response: httpx.Response | None = None
        try:
            try:
                response = self.transport.handle_request(request)
                if plan.read_body:
                    response.read()
                step = drive.returned(plan, response)
                if type(step) is ReadBody:
                    response.read()
                    step = drive.returned(plan, response)
                return step
            except AttemptDeadlineReached as reached:
                failure: Exception = reached.as_outcome()
            except (httpx.TransportError, httpx.DecodingError) as exc:
                failure = exc
        except BaseException:
            if response is not None:
                response.close()
            drive.abandoned()
            raise
        finally:
            drive.attempt_ends_at = None
        if response is not None:
            response.close()
        return drive.raised(plan, failure, during_body=response is not None)

    def _hedged_attempt(self, drive: Drive, request: httpx.Request, plan: AttemptPlan) -> Step:
        """An attempt of a hedging call: it and its hedged copies (see hedged_shell)."""
        from retrysafe.hedged_shell import hedged_round

        return hedged_round(self.transport, drive, request, plan)

    def close(self) -> None:
        self.transport.close()

    def __repr__(self) -> str:
        return f"RetryTransport({self.transport!r}, policy={self.policy!r})"


class AsyncRetryTransport(_Shell, httpx.AsyncBaseTransport):
    """Retries requests on any async httpx transport, on asyncio or trio.

    Same arguments as :class:`RetryTransport`; the default transport is
    ``httpx.AsyncHTTPTransport()``. Each attempt (headers, and the body when the
    call does not stream) ends at the attempt's timeout (plus a small grace, see
    ``_GRACE``): on httpx's own transport its network reads are bounded (over
    HTTP/2 only the attempt's own stream ends); any other transport runs under a
    time limit.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | DependencyNamer | None = None,
        raise_errors: bool = False,
        governor: Governor | None = None,
        deadline_header: str | None = None,
    ) -> None:
        self.settings = ShellSettings.build(
            policy=policy,
            clock=clock,
            governor=governor,
            hooks=hooks,
            dependency=dependency,
            raise_errors=raise_errors,
            deadline_header=deadline_header,
        )
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        #: Whether the network backend ends every read at the attempt's end; if not, a
        #: time limit does (asyncio's own timeout; anyio's cancel scope on trio).
        self._bounded = bound_transport(self.transport)
        #: The watchdog of the loop this transport's attempts last ran on (asyncio): made
        #: per transport, so it lives no longer than the transport keeps it.
        self._watchdog: AttemptWatchdog | None = None
        redact_httpx_logs()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        drive = Drive(self.settings, request)
        try:
            step: Step = drive.next_attempt()
            while True:
                if type(step) is AttemptPlan:
                    if drive.policy.hedge_after is None:
                        step = await self._attempt(drive, request, step)
                    else:
                        step = await self._hedged_attempt(drive, request, step)
                elif type(step) is Wait:
                    await self.settings.clock.async_sleep(step.seconds)
                    step = drive.next_attempt()
                else:
                    return drive.finish(step)
        except BaseException:
            drive.abandoned()  # cancelled in an attempt or a wait: give back what it held
            raise
        finally:
            drive.close()

    async def _attempt(self, drive: Drive, request: httpx.Request, plan: AttemptPlan) -> Step:
        """Send one attempt and read as much of it as the engine needs, within its time."""
        _prepare(request, drive, plan)
        response: httpx.Response | None = None
        finite = plan.timeout != math.inf
        drive.attempt_ends_at = time.monotonic() + plan.timeout + _GRACE if finite else None
        # The network backend ends reads at the attempt's end (see attempt_deadline); a
        # time limit bounds the transports it cannot reach: the loop's watchdog on
        # asyncio, anyio's cancel scope elsewhere.
        dog: AttemptWatchdog | None = None
        watch: Watch | None = None
        scope: AbstractContextManager[object] = _NO_LIMIT
        if drive.attempt_ends_at is not None and not self._bounded:
            dog = self._watchdog
            loop = _running_asyncio_loop()
            if dog is None or dog.loop is not loop:
                dog = self._watchdog = _new_watchdog(loop)
            if dog is not None:
                # (on the loop's own clock: a test loop may keep virtual time)
                watch = dog.watch(dog.loop.time() + plan.timeout + _GRACE)
            else:
                import anyio  # (not with the package: sync-only processes never need it)

                scope = anyio.fail_after(plan.timeout + _GRACE)
        try:
            with scope:
                response = await self.transport.handle_async_request(request)
                if plan.read_body:
                    await response.aread()
                step = drive.returned(plan, response)
                if type(step) is ReadBody:
                    await response.aread()
                    step = drive.returned(plan, response)
                return step
        except AttemptDeadlineReached as reached:
            failure: Exception = reached.as_outcome()
        except TimeoutError:
            failure = AttemptTimedOut("the attempt did not finish in its time")
        except (httpx.TransportError, httpx.DecodingError) as exc:
            failure = exc
        except BaseException as exc:
            if watch is not None and watch.caught(exc):
                failure = AttemptTimedOut("the attempt did not finish in its time")
            else:
                if watch is not None and dog is not None:
                    dog.forget(watch)  # before the shielded close: no cancel of its own
                    watch = None
                if response is not None:
                    import anyio

                    with anyio.CancelScope(shield=True):
                        await response.aclose()
                drive.abandoned()
                raise
        finally:
            if watch is not None and dog is not None:
                dog.forget(watch)
            drive.attempt_ends_at = None
        if response is not None:
            await response.aclose()
        return drive.raised(plan, failure, during_body=response is not None)

    async def _hedged_attempt(
        self, drive: Drive, request: httpx.Request, plan: AttemptPlan
    ) -> Step:
        """An attempt of a hedging call: it and its hedged copies (see hedged_shell)."""
        from retrysafe.hedged_shell import hedged_round_async

        return await hedged_round_async(self.transport, drive, request, plan)

    async def aclose(self) -> None:
        await self.transport.aclose()

    def __repr__(self) -> str:
        return f"AsyncRetryTransport({self.transport!r}, policy={self.policy!r})"
