"""Sending hedged copies: the I/O of a hedging call's attempt, sync and async.

The shells (:mod:`retrysafe.transport`) hand an attempt here only when the
call's engine is a :class:`~retrysafe.hedged_call.HedgedCall`; a call without
``hedge_after`` never loads this module. One *round* is one attempt of the
engine and the hedged copies it asks for: it ends with the first step that is
not :class:`AwaitOthers` (a success, a failure, a wait before a retry).

Each copy is the same request (same headers, so the same idempotency key, and
the same replayable body) sent as its own ``httpx.Request``, so per-copy
timeouts never touch another copy in flight. The engine is fed by one
coordinator only (the caller); copies only send and read.

- sync: every copy is sent on a thread of its own (httpx transports are
  thread-safe), in a copy of the caller's context; the caller's thread waits for
  their answers and for the next copy's time, and is the only one that tells the
  engine, asks the governor and emits events (so hooks and tracers see the whole
  call on the caller's thread; the price is a hand-off to a thread per copy, the
  first one included: :mod:`retrysafe.hedge_threads` keeps finished threads a while
  for reuse). A losing copy is cancelled by cutting the connection it writes to
  (:meth:`retrysafe.bounded_backend.BoundedStream.sever`), so a blocked read
  returns at once and the server sees the disconnect, and by ending its
  attempt's time, so it sends or reads nothing more; one still waiting for a
  connection in its pool is taken out of the queue.
- async: every copy is a task in a task group with its own cancel scope;
  a losing copy is cancelled, which closes its connection.

A copy waiting for a way to send (a free HTTP/2 stream, a pooled connection) is often
given it by a sibling copy whose request just ended: that sibling's answer is on its way
to the coordinator, which may judge it the winner. The copy given its way waits for
that judgement before it sends (:class:`_Judging`), and sends nothing if it lost.
"""

from __future__ import annotations

import contextvars
import functools
import math
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import NamedTuple

import anyio
import anyio.lowlevel
import httpx
from anyio.streams.memory import MemoryObjectSendStream

from retrysafe.attempt_deadline import (
    AttemptDeadlineReached,
    Severable,
    SharedStream,
    current_call,
    current_copy,
    notes_first_writes,
    retire_stream_of,
)
from retrysafe.attempt_plan import hard_end_after
from retrysafe.classify import AttemptTimedOut
from retrysafe.decisions import AttemptPlan, AwaitOthers, Fail, ReadBody, Succeed
from retrysafe.drive import Drive, Step, hands_over
from retrysafe.hedge_threads import run_on_a_thread
from retrysafe.hedged_call import HedgedCall
from retrysafe.kept_body import adrain_or_close, aread_asked, drain_or_close, read_asked
from retrysafe.send_loop import AsyncSender, Sender, _prepare

__all__ = ["hedged_round", "hedged_round_async"]

#: A copy not heard of this long after its attempt's end is given up as timed out (a
#: transport the attempt deadline cannot bound may otherwise hold the call for ever).
_OVERDUE = 0.5


def _copy_of(request: httpx.Request) -> httpx.Request:
    """The same request as a new object: same method, URL, headers and body bytes."""
    return httpx.Request(
        request.method,
        request.url,
        headers=request.headers,
        stream=request.stream,
        extensions=dict(request.extensions),
    )


class _Judging:
    """The answers a sync round's copies hold that the caller's thread has not judged.

    A copy waiting for a way to send (a free HTTP/2 stream, a pooled connection) gets
    it as another request ends, often a sibling copy's: that copy's answer is in hand,
    its stream closed or its connection free, and the caller's thread has not yet judged
    it. Sent then, the copy went out after the call had returned, and the server did its
    work (trial82: every time, with a server allowing one stream; a keyed POST reached
    the server twice). So such a copy first waits (:meth:`may_send`) until no sibling's
    answer awaits judgement: if one won, the copy has been cancelled and sends nothing;
    otherwise it goes.

    A copy's answer awaits judgement from the moment its body closes (it was read, or the
    caller's thread closes it), which is what frees its stream or connection
    (:class:`_TellsItsClose`), until the caller's thread has judged it. Not from its
    headers: a sibling whose body trickles would hold every waiting copy back for as long
    (review78: a hedge meant to go at 0.2 s went at none, the call took 1 s). A copy
    never waits on itself, nor on one that lost.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._pending: set[_Copy] = set()
        self._over = False

    def answering(self, copy: _Copy) -> None:
        with self._changed:
            self._pending.add(copy)

    def judged(self, copy: _Copy) -> None:
        """The caller's thread has judged ``copy``'s answer, and the round goes on."""
        with self._changed:
            if copy in self._pending:
                self._pending.discard(copy)
                self._changed.notify_all()

    def over(self) -> None:
        """The round is over: its losing copies are cancelled."""
        with self._changed:
            self._over = True
            self._changed.notify_all()

    def may_send(self, copy: _Copy) -> bool:
        with self._changed:
            while _judging_other(self._pending, copy) and not self._over and not copy.cancelled:
                ends_at = copy.attempt_ends_at
                left = None if ends_at is None else ends_at - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._changed.wait(left)
            return not copy.cancelled


class _AsyncJudging:
    """The async :class:`_Judging`. A copy that lost while it waits is cancelled there."""

    def __init__(self) -> None:
        self._changed = anyio.Event()
        self._pending: set[_Copy] = set()

    def answering(self, copy: _Copy) -> None:
        self._pending.add(copy)

    def judged(self, copy: _Copy) -> None:
        if copy in self._pending:
            self._pending.discard(copy)
            changed, self._changed = self._changed, anyio.Event()
            changed.set()

    async def may_send(self, copy: _Copy) -> bool:
        while _judging_other(self._pending, copy) and not copy.cancelled:
            await self._changed.wait()
        return not copy.cancelled


def _judging_other(pending: set[_Copy], copy: _Copy) -> bool:
    """Whether an answer of a copy other than ``copy``, still in the race, awaits
    judgement."""
    return any(other is not copy and not other.cancelled for other in pending)


class _TellsItsClose(httpx.SyncByteStream):
    """A copy's response body, which tells the copy its answer is in hand
    (:meth:`_Copy.answering`) as it closes: the close frees the copy's HTTP/2 stream or
    its pooled connection, which a waiting sibling may get at once (see :class:`_Judging`)."""

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream, copy: _Copy) -> None:
        assert isinstance(inner, httpx.SyncByteStream)
        self._inner = inner  # (named as retrysafe's other wrappers name theirs)
        self._copy = copy

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._inner)

    def close(self) -> None:
        self._copy.answering()
        self._inner.close()


class _AsyncTellsItsClose(httpx.AsyncByteStream):
    """The async :class:`_TellsItsClose`."""

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream, copy: _Copy) -> None:
        assert isinstance(inner, httpx.AsyncByteStream)
        self._inner = inner
        self._copy = copy

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._inner.__aiter__()

    async def aclose(self) -> None:
        self._copy.answering()
        await self._inner.aclose()


def _ends_at(plan: AttemptPlan) -> float | None:
    if plan.timeout == math.inf:
        return None
    return time.monotonic() + hard_end_after(plan)


class _Copy:
    """One copy in flight: its plan and request, when its time ends, and (sync) the
    connections it wrote to, which are cut if it loses. Its network streams find it as
    ``current_copy`` (see :class:`~retrysafe.attempt_deadline.CopyWatcher`)."""

    def __init__(
        self,
        plan: AttemptPlan,
        request: httpx.Request,
        drive: Drive,
        transport: Sender | None = None,
        *,
        instrumented: bool = False,
        judging: _Judging | _AsyncJudging | None = None,
    ) -> None:
        self.plan = plan
        self.request = request
        #: The hedging call this is a copy of: a retrysafe call made inside the copy's
        #: attempt is nested in it (see Drive._enclosing).
        self.drive = drive
        #: When it started (``time.monotonic()``), for the time it waited for a connection.
        self.started_at = time.monotonic()
        #: The RunningCall field a timed-out read reads: its call's.
        self.caller_timeouts = drive.caller_timeouts
        #: The RunningCall field the network backend ends reads by.
        self.attempt_ends_at = _ends_at(plan)
        #: The RunningCall field noting when the copy first wrote its request (its start,
        #: on a transport whose network streams do not note it).
        self.attempt_sent_at: float | None = None if instrumented else self.started_at
        #: Whether its network streams note that first write (see Drive.sends_noted).
        self.sends_noted = instrumented
        #: The RunningCall field an HTTP/2 stream the copy writes to is kept in.
        self.shared_stream: SharedStream | None = None
        #: The RunningCall field saying how late a read that timed out ended.
        self.late_by = 0.0
        self.lock = threading.Lock()
        self.connections: list[Severable] = []
        self.cancelled = False
        self.finished = False
        self.scope: anyio.CancelScope | None = None
        #: (sync) The transport it is sent through: if it loses while still waiting there
        #: for a connection, it is taken out of the pool's queue.
        self.transport = transport
        #: Its round's answers not yet judged (None: a copy sent alone, with no round).
        self.judging = judging

    def answering(self) -> None:
        """Its answer is in hand (see CopyWatcher.answering). A copy that lost already
        has nothing left to judge."""
        if self.judging is not None and not self.cancelled:
            self.judging.answering(self)

    def may_send(self) -> bool:
        """(sync) See CopyWatcher.may_send."""
        judging = self.judging
        if isinstance(judging, _Judging):
            return judging.may_send(self)
        return not self.cancelled

    async def may_send_async(self) -> bool:
        """See CopyWatcher.may_send_async."""
        judging = self.judging
        if isinstance(judging, _AsyncJudging):
            return await judging.may_send(self)
        return not self.cancelled

    def watch(self, connection: Severable) -> None:
        """The copy writes to ``connection`` (called on the copy's own thread)."""
        with self.lock:
            if self.cancelled:
                connection.sever()
            elif connection not in self.connections:
                self.connections.append(connection)

    def cancel(self) -> None:
        """This copy lost: end its time and cut its connection, unless it finished."""
        with self.lock:
            if self.cancelled or self.finished:
                self.cancelled = True
                return
            self.cancelled = True
            self.attempt_ends_at = time.monotonic()
            connections, self.connections = self.connections, []
        for connection in connections:
            connection.sever()
        if not connections and self.transport is not None:
            self._withdraw()
        if self.scope is not None:
            self.scope.cancel()

    def _withdraw(self) -> None:
        """A losing copy that has written nothing may still wait for a connection in its
        pool (one full with other requests): end that wait, so it takes none."""
        if getattr(self.transport, "_pool", None) is None:
            return  # (no httpcore pool: nothing to wait in)
        from retrysafe.bounded_backend import withdraw_queued

        withdraw_queued(self.transport, self.request.extensions)

    def overdue(self, now: float) -> bool:
        return self.attempt_ends_at is not None and now > self.attempt_ends_at + _OVERDUE


class _Result(NamedTuple):
    """What a copy got: a response (body read as planned) or a failure; ``fatal`` is an
    unexpected exception for the caller."""

    copy: _Copy
    response: httpx.Response | None
    failure: Exception | None
    fatal: BaseException | None = None


def _timed(drive: Drive, copy: _Copy) -> None:
    """Before a copy's outcome is told: its start, first write and how late its timed-out
    read ended are the attempt's (the time it waited for a connection, and the loop's
    lateness, are left out of what the breaker learns)."""
    drive.attempt_started_at = copy.started_at
    drive.attempt_sent_at = copy.attempt_sent_at
    drive.sends_noted = copy.sends_noted
    drive.late_by = copy.late_by


def _give_up_overdue(drive: Drive, copies: dict[AttemptPlan, _Copy]) -> Step | None:
    """Report every copy long past its time as timed out; the step if one ended the round."""
    now = time.monotonic()
    step: Step | None = None
    for plan, copy in list(copies.items()):
        if copy.finished or copy.cancelled or not copy.overdue(now):
            continue
        copy.cancel()
        _timed(drive, copy)
        step = drive.raised(
            plan, AttemptTimedOut("the copy did not end in time"), during_body=False
        )
        if type(step) is not AwaitOthers:
            return step
    return None


#: The shortest a wait for a copy's result blocks, when it blocks at all (see _next_result).
_SHORTEST_WAIT = 0.001


def _next_result(results: queue.SimpleQueue[_Result], wait: float | None) -> _Result:
    """The next result a copy handed back, waiting up to ``wait`` seconds (None: as long
    as it takes); ``queue.Empty`` if none came.

    A wait that is over (0: a copy is due now) takes what is there without blocking; a
    positive one under a millisecond blocks for a millisecond. On Python 3.10 a ``SimpleQueue.get``
    whose timeout is over by the time it first takes the queue's free lock waits for an
    item as if it had no timeout: a hedged copy due while a slow hook ran went out only
    when the first copy answered, 0.7 s late. (Not blocking at all for every short wait
    would spin: on a test's fake clock, whose time stands still, a copy due in 0.5 ms
    stays due in 0.5 ms.)
    """
    if wait is None:
        return results.get()
    if wait <= 0:
        return results.get_nowait()
    return results.get(timeout=max(wait, _SHORTEST_WAIT))


def _wait_for(drive: Drive, call: HedgedCall, copies: dict[AttemptPlan, _Copy]) -> float | None:
    """Seconds to wait for an answer: until the next copy is due, or a copy is overdue
    (None: no limit, when neither can happen)."""
    wait: float | None = None
    hedge = call.next_hedge()
    if hedge is not None:
        wait = hedge.at - drive.settings.clock.monotonic()
    now = time.monotonic()
    for copy in copies.values():
        if not copy.finished and not copy.cancelled and copy.attempt_ends_at is not None:
            overdue_in = copy.attempt_ends_at + _OVERDUE + 0.001 - now
            wait = overdue_in if wait is None else min(wait, overdue_in)
    return None if wait is None else max(0.0, wait)


def _hedge_if_due(
    drive: Drive, call: HedgedCall, request: httpx.Request
) -> tuple[AttemptPlan, httpx.Request] | None:
    """The next copy's plan and request if it is due now and the governor lets it go.

    The copy's request is its own object: the call's trace starts the copy's attempt
    on it (its own trace context header), and its timeouts are the copy's plan's.
    """
    hedge = call.next_hedge()
    if hedge is None or drive.settings.clock.monotonic() < hedge.at:
        return None
    copy_request = _copy_of(request)
    plan = drive.hedge(hedge, copy_request)
    if plan is None:
        return None
    _prepare(copy_request, drive, plan)
    return plan, copy_request


# -- sync ----------------------------------------------------------------------------------


def _send(transport: Sender, copy: _Copy) -> _Result:
    """Send one copy on this thread, bounded by its own time; what it got.

    While it runs, the copy is this thread's running call (reads end by its time) and
    its watcher (the connections it writes to can be cut if it loses).
    """
    call_token = current_call.set(copy)
    copy_token = current_copy.set(copy)
    response: httpx.Response | None = None
    try:
        if copy.cancelled:
            # It lost before this thread came to send it (on a busy machine, a thread
            # may start late): it sends nothing, and waits for no connection in the
            # pool, where its loss could no longer take it out of the queue.
            return _Result(copy, None, AttemptTimedOut("the copy lost before it was sent"))
        response = transport.handle_request(copy.request)
        response.stream = _TellsItsClose(response.stream, copy)
        if copy.plan.reads_at_once(response.status_code):
            response.read()
        return _Result(copy, response, None)
    except AttemptDeadlineReached as reached:
        return _Result(copy, response, reached.as_outcome())
    except (httpx.TransportError, httpx.DecodingError) as exc:
        return _Result(copy, response, exc)
    finally:
        current_copy.reset(copy_token)
        current_call.reset(call_token)
        with copy.lock:
            copy.finished = True
            copy.connections = []


def _caller_reads(step: Step) -> bool:
    """Whether the caller reads the body of the answer ``step`` ends the round with: a
    success's, or a final answer's handed over unread (a drop-in's 404). Its reads then
    get the caller's timeouts, set on the winning copy's request, the one sent."""
    if type(step) is Succeed:
        return True
    return type(step) is Fail and step.response is not None and not step.response.is_closed


def _conclude(drive: Drive, result: _Result) -> Step:
    """Tell the engine what one copy got (reading its body if the engine asks)."""
    copy, response = result.copy, result.response
    plan = copy.plan
    _timed(drive, copy)
    if result.failure is not None:
        if response is not None:
            response.close()
        return drive.raised(plan, result.failure, during_body=response is not None, answer=response)
    assert response is not None
    try:
        return _conclude_response(drive, copy, response)
    except BaseException:
        response.close()  # (a rule raised, or a cancel): the connection goes back
        raise


def _conclude_response(drive: Drive, copy: _Copy, response: httpx.Response) -> Step:
    """:func:`_conclude` for a copy that got a response (the caller closes it if this raises)."""
    plan = copy.plan
    step = drive.returned(plan, response)
    if type(step) is ReadBody:
        drive.attempt_ends_at = copy.attempt_ends_at
        failure: Exception
        try:
            read_asked(response, not plan.read_body, step.at_most)
        except AttemptDeadlineReached as reached:
            failure = reached.as_outcome()
        except (httpx.TransportError, httpx.DecodingError) as exc:
            failure = exc
        else:
            return drive.returned(plan, response)
        finally:
            drive.attempt_ends_at = None
        response.close()
        return drive.raised(plan, failure, during_body=True, answer=response)
    if type(step) is AwaitOthers:
        response.close()  # (another copy may still answer)
    elif not hands_over(step, response):
        # (the call sends again: drained within the copy's time, briefly, or closed)
        drain_or_close(response, not plan.read_body, drive, copy.attempt_ends_at)
    return step


class _SyncRound:
    """One attempt of a sync hedging call and its copies.

    The caller's thread coordinates: every copy is sent on a thread of its own
    (:func:`~retrysafe.hedge_threads.run_on_a_thread`, in a
    copy of the caller's context taken when the copy starts, so it sees its own
    attempt's trace context), and hands what it got back through ``results``. Only
    the caller's thread asks the governor, tells the engine and so emits the call's
    events: hooks run, and a tracer enters and leaves contexts, on the thread that
    made the call, as without hedging.
    """

    def __init__(self, transport: Sender, drive: Drive, request: httpx.Request):
        call = drive.call
        assert isinstance(call, HedgedCall)
        self.call = call
        self.transport = transport
        #: Whether its network streams note each copy's first write (see _Copy).
        self.instrumented = notes_first_writes(transport)
        self.drive = drive
        self.request = request
        self.copies: dict[AttemptPlan, _Copy] = {}
        self.results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
        #: Guards ``done``: a copy that ends after the round closes its own response.
        self.lock = threading.Lock()
        self.done = False
        self.winner: _Copy | None = None
        self.judging = _Judging()

    def launch(self, plan: AttemptPlan, copy_request: httpx.Request) -> None:
        """Start sending ``copy_request`` under ``plan`` on a thread of its own."""
        copy = _Copy(
            plan,
            copy_request,
            self.drive,
            self.transport,
            instrumented=self.instrumented,
            judging=self.judging,
        )
        self.copies[plan] = copy
        run_on_a_thread(functools.partial(contextvars.copy_context().run, self._run, copy))

    def _run(self, copy: _Copy) -> None:
        """(On a copy's thread.) Send it and hand what it got to the caller's thread."""
        try:
            result = _send(self.transport, copy)
        except BaseException as exc:  # handed to the caller, who raises it
            result = _Result(copy, None, None, fatal=exc)
        with self.lock:
            if not self.done:
                self.results.put(result)
                return
        if result.response is not None:  # the round is over: nobody will read it
            result.response.close()

    def run(self, plan: AttemptPlan) -> Step:
        """(On the caller's thread.) Send ``plan``'s copy and the hedged copies due, tell
        the engine what each got as it comes in; the round's end step."""
        drive, call = self.drive, self.call
        first_request = _copy_of(self.request)
        _prepare(first_request, drive, plan)
        if call.next_hedge() is None:
            # No copy can follow this one (a request not safe to send twice, hedges used
            # up...): send it from here, with no thread, as a call without hedging does.
            copy = _Copy(plan, first_request, drive, instrumented=self.instrumented)
            alone = _conclude(drive, _send(self.transport, copy))
            if _caller_reads(alone):
                drive.hand_over_body(first_request)  # (the one sent: a copy of the call's)
            return alone
        self.launch(plan, first_request)
        try:
            while True:
                try:
                    result = _next_result(self.results, _wait_for(drive, call, self.copies))
                except queue.Empty:
                    due = _hedge_if_due(drive, call, self.request)
                    if due is not None:
                        self.launch(*due)
                    step = _give_up_overdue(drive, self.copies)
                    if step is not None:
                        return step
                    continue
                if result.fatal is not None:
                    raise result.fatal
                if not call.in_flight(result.copy.plan):  # given up as overdue already
                    if result.response is not None:
                        result.response.close()
                    self.judging.judged(result.copy)
                    continue
                step = _conclude(drive, result)
                if type(step) is not AwaitOthers:
                    self.winner = result.copy
                    if _caller_reads(step):
                        drive.hand_over_body(result.copy.request)
                    return step
                self.judging.judged(result.copy)
        finally:
            self.end()

    def end(self) -> None:
        """The round is over (or the caller was interrupted): cancel every other copy and
        close the answers that came in too late."""
        with self.lock:
            self.done = True
        for copy in self.copies.values():
            if copy is not self.winner:
                copy.cancel()
        self.judging.over()
        while True:
            try:
                late = self.results.get_nowait()
            except queue.Empty:
                break
            if late.copy is not self.winner and late.response is not None:
                late.response.close()


def hedged_round(
    transport: Sender, drive: Drive, request: httpx.Request, plan: AttemptPlan
) -> Step:
    """Send ``plan`` and the hedged copies the engine asks for; the round's end step."""
    return _SyncRound(transport, drive, request).run(plan)


# -- async ---------------------------------------------------------------------------------


async def _run_copy_async(
    transport: AsyncSender,
    copy: _Copy,
    outbox: MemoryObjectSendStream[_Result],
) -> None:
    """Send one copy (as its own task) and leave what it got in ``outbox``."""
    assert copy.scope is not None
    with copy.scope:
        current_call.set(copy)
        current_copy.set(copy)
        response: httpx.Response | None = None
        timeout = hard_end_after(copy.plan) if copy.plan.timeout != math.inf else None
        try:
            with anyio.fail_after(timeout):
                response = await transport.handle_async_request(copy.request)
                response.stream = _AsyncTellsItsClose(response.stream, copy)
                if copy.plan.reads_at_once(response.status_code):
                    await response.aread()
            result = _Result(copy, response, None)
        except AttemptDeadlineReached as reached:
            result = _Result(copy, response, reached.as_outcome())
        except TimeoutError:
            retire_stream_of(copy)  # (cut from outside: see attempt_deadline.retire)
            result = _Result(copy, response, AttemptTimedOut("the copy did not finish in its time"))
        except (httpx.TransportError, httpx.DecodingError) as exc:
            result = _Result(copy, response, exc)
        except anyio.get_cancelled_exc_class():
            retire_stream_of(copy)  # (a losing copy, or the call, cancelled)
            if response is not None:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
            raise
        except Exception as exc:  # handed to the coordinator, which raises it
            result = _Result(copy, response, None, fatal=exc)
        copy.finished = True
        outbox.send_nowait(result)


async def _conclude_async(drive: Drive, result: _Result) -> Step:
    """Tell the engine what one copy got (reading its body if the engine asks)."""
    copy, response = result.copy, result.response
    plan = copy.plan
    _timed(drive, copy)
    if result.failure is not None:
        if response is not None:
            await response.aclose()
        return drive.raised(plan, result.failure, during_body=response is not None, answer=response)
    assert response is not None
    try:
        return await _conclude_response_async(drive, copy, response)
    except BaseException:
        with anyio.CancelScope(shield=True):  # (a rule raised, or a cancel)
            await response.aclose()
        raise


async def _conclude_response_async(drive: Drive, copy: _Copy, response: httpx.Response) -> Step:
    """:func:`_conclude_async` for a copy that got a response (the caller closes it if
    this raises)."""
    plan = copy.plan
    step = drive.returned(plan, response)
    if type(step) is ReadBody:
        drive.attempt_ends_at = copy.attempt_ends_at
        timeout = None if copy.attempt_ends_at is None else copy.attempt_ends_at - time.monotonic()
        failure: Exception
        try:
            with anyio.fail_after(max(0.0, timeout) if timeout is not None else None):
                await aread_asked(response, not plan.read_body, step.at_most)
        except AttemptDeadlineReached as reached:
            failure = reached.as_outcome()
        except TimeoutError:
            failure = AttemptTimedOut("the copy's body did not arrive in its time")
        except (httpx.TransportError, httpx.DecodingError) as exc:
            failure = exc
        else:
            return drive.returned(plan, response)
        finally:
            drive.attempt_ends_at = None
        await response.aclose()
        return drive.raised(plan, failure, during_body=True, answer=response)
    if type(step) is AwaitOthers:
        await response.aclose()  # (another copy may still answer)
    elif not hands_over(step, response):
        # (the call sends again: drained within the copy's time, briefly, or closed)
        await adrain_or_close(response, not plan.read_body, drive, copy.attempt_ends_at)
    return step


async def hedged_round_async(
    transport: AsyncSender, drive: Drive, request: httpx.Request, plan: AttemptPlan
) -> Step:
    """Send ``plan`` and the hedged copies the engine asks for; the round's end step."""
    call = drive.call
    assert isinstance(call, HedgedCall)
    send, receive = anyio.create_memory_object_stream[_Result](math.inf)
    instrumented = notes_first_writes(transport)  # (see _Copy)
    judging = _AsyncJudging()
    copies: dict[AttemptPlan, _Copy] = {}
    winner: _Copy | None = None
    won: httpx.Response | None = None  # the winner's answer, the caller's once returned
    step: Step | None = None
    error: Exception | None = None
    cancelled = False
    try:
        async with anyio.create_task_group() as group:

            def launch(plan: AttemptPlan, copy_request: httpx.Request) -> None:
                copy = _Copy(plan, copy_request, drive, instrumented=instrumented, judging=judging)
                # (shielded from the group's cancel, and ended by the round itself, always:
                # the cancels the copy's task makes of itself, its time running out, its
                # connect's race ending, stay within its task. A scope there that ends
                # while the group's is cancelled too hands what it has yet to take back to
                # its parent, and the group took those back from the caller's task: anyio
                # 4.16 lost the caller's own cancel so, 3 times in 10 around a connect.)
                copy.scope = anyio.CancelScope(shield=True)
                copies[plan] = copy
                group.start_soon(_run_copy_async, transport, copy, send)

            first_request = _copy_of(request)
            _prepare(first_request, drive, plan)
            launch(plan, first_request)
            try:
                while step is None:
                    result: _Result | None = None
                    with anyio.move_on_after(_wait_for(drive, call, copies)):
                        result = await receive.receive()
                    if result is None:
                        due = _hedge_if_due(drive, call, request)
                        if due is not None:
                            launch(*due)
                        step = _give_up_overdue(drive, copies)
                        continue
                    if result.fatal is not None:
                        raise result.fatal
                    if not call.in_flight(result.copy.plan):  # given up as overdue already
                        if result.response is not None:
                            await result.response.aclose()
                        judging.judged(result.copy)
                        continue
                    concluded = await _conclude_async(drive, result)
                    if type(concluded) is not AwaitOthers:
                        winner, step, won = result.copy, concluded, result.response
                        if _caller_reads(step):
                            drive.hand_over_body(winner.request)
                    else:
                        judging.judged(result.copy)
            except Exception as exc:  # raised after the copies are cancelled (no exception group)
                error = exc
            except BaseException:
                cancelled = True  # (from outside: no copy won)
                raise
            finally:
                for copy in copies.values():
                    if cancelled:
                        assert copy.scope is not None
                        copy.scope.cancel()  # (as the group's cancel would: see launch)
                    elif copy is not winner:
                        copy.cancel()
    except BaseException:
        # Cancelled from outside while the losing copies wound down, after a copy won:
        # the winner's answer (unread, for a stream) goes to no one; closed here, or its
        # connection stays busy and its request queued in the pool for ever (review51).
        if won is not None:
            with anyio.CancelScope(shield=True):
                await won.aclose()
        raise
    finally:
        with anyio.CancelScope(shield=True):
            while True:  # answers that came in too late (or not taken): close them
                try:
                    late = receive.receive_nowait()
                except anyio.WouldBlock:
                    break
                if late.copy is not winner and late.response is not None:
                    await late.response.aclose()
        send.close()
        receive.close()
    if error is not None:
        raise error
    if step is None:
        # Cancelled from outside, and the task group took the cancel back: on asyncio a
        # cancel that lands as the round's own wait (move_on_after) runs out comes as one
        # exception, which the group reads as that scope's. The caller's cancel stands.
        await anyio.lowlevel.checkpoint()  # (trio, anyio's way: raises here, still cancelled)
        raise anyio.get_cancelled_exc_class()()
    return step
