"""A caller who stops waiting stops the whole call at once; nothing more is sent, and
the connection pool is left whole."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from tests.local_http import AnswersOk, QuietHandler, serving, serving_h2_apart

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.governor import BudgetSettings, Governor, GovernorSettings, LimiterSettings
from retrysafe.pool_repair import stranded
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio


async def test_cancelling_the_task_during_an_attempt_stops_at_once(chaos: Any) -> None:
    async with retrysafe.AsyncClient(policy=RetryPolicy(attempt_timeout=10)) as client:
        started = time.monotonic()
        with anyio.move_on_after(0.3) as scope:
            await client.get(chaos.url("/hang"))
        assert scope.cancelled_caught
        assert time.monotonic() - started < 1.0
    await anyio.sleep(0.2)
    assert len(chaos.log()) == 1


async def test_cancelling_the_task_during_a_backoff_sends_nothing_more(chaos: Any) -> None:
    url = chaos.url("/status/503", retry_after=5)
    async with retrysafe.AsyncClient(policy=RetryPolicy(deadline=30)) as client:
        started = time.monotonic()
        with anyio.move_on_after(0.3) as scope:
            await client.get(url)
        assert scope.cancelled_caught
        assert time.monotonic() - started < 1.0
    assert len(chaos.log()) == 1


async def test_async_calls_and_their_cancels_warn_of_nothing(chaos: Any) -> None:
    """Under warnings as errors, as many test suites run: a new connection (anyio's
    connect_tcp cancels inside it), a hedged call's copies, and a cancel mid-attempt.
    (A coroutine compiled by mypyc would warn of Python 3.12's deprecated throw() here.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hedged = RetryPolicy(hedge_after=0.05)
        async with retrysafe.AsyncClient(policy=hedged) as client:
            assert (await client.get(chaos.url("/status/200"))).status_code == 200
            assert (await client.get(chaos.url("/delay", ms=200))).status_code == 200
            with anyio.move_on_after(0.2) as scope:
                await client.get(chaos.url("/hang"))
            assert scope.cancelled_caught


@pytest.fixture(autouse=True)
def _ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as in a terminal, even when the run started with it
    ignored (a shell's background job, nohup): Python then leaves its own handler out."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupt_main_after(seconds: float) -> threading.Timer:
    """Deliver a real SIGINT to the main thread, as Ctrl-C in a terminal would."""
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(seconds, signal.pthread_kill, args=(main, signal.SIGINT))
    timer.start()
    return timer


def test_ctrl_c_during_an_attempt_stops_at_once(chaos: Any) -> None:
    with retrysafe.Client(policy=RetryPolicy(attempt_timeout=10)) as client:
        timer = _interrupt_main_after(0.3)
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            client.get(chaos.url("/hang"))
        timer.join()
        assert time.monotonic() - started < 1.5
    assert len(chaos.log()) == 1


def test_ctrl_c_during_a_backoff_sends_nothing_more(chaos: Any) -> None:
    url = chaos.url("/status/503", retry_after=5)
    with retrysafe.Client(policy=RetryPolicy(deadline=30)) as client:
        timer = _interrupt_main_after(0.3)
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            client.get(url)
        timer.join()
        assert time.monotonic() - started < 1.5
    time.sleep(0.1)
    assert len(chaos.log()) == 1


class _Interrupted(FakeClock):
    """Ctrl-C in any wait the call makes (a backoff, a paced slot)."""

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            raise KeyboardInterrupt


class _Stalled(FakeClock):
    """A wait that never ends, for the task to be cancelled in."""

    async def async_sleep(self, seconds: float) -> None:
        if seconds > 0:
            await anyio.sleep_forever()


def _governed(
    clock: FakeClock, settings: GovernorSettings, status: int
) -> tuple[Governor, httpx.MockTransport]:
    """A governor on ``clock``, and a transport answering every request with ``status``."""
    return (
        Governor(settings, clock=clock),
        httpx.MockTransport(lambda request: httpx.Response(status)),
    )


PACED = GovernorSettings(limiter=LimiterSettings(requests_per_second=1.0, burst=1))
#: Ten tokens, none earned or refilled: what the budget holds after is what was given back.
BUDGETED = GovernorSettings(
    budget=BudgetSettings(ratio=0.1, max_tokens=10, min_per_second=0.0), breaker=None
)


def test_ctrl_c_while_waiting_for_a_paced_slot_gives_the_slot_back() -> None:
    # A paced call waiting its turn reserved a slot in the dependency's queue; stopped
    # there (Ctrl-C in the wait), it gives the slot back, so the next caller is not
    # paced behind a caller that is gone.
    clock = _Interrupted()
    governor, mock = _governed(clock, PACED, 200)
    transport = retrysafe.RetryTransport(mock, clock=clock, governor=governor)
    with httpx.Client(transport=transport) as client:
        first = client.get("http://api.test/first")  # takes the one token
        with pytest.raises(KeyboardInterrupt):
            client.get("http://api.test/second")  # its slot is a second away: it waits
    dependency = first.extensions["retrysafe"].dependency
    assert governor.dependencies() == [dependency]
    limiter = governor.guard(dependency).limiter
    assert limiter is not None
    assert limiter.queued() == 0.0


async def test_a_task_cancelled_while_waiting_for_a_paced_slot_gives_the_slot_back() -> None:
    # The same for a task cancelled in that wait: the slot it reserved is given back.
    clock = _Stalled()
    governor, mock = _governed(clock, PACED, 200)
    transport = retrysafe.AsyncRetryTransport(mock, clock=clock, governor=governor)
    async with httpx.AsyncClient(transport=transport) as client:
        first = await client.get("http://api.test/first")  # takes the one token
        with anyio.move_on_after(0.2) as scope:
            await client.get("http://api.test/second")  # its slot is a second away: it waits
    assert scope.cancelled_caught
    dependency = first.extensions["retrysafe"].dependency
    limiter = governor.guard(dependency).limiter
    assert limiter is not None
    assert limiter.queued() == 0.0


def test_ctrl_c_during_a_backoff_gives_the_retrys_budget_token_back() -> None:
    # The retry the budget paid for was never sent: the dependency saw no load from it,
    # and a burst of callers stopped mid-backoff must not leave the budget empty.
    clock = _Interrupted()
    governor, mock = _governed(clock, BUDGETED, 503)
    transport = retrysafe.RetryTransport(mock, clock=clock, governor=governor)
    with httpx.Client(transport=transport) as client:
        for _ in range(3):
            with pytest.raises(KeyboardInterrupt):
                client.get("http://api.test/")  # a 503, then stopped in the backoff
    budget = governor.guard("http://api.test:80").budget
    assert budget is not None
    assert budget.tokens == pytest.approx(10)


async def test_a_task_cancelled_during_a_backoff_gives_the_retrys_budget_token_back() -> None:
    clock = _Stalled()
    governor, mock = _governed(clock, BUDGETED, 503)
    transport = retrysafe.AsyncRetryTransport(mock, clock=clock, governor=governor)
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(3):
            with anyio.move_on_after(0.05) as scope:
                await client.get("http://api.test/")  # a 503, then cancelled in the backoff
            assert scope.cancelled_caught
    budget = governor.guard("http://api.test:80").budget
    assert budget is not None
    assert budget.tokens == pytest.approx(10)


def _slow_clean_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make httpcore's closing of a response, inside its shield, take 0.2 s: a caller's
    timeout of 0.1 s then lands there every time."""
    from httpcore._async import http11

    closing = http11.AsyncHTTP11Connection._response_closed

    async def slowly(self: http11.AsyncHTTP11Connection) -> None:
        await anyio.sleep(0.2)  # (inside httpcore's shield)
        await closing(self)

    monkeypatch.setattr(http11.AsyncHTTP11Connection, "_response_closed", slowly)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11+")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_callers_timeout_during_httpcores_clean_up_leaves_the_pool_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``asyncio.timeout`` cancels with ``Task.cancel()``, which reaches into the shield
    httpcore tidies its pool in when a response ends (slowed here, so the timeout falls
    there). Cut halfway, that left the connection busy and the request queued for ever:
    one connection lost per such timeout (plain httpx alike). The shell finishes it.
    (Where httpx reads a body the shell handed over unread, the drop-in transport's or a
    stream's, the stream handed over does it: below.)"""
    _slow_clean_up(monkeypatch)
    with serving(AnswersOk) as url:
        async with retrysafe.AsyncClient() as client:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):  # type: ignore[attr-defined,unused-ignore]
                    await client.get(url)
            pool: Any = client._transport._loop.transport._pool  # type: ignore[attr-defined]
            assert pool._requests == []  # (before: the request, queued for ever)
            assert [c for c in pool._connections if not (c.is_idle() or c.is_closed())] == []
            monkeypatch.undo()
            assert (await client.get(url)).status_code == 200


class _AnswersSlowly(AnswersOk):
    delay = 0.5


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11+")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_request_sent_twice_at_once_keeps_one_send_when_the_other_is_cancelled() -> None:
    """One ``httpx.Request`` sent by two tasks: the pool holds one record of each send.
    Cancelling one must leave the other's alone (finding its record by the request would
    take the other's out of the queue, and close its connection mid-answer)."""
    with serving(_AnswersSlowly) as url:
        async with retrysafe.AsyncClient() as client:
            request = client.build_request("GET", url)
            other = asyncio.create_task(client.send(request))
            await asyncio.sleep(0.05)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):  # type: ignore[attr-defined,unused-ignore]
                    await client.send(request)
            assert (await other).status_code == 200
            pool: Any = client._transport._loop.transport._pool  # type: ignore[attr-defined]
            assert pool._requests == []


class _CutsItsBodyShort(QuietHandler):
    """Promises a body of 10 bytes, sends 2 and hangs up: the reader's read fails."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "10")
        self.end_headers()
        self.wfile.write(b"ok")
        self.close_connection = True


async def _stream(client: httpx.AsyncClient, url: str) -> object:
    async with client.stream("GET", url) as response:
        return await response.aread()


async def _send_streamed(client: httpx.AsyncClient, url: str) -> object:
    response = await client.send(client.build_request("GET", url), stream=True)
    try:
        return await response.aread()
    finally:
        await response.aclose()


async def _get(client: httpx.AsyncClient, url: str) -> object:
    return await client.get(url)


def _own_client() -> httpx.AsyncClient:
    return retrysafe.AsyncClient(policy=RetryPolicy(attempts=1))


def _drop_in_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=retrysafe.AsyncRetryTransport())


def _pool_of(client: httpx.AsyncClient) -> Any:
    return client._transport._loop.transport._pool  # type: ignore[attr-defined]


_BODIES_READ_AFTER_THE_SHELL = [
    pytest.param(_own_client, _stream, id="stream"),
    pytest.param(_own_client, _send_streamed, id="send-stream"),
    pytest.param(_drop_in_client, _get, id="drop-in-get"),
    pytest.param(_drop_in_client, _stream, id="drop-in-stream"),
]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11+")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(("make", "call"), _BODIES_READ_AFTER_THE_SHELL)
async def test_a_callers_timeout_as_a_body_read_after_the_shell_closes_leaves_the_pool_whole(
    monkeypatch: pytest.MonkeyPatch, make: Any, call: Any
) -> None:
    """As above, where the caller (a stream) or httpx (under the drop-in transport) reads
    the body after the shell handed the response over, and closes it: the stream the shell
    hands over finishes the clean-up the timeout cut (before: the request queued and the
    connection busy for ever, as in plain httpx)."""
    _slow_clean_up(monkeypatch)
    with serving(AnswersOk) as url:
        async with make() as client:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):  # type: ignore[attr-defined,unused-ignore]
                    await call(client, url)
            pool = _pool_of(client)
            assert pool._requests == []
            assert [c for c in pool._connections if stranded(c)] == []
            monkeypatch.undo()
            with anyio.fail_after(5):
                assert (await client.get(url)).status_code == 200


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11+")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(("make", "call"), _BODIES_READ_AFTER_THE_SHELL)
async def test_a_callers_timeout_as_a_failed_body_read_closes_leaves_the_pool_whole(
    monkeypatch: pytest.MonkeyPatch, make: Any, call: Any
) -> None:
    """A body read that fails (the server hangs up mid-body) makes httpcore close the
    response itself, in the same shield: a caller's timeout landing there is mended too."""
    _slow_clean_up(monkeypatch)
    with serving(_CutsItsBodyShort) as url:
        async with make() as client:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):  # type: ignore[attr-defined,unused-ignore]
                    await call(client, url)
            pool = _pool_of(client)
            assert pool._requests == []
            assert [c for c in pool._connections if stranded(c)] == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_stream_read_in_part_and_closed_gives_its_connection_back() -> None:
    """The stream handed over changes nothing when nothing is cut: a reader that stops
    early and closes leaves the pool as httpx does."""
    with serving(AnswersOk) as url:
        async with _own_client() as client:
            async with client.stream("GET", url) as response:
                async for _ in response.aiter_raw(1):
                    break
            pool = _pool_of(client)
            assert pool._requests == []
            assert [c for c in pool._connections if stranded(c)] == []
            assert (await client.get(url)).status_code == 200


def _slow_connection_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make httpcore's closing of a connection that cannot be reused (its response was
    not read to the end) take 0.2 s: it runs inside the connection's state lock, in the
    clean-up of the response."""
    from httpcore._async import http11

    closing = http11.AsyncHTTP11Connection.aclose

    async def slowly(self: http11.AsyncHTTP11Connection) -> None:
        await anyio.sleep(0.2)
        await closing(self)

    monkeypatch.setattr(http11.AsyncHTTP11Connection, "aclose", slowly)


_STREAMING_CLIENTS = [
    pytest.param(_own_client, id="own-client"),
    pytest.param(_drop_in_client, id="drop-in"),
]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("make", _STREAMING_CLIENTS)
@pytest.mark.parametrize(
    "callers_timeout",
    [
        pytest.param(None, id="closed"),
        pytest.param(
            0.05,
            id="close-timed-out",
            marks=pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout: 3.11+"),
        ),
    ],
)
async def test_closing_a_response_while_its_dropped_iterator_is_finalized_leaves_httpcore_alone(
    monkeypatch: pytest.MonkeyPatch, make: Any, callers_timeout: float | None
) -> None:
    """A reader that drops a body's iterator unfinished leaves its closing to asyncio's
    finalizer of async generators, which runs httpcore's clean-up in a task of its own.
    Closing the response while that clean-up is under way is not a cut clean-up: the
    stream handed over leaves it to httpcore (before: it took the request out of the
    pool's queue first, and httpcore's own removal failed in the finalizer's task with a
    ValueError that asyncio logged). A caller's timeout that comes while the close waits
    for that clean-up comes once it has ended (at that moment, the close looked cut)."""
    import gc

    loop_errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: loop_errors.append(context))
    with serving(AnswersOk) as url:
        async with make() as client:
            response = await client.send(client.build_request("GET", url), stream=True)
            chunks = response.aiter_raw(1)
            await chunks.__anext__()
            _slow_connection_close(monkeypatch)
            del chunks
            gc.collect()  # (the finalizer's task starts httpcore's clean-up)
            await asyncio.sleep(0.05)  # (which is now inside the slowed close)
            if callers_timeout is None:
                await response.aclose()
            else:
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(callers_timeout):  # type: ignore[attr-defined,unused-ignore]
                        await response.aclose()
            await asyncio.sleep(0.3)  # (the finalizer's task ends)
            monkeypatch.undo()
            pool = _pool_of(client)
            assert pool._requests == []
            assert [c for c in pool._connections if stranded(c)] == []
            with anyio.fail_after(5):
                assert (await client.get(url)).status_code == 200
    assert [context.get("exception") for context in loop_errors] == []


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11+")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_http2_streams_close_does_not_wait_for_the_connections_state_lock() -> None:
    """Over HTTP/2 a stream's close that leaves the connection open needs nothing of its
    state lock. Another task holds that lock 0.3 s (as a request starting there does for
    a pass, or the last stream closing an ended connection): one stream's close, under
    a caller's 0.05 s timeout inside an outer 0.1 s one, ends at once, its request leaves
    the pool's queue, and the connection serves the next request. (httpcore's own close
    queued for the lock, where the caller's timeout cut it, and a second timeout could
    land in the wait for the holder.)"""
    pytest.importorskip("hypercorn")

    with serving_h2_apart(10) as base:
        transport = httpx.AsyncHTTPTransport(http1=False, http2=True)
        async with httpx.AsyncClient(transport=retrysafe.AsyncRetryTransport(transport)) as client:
            first = await client.send(client.build_request("GET", base + "/one"), stream=True)
            other = await client.send(client.build_request("GET", base + "/two"), stream=True)
            pool = _pool_of(client)
            assert len(pool._connections) == 1  # (both streams on one connection)
            state_lock = pool._connections[0]._connection._state_lock

            async def hold() -> None:
                async with state_lock:
                    await anyio.sleep(0.3)

            holder = asyncio.create_task(hold())
            await asyncio.sleep(0.02)  # (the holder has the lock)
            async with asyncio.timeout(0.1), asyncio.timeout(0.05):  # type: ignore[attr-defined,unused-ignore]
                await first.aclose()
            assert not holder.done()  # (the close did not wait for it)
            await holder
            await other.aclose()
            assert pool._requests == []
            assert [c for c in pool._connections if stranded(c)] == []
            with anyio.fail_after(5):
                assert (await client.get(base + "/three")).status_code == 200
