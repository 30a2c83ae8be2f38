"""What a sync shell does with each request: send attempts, read bodies, sleep.

:class:`SendLoop` does the per-request work of :class:`~retrysafe.RetryTransport`,
which holds one: one :class:`~retrysafe.drive.Drive` per request, then only sending,
reading and sleeping as it says (:class:`~retrysafe.async_send_loop.AsyncSendLoop`
does the same for :class:`~retrysafe.AsyncRetryTransport`). The transports
(transport.py) check a user's arguments and hand each request over.

The two live apart because this one runs on every call: the compiled build
(see ``docs/cost.md``) compiles it, while the transports stay plain Python, so
a wrong argument still gets retrysafe's own message.
"""

from __future__ import annotations

import math
import time
from typing import Any, Final, Protocol

import httpx

from retrysafe.attempt_deadline import (
    AttemptDeadlineReached,
    notes_first_writes,
)
from retrysafe.attempt_plan import hard_end_after, phase_limit
from retrysafe.decisions import AttemptPlan, ReadBody, Succeed, Wait
from retrysafe.drive import Drive, Step, hands_over
from retrysafe.kept_body import drain_or_close, read_asked
from retrysafe.shell_settings import ShellSettings

__all__ = ["AsyncSender", "SendLoop", "Sender"]


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


_PHASES: Final = ("connect", "read", "write", "pool")
_INF: Final = math.inf


def _bound(given: dict[str, Any], limit: float) -> dict[str, float | None]:
    """httpx's per-phase timeouts ``given``, none of them longer than ``limit``."""
    bounded: dict[str, float | None] = {}
    for phase in _PHASES:
        value = given.get(phase)
        value = limit if value is None or value > limit else value
        # httpx spells "no timeout" as None, and sockets refuse an infinite one.
        bounded[phase] = value if value != _INF else None
    return bounded


def _start(request: httpx.Request, drive: Drive, plan: AttemptPlan, instrumented: bool) -> None:
    """:func:`_prepare` the attempt the async shell sends itself, and set when it must
    end (``drive.attempt_ends_at``: reads made for it are bounded by it) and when it
    started. (The sync loop does the same inline; the async one is plain Python, which
    this keeps short.) ``instrumented``: its network streams note when it is sent;
    if not, it is taken as written from its start (see ``Drive._time_queued``)."""
    _prepare(request, drive, plan)
    drive.attempt_started_at = now = time.monotonic()
    drive.attempt_sent_at = None if instrumented else now
    drive.sends_noted = instrumented
    drive.attempt_ends_at = now + hard_end_after(plan) if plan.timeout != _INF else None


def _prepare(request: httpx.Request, drive: Drive, plan: AttemptPlan) -> None:
    """Bound each phase by the attempt's time and tell the server how long it has."""
    limit = phase_limit(plan)
    given = drive.caller_timeouts
    if _all_within(given, limit):
        # Every phase already ends within the attempt's time (httpx's default 5 s
        # against the default 10 s attempt): the caller's own timeouts stand (a copy: a
        # transport that changes its request's must not change the caller's).
        request.extensions["timeout"] = dict(given)
    else:
        request.extensions["timeout"] = _bound(given, limit)
    header = drive.settings.deadline_header
    if header is not None and math.isfinite(plan.timeout):
        # (the attempt's whole time: the server has until its hard end)
        request.headers[header] = f"{plan.timeout:.3f}"


def _all_within(given: dict[str, Any], limit: float) -> bool:
    """Whether ``given`` sets each of httpx's four phases, and only them, to a float
    number of seconds no longer than a finite ``limit``. (A missing phase, or None for
    "no timeout", is not within it. Any other value, such as an int, is left to
    :func:`_bound`, which keeps it if it is within: compared here, an int too large for
    a float would raise in the compiled build.)"""
    # (unrolled, without a call per phase: this runs on every attempt, and each test is
    # a native one in the compiled build)
    if len(given) != 4 or limit == _INF:
        return False
    connect = given.get("connect")
    read = given.get("read")
    write = given.get("write")
    pool = given.get("pool")
    return (
        isinstance(connect, float)
        and connect <= limit
        and isinstance(read, float)
        and read <= limit
        and isinstance(write, float)
        and write <= limit
        and isinstance(pool, float)
        and pool <= limit
    )


class SendLoop:
    """A sync transport's requests: each driven through its attempts and waits.

    A :class:`~retrysafe.RetryTransport` holds one, rather than being one: a compiled
    class that plain Python subclasses never clears its weak references (mypyc#1102).
    """

    def __init__(self, settings: ShellSettings, transport: Sender) -> None:
        self.settings = settings
        #: The transport that sends each attempt.
        self.transport = transport
        #: Whether its network streams bound each attempt and surely note its first write.
        self.instrumented = notes_first_writes(transport)

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
        except BaseException as exc:
            drive.abandoned(exc)  # cancelled in an attempt or a wait: give back what it held
            raise
        finally:
            drive.close()

    def _attempt(self, drive: Drive, request: httpx.Request, plan: AttemptPlan) -> Step:
        """Send one attempt and read as much of it as the engine needs, within its time."""
        _prepare(request, drive, plan)
        drive.attempt_started_at = now = time.monotonic()
        drive.attempt_sent_at = None if self.instrumented else now
        drive.sends_noted = self.instrumented
        drive.attempt_ends_at = now + hard_end_after(plan) if plan.timeout != _INF else None
        response: httpx.Response | None = None
        try:
            try:
                response = self.transport.handle_request(request)
                if plan.reads_at_once(response.status_code):
                    response.read()
                step = drive.returned(plan, response)
                if type(step) is ReadBody:
                    read_asked(response, not plan.read_body, step.at_most)
                    step = drive.returned(plan, response)
                if type(step) is not Succeed and not hands_over(step, response):
                    drain_or_close(response, not plan.read_body, drive, drive.attempt_ends_at)
                return step
            except AttemptDeadlineReached as reached:
                failure: Exception = reached.as_outcome()
            except (httpx.TransportError, httpx.DecodingError) as exc:
                failure = exc
        except BaseException as exc:
            if response is not None:
                response.close()
            drive.abandoned(exc)
            raise
        finally:
            drive.attempt_ends_at = None
        if response is not None:
            response.close()
        return drive.raised(plan, failure, during_body=response is not None, answer=response)

    def _hedged_attempt(self, drive: Drive, request: httpx.Request, plan: AttemptPlan) -> Step:
        """An attempt of a hedging call: it and its hedged copies (see hedged_shell)."""
        from retrysafe.hedged_shell import hedged_round

        return hedged_round(self.transport, drive, request, plan)
