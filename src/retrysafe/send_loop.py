"""What a shell does with each request: send attempts, read bodies, sleep.

:class:`SendLoop` and :class:`AsyncSendLoop` do the per-request work of
:class:`~retrysafe.RetryTransport` and :class:`~retrysafe.AsyncRetryTransport`,
which each hold one: one :class:`~retrysafe.drive.Drive` per request, then only
sending, reading and sleeping as it says. The transports (transport.py) check
a user's arguments and hand each request over.

The two live apart because this one runs on every call: the compiled build
(see ``docs/cost.md``) compiles it, while the transports stay plain Python, so
a wrong argument still gets retrysafe's own message.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import httpx

from retrysafe.attempt_deadline import (
    AttemptDeadlineReached,
    bound_transport,
    retire_stream_of,
)
from retrysafe.classify import AttemptTimedOut
from retrysafe.decisions import AttemptPlan, ReadBody, Wait
from retrysafe.drive import Drive, Step
from retrysafe.shell_settings import ShellSettings

if TYPE_CHECKING:  # loaded by the first asyncio attempt that needs a time limit
    from retrysafe.attempt_watchdog import AttemptWatchdog, Watch

__all__ = ["AsyncSendLoop", "AsyncSender", "SendLoop", "Sender"]


class Sender(Protocol):
    """What a sync shell needs of the transport it wraps: httpx's ``BaseTransport``, or
    anything that sends and closes as it does (httpx itself asks no more)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response: ...

    def close(self) -> None: ...


class AsyncSender(Protocol):
    """What an async shell needs of the transport it wraps: httpx's ``AsyncBaseTransport``,
    or anything that sends and closes as it does."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response: ...

    async def aclose(self) -> None: ...


#: An attempt's hard end comes this much after its per-phase timeouts, so httpx's own
#: timeouts, which know how far the request got (a connect timeout means it was never
#: sent), fire first; the hard end only bounds an attempt, such as a server trickling
#: its headers or body, whose every single read kept within time.
_GRACE: Final = 0.05
_PHASES: Final = ("connect", "read", "write", "pool")
_INF: Final = math.inf


def _bound(given: Mapping[str, Any], limit: float) -> dict[str, float | None]:
    """httpx's per-phase timeouts ``given``, none of them longer than ``limit``."""
    bounded: dict[str, float | None] = {}
    for phase in _PHASES:
        value = given.get(phase)
        value = limit if value is None or value > limit else value
        # httpx spells "no timeout" as None, and sockets refuse an infinite one.
        bounded[phase] = value if value != _INF else None
    return bounded


def _prepare(request: httpx.Request, drive: Drive, plan: AttemptPlan) -> None:
    """Bound each phase by the attempt's time and tell the server how long it has."""
    limit = plan.timeout
    given = drive.caller_timeouts
    try:  # (httpx's four phases; a missing one, or None for "no timeout", is not set)
        longest = max(given["connect"], given["read"], given["write"], given["pool"])
    except (KeyError, TypeError):
        longest = _INF
    if longest <= limit and longest != _INF and len(given) == 4:
        # Every phase already ends within the attempt's time (httpx's default 5 s
        # against the default 10 s attempt): the caller's own timeouts stand (a copy: a
        # transport that changes its request's must not change the caller's).
        request.extensions["timeout"] = dict(given)
    else:
        request.extensions["timeout"] = _bound(given, limit)
    header = drive.settings.deadline_header
    if header is not None and math.isfinite(limit):
        request.headers[header] = f"{limit:.3f}"


async def _abandon(drive: Drive, response: httpx.Response | None) -> None:
    """The attempt ends with no outcome (cancelled): close what it got, shielded from
    the cancel, and give back what it held (an HTTP/2 connection it may have left a
    stream open on is retired: see attempt_deadline.retire)."""
    retire_stream_of(drive)
    if response is not None:
        import anyio

        with anyio.CancelScope(shield=True):
            await response.aclose()
    drive.abandoned()


def _may_speak_http2(transport: object) -> bool:
    """Whether ``transport``'s httpcore pool may open HTTP/2 connections (``http2=True``)."""
    return getattr(getattr(transport, "_pool", None), "_http2", False) is True


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


class SendLoop:
    """A sync transport's requests: each driven through its attempts and waits.

    A :class:`~retrysafe.RetryTransport` holds one, rather than being one: a compiled
    class that plain Python subclasses never clears its weak references (mypyc#1102).
    """

    def __init__(self, settings: ShellSettings, transport: Sender) -> None:
        self.settings = settings
        #: The transport that sends each attempt.
        self.transport = transport
        bound_transport(transport)

    def send(self, request: httpx.Request) -> httpx.Response:
        """Drive ``request`` to its end: the response httpx expects, or the call's error."""
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
        drive.attempt_ends_at = ends_at if plan.timeout != _INF else None
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


class AsyncSendLoop:
    """An async transport's requests: each driven through its attempts and waits (an
    :class:`~retrysafe.AsyncRetryTransport` holds one, as for :class:`SendLoop`)."""

    def __init__(self, settings: ShellSettings, transport: AsyncSender) -> None:
        self.settings = settings
        #: The transport that sends each attempt.
        self.transport = transport
        #: Whether the network backend ends every wait of an attempt at its end; if not,
        #: a time limit does (asyncio's own timeout; anyio's cancel scope on trio). Over
        #: HTTP/2 it cannot: a request also waits for its turn to read the connection
        #: another request holds (httpcore's lock), for as long as that one's reads.
        self._bounded = bound_transport(transport) and not _may_speak_http2(transport)
        #: The watchdog of the loop this transport's attempts last ran on (asyncio): made
        #: per transport, so it lives no longer than the transport keeps it.
        self._watchdog: AttemptWatchdog | None = None

    async def send(self, request: httpx.Request) -> httpx.Response:
        """Drive ``request`` to its end: the response httpx expects, or the call's error."""
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
        finite = plan.timeout != _INF
        drive.attempt_ends_at = time.monotonic() + plan.timeout + _GRACE if finite else None
        # The network backend ends reads at the attempt's end (see attempt_deadline); a
        # time limit bounds the transports it cannot reach: the loop's watchdog on
        # asyncio, anyio's cancel scope elsewhere (_attempt_in_scope).
        dog: AttemptWatchdog | None = None
        watch: Watch | None = None
        if finite and not self._bounded:
            dog = self._watchdog
            if dog is None or dog.loop is not dog.running_loop():
                dog = self._watchdog = _new_watchdog(_running_asyncio_loop())
                if dog is None:
                    return await self._attempt_in_scope(drive, request, plan)
            # (on the loop's own clock, read now: a test loop may keep virtual time, and a
            # test may patch the clock the loop reads)
            watch = dog.watch(dog.loop.time() + plan.timeout + _GRACE)
        try:
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
        except TimeoutError:  # (a transport's own time limit)
            retire_stream_of(drive)
            failure = AttemptTimedOut("the attempt did not finish in its time")
        except (httpx.TransportError, httpx.DecodingError) as exc:
            failure = exc
        except BaseException as exc:
            if watch is not None and watch.caught(exc):
                retire_stream_of(drive)  # (cut from outside: see attempt_deadline)
                failure = AttemptTimedOut("the attempt did not finish in its time")
            else:
                if watch is not None and dog is not None:
                    dog.forget(watch)  # before the shielded close: no cancel of its own
                    watch = None
                await _abandon(drive, response)
                raise
        finally:
            if watch is not None and dog is not None:
                dog.forget(watch)
            drive.attempt_ends_at = None
        if response is not None:
            await response.aclose()
        return drive.raised(plan, failure, during_body=response is not None)

    async def _attempt_in_scope(
        self, drive: Drive, request: httpx.Request, plan: AttemptPlan
    ) -> Step:
        """:meth:`_attempt` where no asyncio watchdog can end it (trio; Python before
        3.11): under anyio's cancel scope, which raises TimeoutError at its end.

        Its body repeats :meth:`_attempt`'s on purpose (a change to one goes to the
        other): sharing it would put a coroutine, or a null context, on every asyncio
        attempt, which is what keeping this path apart saves."""
        import anyio  # (not with the package: sync-only processes never need it)

        response: httpx.Response | None = None
        try:
            with anyio.fail_after(plan.timeout + _GRACE):
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
            retire_stream_of(drive)  # (cut from outside: see attempt_deadline)
            failure = AttemptTimedOut("the attempt did not finish in its time")
        except (httpx.TransportError, httpx.DecodingError) as exc:
            failure = exc
        except BaseException:
            await _abandon(drive, response)
            raise
        finally:
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
