"""The asyncio watchdog that ends attempts on transports with no network reads to bound.

``MockTransport`` (like ``ASGITransport`` or any custom transport) gives retrysafe
no socket to bound, so each attempt on it runs under a time limit: one timer per
event loop (:mod:`retrysafe.attempt_watchdog`). Wall-clock tests: short, and they
assert bounds, never exact timings.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import httpx
import pytest
from tests.local_http import QuietHandler, serving

import retrysafe

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(10),  # a watchdog that fails to fire leaves a hang: fail it fast
    pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio 3.11+ only"),
]


@pytest.fixture
def anyio_backend() -> str:
    """The watchdog is asyncio's (trio attempts run under anyio's cancel scope)."""
    return "asyncio"


def _client(handler: object, policy: retrysafe.RetryPolicy) -> retrysafe.AsyncClient:
    return retrysafe.AsyncClient(
        transport=httpx.MockTransport(handler),  # type: ignore[arg-type]
        policy=policy,
        governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
    )


async def _hangs(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(3600)
    return httpx.Response(200)


async def test_an_attempt_that_hangs_ends_at_its_timeout_and_is_retried() -> None:
    policy = retrysafe.RetryPolicy(
        attempts=2, attempt_timeout=0.2, deadline=2.0, backoff_base=0.01, min_attempt_time=0.05
    )
    async with _client(_hangs, policy) as client:
        started = time.monotonic()
        with pytest.raises(retrysafe.TransportError) as caught:
            await client.get("http://upstream.test/slow")
        took = time.monotonic() - started
    assert caught.value.attempts == 2
    assert [record.outcome for record in caught.value.history] == [
        "attempt_timeout",
        "attempt_timeout",
    ]
    assert 0.4 <= took < 1.5


async def test_the_callers_cancellation_is_not_taken_for_a_timeout() -> None:
    policy = retrysafe.RetryPolicy(attempt_timeout=5.0, deadline=10.0)
    async with _client(_hangs, policy) as client:
        task = asyncio.ensure_future(client.get("http://upstream.test/slow"))
        await asyncio.sleep(0.05)
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 1.0


async def test_an_enclosing_timeout_of_the_caller_stays_the_callers() -> None:
    policy = retrysafe.RetryPolicy(attempt_timeout=5.0, deadline=10.0)
    async with _client(_hangs, policy) as client:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await client.get("http://upstream.test/slow")
        # The task is not left with a cancel pending: it goes on as usual.
        await asyncio.sleep(0.01)
        assert asyncio.current_task() is not None
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_short_attempt_ends_on_time_beside_a_long_one_started_first() -> None:
    long_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=2.0, deadline=3.0)
    short_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.15, deadline=3.0)
    async with _client(_hangs, long_policy) as client:
        long_call = asyncio.ensure_future(client.get("http://upstream.test/long"))
        await asyncio.sleep(0.02)  # the watchdog is armed for the long attempt first
        started = time.monotonic()
        with pytest.raises(retrysafe.TransportError):
            await client.get("http://upstream.test/short", policy=short_policy)
        assert time.monotonic() - started < 1.0
        assert not long_call.done()
        long_call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long_call


async def test_a_call_that_ended_in_time_is_never_cancelled_later() -> None:
    async def answers(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)
        return httpx.Response(200, content=b"ok")

    policy = retrysafe.RetryPolicy(attempt_timeout=0.05, deadline=1.0)
    async with _client(answers, policy) as client:
        for _ in range(20):
            assert (await client.get("http://upstream.test/")).status_code == 200
        # Past every attempt's end: the watchdog's timer fires, finds nothing due.
        await asyncio.sleep(0.3)
        dog = client._transport._loop._timer._dog  # type: ignore[attr-defined]
        assert dog is not None
        assert not dog._watches
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_nested_attempts_that_end_together_each_see_their_own_timeout() -> None:
    inner_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=1.0)
    outer_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=1.0)
    inner_errors: list[BaseException] = []

    async with _client(_hangs, inner_policy) as inner:

        async def calls_inner(request: httpx.Request) -> httpx.Response:
            try:
                await inner.get("http://inner.test/")
            except BaseException as error:
                inner_errors.append(error)
                raise
            return httpx.Response(200)

        async with _client(calls_inner, outer_policy) as outer:
            with pytest.raises(retrysafe.ApiError):
                await outer.get("http://outer.test/")
    assert inner_errors  # the inner call ended, one way or the other, inside the outer one
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_an_attempt_that_starts_after_the_timer_was_armed_still_ends_on_time() -> None:
    async def answers(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            await asyncio.sleep(3600)
        return httpx.Response(200, content=b"ok")

    quick = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=1.0)
    slower = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.4, deadline=1.0)
    async with _client(answers, quick) as client:
        # Arms the timer for this attempt's end; it answers at once and is forgotten.
        assert (await client.get("http://upstream.test/fast")).status_code == 200
        # Ends later than the armed timer: the timer, finding nothing due, re-arms for it.
        started = time.monotonic()
        with pytest.raises(retrysafe.TransportError):
            await client.get("http://upstream.test/slow", policy=slower)
        assert 0.3 <= time.monotonic() - started < 1.5


async def test_an_attempt_that_outlives_an_earlier_ones_end_is_not_cut_at_that_end() -> None:
    """The timer is armed for a long attempt, then re-armed for a shorter one that
    started later: the timer armed first is called off. Left to fire at the long
    attempt's end, beside the timer re-armed for that same end, it would find the
    timer since armed for a far later end and cut every attempt due by then."""

    async def answers(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/work":
            await asyncio.sleep(0.6)
            return httpx.Response(200, content=b"ok")
        await asyncio.sleep(3600)
        return httpx.Response(200)

    long_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.4, deadline=3.0)
    short_policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=3.0)
    roomy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=5.0, deadline=6.0)
    async with _client(answers, long_policy) as client:
        long_call = asyncio.ensure_future(client.get("http://upstream.test/long"))
        await asyncio.sleep(0.02)  # the timer is armed for the long attempt's end
        with pytest.raises(retrysafe.TransportError):  # re-armed for this one's, earlier
            await client.get("http://upstream.test/short", policy=short_policy)
        # Runs past the long attempt's end, with time to spare.
        response = await client.get("http://upstream.test/work", policy=roomy)
        assert response.status_code == 200
        with pytest.raises(retrysafe.TransportError):
            await long_call


async def test_a_cancel_the_transport_swallowed_is_taken_back() -> None:
    async def swallows(request: httpx.Request) -> httpx.Response:
        # A test double that answers 504 when cancelled, or reports a read timeout.
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if request.url.path == "/convert":
                raise httpx.ReadTimeout("slow", request=request) from None
            return httpx.Response(504)
        return httpx.Response(200)

    task = asyncio.current_task()
    assert task is not None
    policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=2.0)
    async with _client(swallows, policy) as client:
        with pytest.raises(retrysafe.ServerError):
            await client.get("http://upstream.test/swallow")
        assert task.cancelling() == 0
        with pytest.raises(retrysafe.TransportError):
            await client.get("http://upstream.test/convert")
        assert task.cancelling() == 0
    # So the caller's own time limit still reads as a timeout, not a cancellation.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await asyncio.sleep(1)


async def test_an_attempt_still_winding_down_after_its_cancel_is_cancelled_once() -> None:
    """A transport that swallows the cancel may take a while to wind down; another
    attempt's end meanwhile must not cancel it again (a second cancel, not taken back,
    would read as the caller's, and end the call as cancelled)."""

    async def winds_down(request: httpx.Request) -> httpx.Response:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)  # (closing what it had open)
            return httpx.Response(504)
        return httpx.Response(200)

    policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=2.0)
    later = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.2, deadline=2.0)
    async with _client(winds_down, policy) as client:
        other = asyncio.ensure_future(client.get("http://upstream.test/other", policy=later))
        with pytest.raises(retrysafe.ServerError):
            await client.get("http://upstream.test/mine")
        with pytest.raises(retrysafe.ServerError):
            await other
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_late_loop_still_runs_the_callers_earlier_timer_first() -> None:
    """The loop is late past two ends: another attempt's (0.15 s + grace) and, after the
    caller's own limit (0.30 s), this call's attempt's (0.26 s + grace). The caller's
    limit was due first, so it is what ends this call, as with asyncio.timeout."""
    loop = asyncio.get_running_loop()
    short = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.15, deadline=10.0)
    longer = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.26, deadline=10.0)
    async with _client(_hangs, short) as client:  # one transport: one watchdog for both
        started = time.monotonic()
        other = asyncio.ensure_future(client.get("http://upstream.test/other"))

        async def with_callers_limit() -> str:
            try:
                async with asyncio.timeout(0.30):
                    await client.get("http://upstream.test/mine", policy=longer)
            except TimeoutError:
                return "the caller's limit"
            except retrysafe.ApiError:
                return "the attempt's limit"
            return "no limit"

        mine = asyncio.ensure_future(with_callers_limit())
        # Block the loop in the iteration that runs the first attempt's end (~0.20 s).
        ready = loop._ready  # type: ignore[attr-defined]
        while not (  # noqa: ASYNC110 - it waits for the loop's own state, not an event
            time.monotonic() - started > 0.15
            and any(isinstance(handle, asyncio.TimerHandle) for handle in ready)
        ):
            await asyncio.sleep(0)
        time.sleep(0.15)  # noqa: ASYNC251 - blocking the loop is the point: it is late
        assert await mine == "the caller's limit"
        with pytest.raises(retrysafe.ApiError):
            await other


async def test_a_loop_running_late_cancels_every_attempt_due_at_once() -> None:
    """Forty attempts due within a few µs of each other, on a loop whose every turn takes
    20 ms (a busy process): each ends within a few turns of its end. (The timer cancelled
    only the attempts due by the time it was armed for, then re-armed for the next end,
    which came a turn later: the last attempt ran 0.8 s past its end, and a load trial
    saw attempts of 0.5 s run for 1.5 s.)"""
    policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=10.0)
    ended: list[float] = []
    async with _client(_hangs, policy) as client:
        busy = True

        async def busy_loop() -> None:
            while busy:
                time.sleep(0.02)  # noqa: ASYNC251 - a slow turn of the loop is the point
                await asyncio.sleep(0)

        async def call() -> None:
            started = time.monotonic()
            with pytest.raises(retrysafe.ApiError):
                await client.get("http://upstream.test/")
            ended.append(time.monotonic() - started)

        calls = [asyncio.ensure_future(call()) for _ in range(40)]
        hog = asyncio.ensure_future(busy_loop())
        await asyncio.gather(*calls)
        busy = False
        await hog
    assert len(ended) == 40
    # Its time, the grace, and slow turns: 0.35 s of them was once not enough in a full
    # run (0.553 s, four test workers and the compiled build on two cores). The fault this
    # guards against ran the last attempt 0.8 s past its end, about 0.95 s in all.
    assert max(ended) < 0.1 + 0.05 + 0.55


def test_no_event_loop_is_kept_after_its_run() -> None:
    import gc
    import weakref

    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []
    clients = [_client(_hangs, retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.05))]

    async def one_call() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        with pytest.raises(retrysafe.TransportError):
            await clients[0].get("http://upstream.test/")

    for _ in range(3):
        asyncio.run(one_call())
    gc.collect()
    # The transport keeps the watchdog of the loop it last ran on, and nothing else.
    assert sum(ref() is not None for ref in loops) <= 1
    assert all(ref() is None for ref in loops[:-1])  # (not the first loop's, kept on)
    clients.clear()
    gc.collect()
    assert all(ref() is None for ref in loops)


async def _status_of_a_call_answered_in_50_ms() -> int:
    """One call, with an attempt timeout of 0.5 s, to a server answering in 50 ms."""

    async def answers_soon(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.05)
        return httpx.Response(200, content=b"ok")

    policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.5, deadline=5.0)
    async with _client(answers_soon, policy) as client:
        return (await client.get("http://upstream.test/")).status_code


def test_an_attempt_ends_on_the_loops_own_clock() -> None:
    """A loop whose clock is not time.monotonic() (virtual-time test loops): the limit
    is kept in the loop's time, the only time asyncio code there sees. Here the loop's
    clock is an hour ahead: an end worked out on time.monotonic() would be long past."""

    class HourAheadLoop(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return time.monotonic() + 3600.0

    loop = HourAheadLoop()
    try:
        assert loop.run_until_complete(_status_of_a_call_answered_in_50_ms()) == 200
    finally:
        loop.close()


def test_a_loop_whose_clock_is_patched_on_the_instance_keeps_its_time() -> None:
    """Virtual-time tools patch ``loop.time`` on the loop itself, not its class."""

    loop = asyncio.new_event_loop()
    loop.time = lambda: time.monotonic() + 3600.0  # type: ignore[method-assign]
    try:
        assert loop.run_until_complete(_status_of_a_call_answered_in_50_ms()) == 200
    finally:
        loop.close()


def test_a_clock_patched_between_calls_is_the_clock_of_the_next_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tools like freezegun patch ``time.monotonic`` itself, which the stock loop reads
    on every ``time()``: a watchdog made before the patch must follow it, not keep the
    clock it saw first (an hour ahead, every attempt would be long overdue)."""

    async def answers_soon(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.05)
        return httpx.Response(200, content=b"ok")

    async def main() -> list[int]:
        policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.5, deadline=5.0)
        async with _client(answers_soon, policy) as client:
            statuses = [(await client.get("http://upstream.test/")).status_code]
            real = time.monotonic
            monkeypatch.setattr(time, "monotonic", lambda: real() + 3600.0)
            statuses.append((await client.get("http://upstream.test/")).status_code)
            return statuses

    assert asyncio.run(main()) == [200, 200]


@pytest.mark.parametrize("shift", [-1000.0, 1000.0])
async def test_the_attempts_end_is_on_the_loops_clock_when_a_test_patches_the_loop_class(
    shift: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop class whose ``time`` is patched (a test's virtual clock) has its timers on
    that clock: the attempt's end must be read from it too, or the limit fires at once
    (clock ahead) or never (behind)."""

    def shifted(self: asyncio.BaseEventLoop) -> float:
        return time.monotonic() + shift

    monkeypatch.setattr(asyncio.BaseEventLoop, "time", shifted)

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(1.5)
        return httpx.Response(200)

    policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.3, deadline=5.0)
    async with _client(slow, policy) as client:
        started = time.monotonic()
        with pytest.raises(retrysafe.TransportError) as caught:
            await client.get("http://upstream.test/slow")
        took = time.monotonic() - started
    assert caught.value.history[0].outcome == "attempt_timeout"
    assert 0.3 <= took < 1.2


def test_trio_run_as_a_guest_of_asyncio_ends_its_attempts_under_trio_not_the_watchdog() -> None:
    """trio as a guest of an asyncio loop (``trio.lowlevel.start_guest_run``; trio-asyncio
    is alike): an asyncio loop runs, but the attempt is a trio task's, which the
    watchdog cannot cancel. It runs under anyio's cancel scope, as under ``trio.run``
    (every call failed at once with "an attempt's time limit needs a running asyncio
    task", even one the server answered)."""
    trio = pytest.importorskip("trio")
    policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.2, deadline=1.0)

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/hang":
            await trio.sleep(3600)
        return httpx.Response(200)

    async def calls() -> tuple[int, BaseException, float]:
        async with _client(handler, policy) as client:
            status = (await client.get("http://upstream.test/")).status_code
            started = time.monotonic()
            with pytest.raises(retrysafe.TransportError) as hang:
                await client.get("http://upstream.test/hang")
            return status, hang.value, time.monotonic() - started

    async def host() -> tuple[int, BaseException, float]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[object] = loop.create_future()
        trio.lowlevel.start_guest_run(
            calls,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            done_callback=done.set_result,
        )
        outcome = await done
        return outcome.unwrap()  # type: ignore[attr-defined, no-any-return]

    status, hang, seconds = asyncio.run(host())
    assert status == 200
    assert isinstance(hang, retrysafe.ApiError)
    assert hang.outcome == "attempt_timeout", hang
    assert policy.attempt_timeout <= seconds < policy.attempt_timeout + 0.5


async def test_an_attempt_due_inside_a_shield_is_cut_once_the_shield_ends() -> None:
    """A task inside an anyio cancel scope that shields it (httpcore's clean-up of a
    request that ended: closing its response, giving its connection back) is not
    cancelled there: its attempt is cut at the first await after the shield ends."""
    import anyio

    from retrysafe.attempt_watchdog import AttemptWatchdog

    dog = AttemptWatchdog(asyncio.get_running_loop())
    watch = dog.watch(0.05)
    assert watch is not None
    started = time.monotonic()
    with anyio.CancelScope(shield=True):
        await asyncio.sleep(0.2)  # (a raw Task.cancel() would land here)
    shield_ended = time.monotonic()
    with pytest.raises(asyncio.CancelledError) as caught:
        await asyncio.sleep(1)
    assert watch.caught(caught.value)
    watch.end()
    assert shield_ended - started >= 0.2
    assert time.monotonic() - shield_ended < 0.1  # (rechecked every few ms)


class _BodyNeverComes(QuietHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "100")
        self.end_headers()
        self.wfile.flush()
        time.sleep(1.5)


async def test_an_attempt_cut_while_httpcore_cleans_up_leaves_its_connection_to_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The body never comes: the network stream cuts the attempt at its end, and httpcore
    closes the response inside its shield, slowly here, so the watchdog's time comes
    meanwhile. Cancelled there, the clean-up used to stop halfway: the connection stayed
    busy and the request queued, for ever (a load trial lost 3 to 14 of 100 that way)."""
    import anyio
    from httpcore._async import http11

    closing = http11.AsyncHTTP11Connection._response_closed

    async def slowly(self: http11.AsyncHTTP11Connection) -> None:
        await anyio.sleep(0.2)  # (inside httpcore's shield)
        await closing(self)

    monkeypatch.setattr(http11.AsyncHTTP11Connection, "_response_closed", slowly)
    policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.3, deadline=5.0)
    with serving(_BodyNeverComes) as url:
        async with retrysafe.AsyncClient(
            policy=policy, governor=retrysafe.Governor(retrysafe.GovernorSettings.off())
        ) as client:
            with pytest.raises(retrysafe.ApiError):
                await client.get(url)
            pool: Any = client._transport._loop.transport._pool  # type: ignore[attr-defined]
            assert pool._requests == []  # (before: the request, queued for ever)
            assert [c for c in pool._connections if not (c.is_idle() or c.is_closed())] == []


async def test_a_shield_the_caller_entered_around_the_call_does_not_hold_the_cut_back() -> None:
    """Only a shield entered within the attempt delays its cut: inside the caller's own
    shielded scope, an attempt that hangs ends at its time as anywhere else."""
    import anyio

    policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.2, deadline=2.0)
    async with _client(_hangs, policy) as client:
        started = time.monotonic()
        with anyio.CancelScope(shield=True), pytest.raises(retrysafe.TransportError) as caught:
            await client.get("http://upstream.test/slow")
        took = time.monotonic() - started
    assert caught.value.history[0].outcome == "attempt_timeout"
    assert took < 0.2 + 0.3


async def test_a_call_in_a_task_group_inside_a_shield_is_cut_on_time() -> None:
    import anyio

    policy = retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.2, deadline=2.0)
    outcomes: list[str] = []

    async def call(client: retrysafe.AsyncClient) -> None:
        try:
            await client.get("http://upstream.test/slow")
        except retrysafe.ApiError as error:
            outcomes.append(error.outcome)

    async with _client(_hangs, policy) as client:
        started = time.monotonic()
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                group.start_soon(call, client)
                group.start_soon(call, client)
        took = time.monotonic() - started
    assert outcomes == ["attempt_timeout", "attempt_timeout"]
    assert took < 0.2 + 0.3
