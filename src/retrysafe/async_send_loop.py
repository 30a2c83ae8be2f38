"""What an async shell does with each request: send attempts, read bodies, sleep.

:class:`AsyncSendLoop` does for :class:`~retrysafe.AsyncRetryTransport` what
:class:`~retrysafe.send_loop.SendLoop` does for the sync one: one
:class:`~retrysafe.drive.Drive` per request, then only sending, reading and
sleeping as it says.

The compiled build (``docs/cost.md``) compiles it on Python 3.10 and 3.11 only. A
coroutine compiled by mypyc passes an exception on to the coroutine it awaits with
``throw(type, value, traceback)``, which Python 3.12 deprecated: there, every cancel
that crosses it, such as the one anyio's ``connect_tcp`` uses on each new
connection, would warn, and fail a program that runs with warnings as errors. So
from 3.12 on it stays plain Python (``hatch_build.py``), and the decisions it asks
for (the drive, the engine, the governor) are compiled all the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import httpx

from retrysafe.attempt_deadline import (
    AttemptDeadlineReached,
    cut_outcome,
    may_speak_http2,
    notes_first_writes,
    retire_stream_of,
)
from retrysafe.attempt_plan import hard_end_after
from retrysafe.decisions import AttemptPlan, ReadBody, Succeed, Wait
from retrysafe.drive import Drive, Step, hands_over
from retrysafe.kept_body import adrain_or_close, aread_asked
from retrysafe.send_loop import _INF, AsyncSender, _start
from retrysafe.shell_settings import ShellSettings

if TYPE_CHECKING:  # loaded by the first asyncio attempt that needs a time limit
    from retrysafe.attempt_watchdog import AttemptTimer, Watch

__all__ = ["AsyncSendLoop"]

#: How much later than an attempt's hard end (its time and the grace) the time limit ends
#: an attempt whose every read and write the network backend ends at that end: late enough
#: that the backend's own cut, which knows how far the request got, comes first.
_BACKSTOP: Final = 0.05


async def _abandon(
    drive: Drive,
    response: httpx.Response | None,
    transport: AsyncSender,
    interrupted_by: BaseException,
) -> None:
    """The attempt ends with no outcome (cancelled): close what it got, shielded from
    the cancel, finish the pool's clean-up the cancel may have cut (see pool_repair),
    and give back what it held (an HTTP/2 connection it may have left a stream open on is
    retired: see attempt_deadline.retire)."""
    retire_stream_of(drive)
    import anyio

    from retrysafe.pool_repair import release_abandoned

    with anyio.CancelScope(shield=True):
        if response is not None:
            await response.aclose()
        await release_abandoned(transport, response)
    drive.abandoned(interrupted_by)


class AsyncSendLoop:
    """An async transport's requests: each driven through its attempts and waits (an
    :class:`~retrysafe.AsyncRetryTransport` holds one, as for :class:`SendLoop`)."""

    def __init__(self, settings: ShellSettings, transport: AsyncSender) -> None:
        self.settings = settings
        #: The transport that sends each attempt.
        self.transport = transport
        #: Whether the network streams note when each attempt is sent (its first write
        #: over HTTP/1.1, its HEADERS over HTTP/2), so that one not noted was never sent.
        self._noted = notes_first_writes(transport)
        #: How long after an attempt's hard end (``attempt_plan.hard_end_after``) the time
        #: limit ends it (asyncio's watchdog; anyio's cancel scope on trio). Where the
        #: network backend ends its every read and write at that end, the limit is a
        #: backstop, a little later: for httpcore's
        #: pool, whose wait for a connection starts over, with the whole pool timeout,
        #: each time the connection it was given turns out taken (100 calls on 100
        #: keep-alive connections ran attempts of 0.5 s for 3 s without it). Over HTTP/2 it
        #: is the limit itself: a request also waits for its turn to read the connection
        #: another request holds (httpcore's lock), for as long as that one's reads.
        bounded = self._noted and not may_speak_http2(transport)
        self._backstop = _BACKSTOP if bounded else 0.0
        #: Ends the attempts the network backend cannot (asyncio): made per transport, so
        #: the watchdog it holds lives no longer than the transport keeps it.
        self._timer: AttemptTimer | None = None
        #: Gives each response handed over unread the stream that finishes the pool's
        #: clean-up if a cancel cuts it as the caller (or httpx) closes the body (see
        #: pool_repair): on httpx's own transport, whose httpcore pool that happens to.
        self._mend: Callable[[httpx.Response, object], None] | None = None
        if getattr(transport, "_pool", None) is not None:
            from retrysafe.pool_repair import mend_when_closed

            self._mend = mend_when_closed

    async def send(self, request: httpx.Request) -> httpx.Response:
        """Drive ``request`` to its end: the response httpx expects, or the call's error.

        Each attempt is sent here, inline rather than in a coroutine of its own: every
        await of the transport's passes through each coroutine it is nested in, so one
        fewer is cheaper on every call (the sync loop keeps its attempts apart)."""
        drive = Drive(self.settings, request)
        try:
            step: Step = drive.next_attempt()
            while True:
                if type(step) is AttemptPlan:
                    if drive.policy.hedge_after is not None:
                        step = await self._hedged_attempt(drive, request, step)
                        continue
                    plan = step
                    _start(request, drive, plan, self._noted)
                    response: httpx.Response | None = None
                    # The network backend ends reads at the attempt's end (see
                    # attempt_deadline); a time limit bounds what it cannot reach (other
                    # transports, the pool's waits; see _backstop): the loop's
                    # watchdog on asyncio, anyio's cancel scope elsewhere
                    # (_attempt_in_scope).
                    watch: Watch | None = None
                    if plan.timeout != _INF:
                        timer = self._timer
                        if timer is None:
                            from retrysafe.attempt_watchdog import AttemptTimer

                            timer = self._timer = AttemptTimer()
                        watch = timer.start(hard_end_after(plan) + self._backstop)
                        if watch is None:
                            step = await self._attempt_in_scope(drive, request, plan)
                            continue
                    try:
                        response = await self.transport.handle_async_request(request)
                        if plan.reads_at_once(response.status_code):
                            await response.aread()
                        step = drive.returned(plan, response)
                        if type(step) is ReadBody:
                            await aread_asked(response, not plan.read_body, step.at_most)
                            step = drive.returned(plan, response)
                        if type(step) is not Succeed and not hands_over(step, response):
                            if watch is not None:
                                watch.end()  # (the answer is judged: the drain is no attempt's)
                                watch = None
                            await adrain_or_close(
                                response, not plan.read_body, drive, drive.attempt_ends_at
                            )
                        failure: Exception | None = None
                    except AttemptDeadlineReached as reached:
                        failure = reached.as_outcome()
                    except TimeoutError:  # (a transport's own time limit)
                        retire_stream_of(drive)
                        failure = cut_outcome(self.transport, drive)
                    except (httpx.TransportError, httpx.DecodingError) as exc:
                        failure = exc
                    except BaseException as exc:
                        if watch is not None and watch.caught(exc):
                            retire_stream_of(drive)  # (cut from outside: see attempt_deadline)
                            failure = cut_outcome(self.transport, drive)
                        else:
                            if watch is not None:
                                watch.end()  # before the shielded close: no cancel of its own
                                watch = None
                            await _abandon(drive, response, self.transport, exc)
                            raise
                    finally:
                        if watch is not None:
                            watch.end()
                        drive.attempt_ends_at = None
                    if failure is None:  # (answered: no continue in the try, for mypyc)
                        continue
                    if response is not None:
                        await response.aclose()
                    step = drive.raised(
                        plan, failure, during_body=response is not None, answer=response
                    )
                elif type(step) is Wait:
                    await self.settings.clock.async_sleep(step.seconds)
                    step = drive.next_attempt()
                else:
                    response = drive.finish(step)
                    if self._mend is not None:
                        self._mend(response, self.transport)
                    return response
        except BaseException as exc:
            drive.abandoned(exc)  # cancelled in an attempt or a wait: give back what it held
            raise
        finally:
            drive.close()

    async def _attempt_in_scope(
        self, drive: Drive, request: httpx.Request, plan: AttemptPlan
    ) -> Step:
        """An attempt where no asyncio watchdog can end it (trio; Python before 3.11):
        under anyio's cancel scope, which raises TimeoutError at its end.

        Its body repeats the attempt in :meth:`send` on purpose (a change to one goes to
        the other): sharing it would put a coroutine, or a null context, on every
        asyncio attempt, which is what keeping this path apart saves."""
        import anyio  # (not with the package: sync-only processes never need it)

        response: httpx.Response | None = None
        try:
            with anyio.fail_after(hard_end_after(plan) + self._backstop):
                response = await self.transport.handle_async_request(request)
                if plan.reads_at_once(response.status_code):
                    await response.aread()
                step = drive.returned(plan, response)
                if type(step) is ReadBody:
                    await aread_asked(response, not plan.read_body, step.at_most)
                    step = drive.returned(plan, response)
            if type(step) is not Succeed and not hands_over(step, response):
                # (out of the attempt's scope: the answer is judged, the drain is no one's)
                await adrain_or_close(response, not plan.read_body, drive, drive.attempt_ends_at)
            return step
        except AttemptDeadlineReached as reached:
            failure: Exception = reached.as_outcome()
        except TimeoutError:
            retire_stream_of(drive)  # (cut from outside: see attempt_deadline)
            failure = cut_outcome(self.transport, drive)
        except (httpx.TransportError, httpx.DecodingError) as exc:
            failure = exc
        except BaseException as exc:
            await _abandon(drive, response, self.transport, exc)
            raise
        finally:
            drive.attempt_ends_at = None
        if response is not None:
            await response.aclose()
        return drive.raised(plan, failure, during_body=response is not None, answer=response)

    async def _hedged_attempt(
        self, drive: Drive, request: httpx.Request, plan: AttemptPlan
    ) -> Step:
        """An attempt of a hedging call: it and its hedged copies (see hedged_shell)."""
        from retrysafe.hedged_shell import hedged_round_async

        return await hedged_round_async(self.transport, drive, request, plan)
