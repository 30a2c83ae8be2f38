"""Behaviours of the per-request drive layer (drive.py, first_attempt.py, the send loops)
that a mutation review found no test pinned down."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import anyio
import httpx
import pytest

import retrysafe
from retrysafe.attempt_deadline import current_call
from retrysafe.attempt_plan import HARD_END_GRACE
from retrysafe.drive import Drive
from retrysafe.testing import FakeClock
from timeout_recorder import CALLERS, TimeoutRecorder

pytestmark = pytest.mark.anyio

URL = "http://api.test/items"
NO_JITTER = retrysafe.RetryPolicy(retry_after_jitter=0.0)


class TimeoutTamperer:
    """A mock server whose first answer is a 503, and which, as a transport may, changes
    the timeouts of the request it was sent; it notes each attempt's timeouts."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions["timeout"]
        self.sent.append(dict(timeouts))
        timeouts["read"] = 0.001
        return httpx.Response(503 if len(self.sent) == 1 else 200)


def test_a_transport_that_changes_its_requests_timeouts_does_not_change_the_callers() -> None:
    """Each attempt is sent with a copy of the caller's timeouts: a transport changing the
    ones it was sent does not change what the next attempt starts from."""
    server = TimeoutTamperer()
    with retrysafe.Client(
        transport=httpx.MockTransport(server), timeout=5.0, clock=FakeClock(randoms=[0.0])
    ) as client:
        assert client.get(URL).status_code == 200
    assert server.sent == [CALLERS, CALLERS]


@pytest.mark.parametrize("pool", [None, 3.0])
def test_a_pool_wait_longer_than_the_attempt_is_bounded_by_it(pool: float | None) -> None:
    """Every phase, the wait for a pooled connection too, ends within the attempt's time,
    even when the caller's other phases already do."""
    server = TimeoutRecorder()
    with retrysafe.Client(
        transport=httpx.MockTransport(server),
        policy=retrysafe.RetryPolicy(attempt_timeout=2.0, deadline=30.0),
        timeout=httpx.Timeout(1.0, pool=pool),
    ) as client:
        client.get(URL)
    assert server.sent == [{"connect": 1.0, "read": 1.0, "write": 1.0, "pool": 2.0}]


def test_infinite_caller_timeouts_under_an_unbounded_attempt_are_sent_as_none() -> None:
    """httpx spells "no timeout" as None and sockets refuse an infinite one: a caller's
    ``inf`` phases, under an attempt with no time limit, go out as None."""
    server = TimeoutRecorder()
    unbounded = retrysafe.RetryPolicy(attempt_timeout=float("inf"), deadline=float("inf"))
    with retrysafe.Client(
        transport=httpx.MockTransport(server), policy=unbounded, timeout=float("inf")
    ) as client:
        client.get(URL)
    assert server.sent == [{"connect": None, "read": None, "write": None, "pool": None}]


@pytest.mark.parametrize(
    ("caller", "sent"),
    [
        # every phase within the attempt's 2 s: the caller's own, as they came
        (httpx.Timeout(1.5), {"connect": 1.5, "read": 1.5, "write": 1.5, "pool": 1.5}),
        (httpx.Timeout(1), {"connect": 1, "read": 1, "write": 1, "pool": 1}),
        # no timeout at all, or a phase without one: that phase gets the attempt's time
        (httpx.Timeout(None), {"connect": 2.0, "read": 2.0, "write": 2.0, "pool": 2.0}),
        (
            httpx.Timeout(1.0, read=None),
            {"connect": 1.0, "read": 2.0, "write": 1.0, "pool": 1.0},
        ),
        # one phase longer than the attempt: only it is cut
        (
            httpx.Timeout(1.0, write=5.0),
            {"connect": 1.0, "read": 1.0, "write": 2.0, "pool": 1.0},
        ),
        # exactly the attempt's time is within it
        (httpx.Timeout(2.0), {"connect": 2.0, "read": 2.0, "write": 2.0, "pool": 2.0}),
    ],
)
def test_each_phase_is_sent_as_the_callers_or_the_attempts_time_whichever_is_shorter(
    caller: httpx.Timeout, sent: dict[str, float]
) -> None:
    server = TimeoutRecorder()
    with retrysafe.Client(
        transport=httpx.MockTransport(server),
        policy=retrysafe.RetryPolicy(attempt_timeout=2.0, deadline=30.0),
        timeout=caller,
    ) as client:
        client.get(URL)
    assert server.sent == [sent]


async def own_read_timeout(request: httpx.Request) -> httpx.Response:
    """A mock server that never answers, sent through a transport that keeps its own read
    timeout (the one it was sent with), as a custom transport may. Its timer runs from
    the attempt's start, as retrysafe's does: a busy machine that stalls this task
    between the two (more than the 50 ms between them, once in a full run on 2 cores)
    must not decide which ends first."""
    running = current_call.get()
    assert isinstance(running, Drive)
    assert running.attempt_started_at is not None
    ends_at = running.attempt_started_at + request.extensions["timeout"]["read"]
    try:
        with anyio.fail_after(ends_at - time.monotonic()):
            await anyio.sleep_forever()
    except TimeoutError:
        raise httpx.ReadTimeout("no answer", request=request) from None
    raise AssertionError("unreachable")  # pragma: no cover


async def test_a_transports_own_timeout_at_the_attempts_time_is_what_ends_the_attempt() -> None:
    """An attempt's hard end comes a little after its per-phase timeouts, so a transport
    retrysafe cannot reach into still reports its own timeout first (a read timeout),
    rather than retrysafe's cut."""
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(own_read_timeout),
        policy=retrysafe.RetryPolicy(attempts=1, attempt_timeout=0.2),
    ) as client:
        with pytest.raises(retrysafe.ApiError) as caught:
            await client.get(URL)
    assert [record.outcome for record in caught.value.history] == ["read_timeout"]


class BrokenBody(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body whose first read fails with ``error``; it notes whether it was closed."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        raise self.error
        yield b""  # (a generator)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        raise self.error
        yield b""

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class BrokenFirstBody:
    """A mock server whose first answer's body breaks off with ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.first = BrokenBody(error)
        self.attempts = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        if self.attempts == 1:
            return httpx.Response(200, stream=self.first)
        return httpx.Response(200, content=b"ok")


def test_a_body_that_breaks_off_in_the_attempt_is_retried_and_its_response_closed() -> None:
    """A call that does not stream reads the body within the attempt: a body that breaks
    off is a failed attempt (retried), and its response is closed, not left open."""
    server = BrokenFirstBody(httpx.ReadError("connection reset"))
    with retrysafe.Client(
        transport=httpx.MockTransport(server), clock=FakeClock(randoms=[0.0])
    ) as client:
        response = client.get(URL)
    assert response.content == b"ok"
    assert server.attempts == 2
    assert server.first.closed


async def test_an_async_body_that_breaks_off_in_the_attempt_is_retried_and_closed() -> None:
    server = BrokenFirstBody(httpx.ReadError("connection reset"))
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(server), clock=FakeClock(randoms=[0.0])
    ) as client:
        response = await client.get(URL)
    assert response.content == b"ok"
    assert server.attempts == 2
    assert server.first.closed


def test_a_body_read_cancelled_in_the_attempt_closes_its_response() -> None:
    """Ctrl-C while the attempt reads the body: the call stops at once, and the response
    it got is closed on the way out."""
    server = BrokenFirstBody(KeyboardInterrupt())
    with (
        retrysafe.Client(transport=httpx.MockTransport(server)) as client,
        pytest.raises(KeyboardInterrupt),
    ):
        client.get(URL)
    assert server.attempts == 1
    assert server.first.closed


def test_a_body_that_breaks_off_is_a_bad_response_not_a_transport_error() -> None:
    """Headers came, then the body broke off: the server answered (a truncated body,
    ``BadResponse``), unlike a connection that failed before any answer."""
    server = BrokenFirstBody(httpx.ReadError("connection reset"))
    with (
        retrysafe.Client(
            transport=httpx.MockTransport(server), policy=retrysafe.RetryPolicy(attempts=1)
        ) as client,
        pytest.raises(retrysafe.BadResponse) as caught,
    ):
        client.get(URL)
    assert caught.value.outcome == "truncated_body"


async def test_an_async_body_that_breaks_off_is_a_bad_response_not_a_transport_error() -> None:
    server = BrokenFirstBody(httpx.ReadError("connection reset"))
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(server), policy=retrysafe.RetryPolicy(attempts=1)
    ) as client:
        with pytest.raises(retrysafe.BadResponse) as caught:
            await client.get(URL)
    assert caught.value.outcome == "truncated_body"


class UndecodableFirstBody:
    """A mock server whose first answer says gzip but is not; the next one is fine."""

    def __init__(self) -> None:
        self.attempts = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        if self.attempts == 1:
            return httpx.Response(200, headers={"content-encoding": "gzip"}, content=b"nope")
        return httpx.Response(200, content=b"ok")


def test_a_body_that_cannot_be_decoded_is_a_failed_attempt_that_is_retried() -> None:
    server = UndecodableFirstBody()
    with retrysafe.Client(
        transport=httpx.MockTransport(server), clock=FakeClock(randoms=[0.0])
    ) as client:
        assert client.get(URL).content == b"ok"
    assert server.attempts == 2


async def test_an_async_body_that_cannot_be_decoded_is_a_failed_attempt_that_is_retried() -> None:
    server = UndecodableFirstBody()
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(server), clock=FakeClock(randoms=[0.0])
    ) as client:
        assert (await client.get(URL)).content == b"ok"
    assert server.attempts == 2


class HangingBody(httpx.AsyncByteStream):
    """An async body that never sends a byte; it notes whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await anyio.sleep_forever()
        yield b""

    async def aclose(self) -> None:
        self.closed = True


async def test_an_async_body_read_cancelled_in_the_attempt_closes_its_response() -> None:
    """The task is cancelled while the attempt reads the body: the call stops at once,
    and the response it got is closed on the way out."""
    body = HangingBody()
    sent: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, stream=body)

    async with retrysafe.AsyncClient(transport=httpx.MockTransport(server)) as client:
        with anyio.move_on_after(0.2) as scope:
            await client.get(URL)
    assert scope.cancelled_caught
    assert len(sent) == 1
    assert body.closed


class SlowToCloseBody(HangingBody):
    """A hanging body whose close takes a while (it waits for its connection to wind
    down); it notes whether its close ran to the end."""

    async def aclose(self) -> None:
        await anyio.sleep(0.4)
        self.closed = True


async def test_a_slow_close_after_a_cancel_is_not_cut_by_the_attempts_time_limit() -> None:
    """The task is cancelled while the attempt reads the body: the response's close, which
    outlasts the attempt's time, runs to its end; the attempt's time limit no longer
    applies to it."""
    body = SlowToCloseBody()
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(200, stream=body)),
        policy=retrysafe.RetryPolicy(attempt_timeout=0.3),
    ) as client:
        with anyio.move_on_after(0.1) as scope:
            await client.get(URL)
    assert scope.cancelled_caught
    assert body.closed


# -- redirect chains ------------------------------------------------------------------------


class Redirecting:
    """A mock server: ``/start`` redirects to ``/end`` after ``first_hop`` seconds on the
    fake clock; each hop's timeouts are noted."""

    def __init__(self, clock: FakeClock, first_hop: float = 0.0) -> None:
        self.clock = clock
        self.first_hop = first_hop
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.url.path, dict(request.extensions["timeout"])))
        if request.url.path == "/start":
            self.clock.advance(self.first_hop)
            return httpx.Response(302, headers={"location": "/end"})
        return httpx.Response(200, stream=httpx.ByteStream(b"end"))  # (unread, as on a socket)


def test_a_redirects_next_hop_hands_the_callers_own_timeouts_to_a_streamed_body() -> None:
    """httpx builds the next hop with a copy of the last one's extensions, whose timeouts
    the first hop's attempt bounded; the chain keeps the caller's, and a streamed final
    body is read with them."""
    clock = FakeClock()
    server = Redirecting(clock, first_hop=1.0)
    with (
        retrysafe.Client(
            transport=httpx.MockTransport(server),
            policy=retrysafe.RetryPolicy(deadline=3.0),
            timeout=5.0,
            clock=clock,
        ) as client,
        client.stream("GET", "http://api.test/start", follow_redirects=True) as response,
    ):
        assert response.request.extensions["timeout"] == CALLERS
    assert [path for path, _ in server.sent] == ["/start", "/end"]
    # (what the chain had left, less the grace its hard end keeps after the phases: see
    # attempt_plan.phase_limit)
    assert server.sent[0][1] == dict.fromkeys(CALLERS, 3.0 - HARD_END_GRACE)
    assert server.sent[1][1] == dict.fromkeys(CALLERS, 2.0 - HARD_END_GRACE)


def test_a_redirects_last_hop_whose_streamed_body_a_rule_read_is_timed_by_its_own_hop() -> None:
    """A rule read the last hop's body before it was handed over, so retrysafe sets its
    ``elapsed`` (httpx sets it only as the stream closes): the hop's time, as httpx
    counts each hop's, not the whole chain's."""
    clock = FakeClock()
    server = Redirecting(clock, first_hop=1.0)

    def reads_the_body(response: httpx.Response) -> retrysafe.Verdict | None:
        return retrysafe.Verdict.success() if response.content == b"end" else None

    with (
        retrysafe.Client(
            transport=httpx.MockTransport(server),
            policy=retrysafe.RetryPolicy(deadline=3.0, rules=(reads_the_body,)),
            clock=clock,
        ) as client,
        client.stream("GET", "http://api.test/start", follow_redirects=True) as response,
    ):
        assert response.elapsed == timedelta(0)  # the first hop's 1 s is not this hop's
        assert response.read() == b"end"


def test_a_request_sent_again_after_its_redirect_starts_a_chain_of_its_own() -> None:
    """A redirect (not followed) leaves its deadline for the next hop; the same request
    sent again later is no next hop: it gets a deadline of its own."""
    clock = FakeClock()
    server = Redirecting(clock)
    with retrysafe.Client(
        transport=httpx.MockTransport(server),
        policy=retrysafe.RetryPolicy(deadline=3.0),
        clock=clock,
    ) as client:
        request = client.build_request("GET", "http://api.test/start")
        assert client.send(request).status_code == 302
        clock.advance(10.0)  # long past the first call's deadline
        assert client.send(request).status_code == 302


# -- nesting and rules ------------------------------------------------------------------------


def test_an_outer_call_does_not_retry_the_connection_failure_an_inner_layer_gave_up_on() -> None:
    """A layer under a retrying call retries, gives up and raises its last failure (a
    drop-in transport raises httpx's own error): the outer call does not retry that same
    failure, or the layers' attempts would multiply."""
    clock = FakeClock()
    sent: list[httpx.Request] = []

    def unreachable(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    inner = retrysafe.RetryTransport(
        httpx.MockTransport(unreachable), clock=clock, governor=retrysafe.Governor(clock=clock)
    )
    outer = retrysafe.RetryTransport(inner, clock=clock, governor=retrysafe.Governor(clock=clock))
    with httpx.Client(transport=outer) as client, pytest.raises(httpx.ConnectError):
        client.get(URL)
    assert len(sent) == 2  # the inner call retried once; the outer one stopped


def test_a_call_a_hook_makes_between_attempts_is_not_bounded_by_the_attempt_that_ended() -> None:
    """Hooks run after an attempt has ended: a call one makes (a log shipper's, say) is
    not made inside that attempt, so it keeps its own timeouts, not the attempt's end."""
    shipped = TimeoutRecorder()
    attempts: list[httpx.Request] = []

    def refuses_once(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        if len(attempts) == 1:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200)

    with retrysafe.Client(transport=httpx.MockTransport(shipped), timeout=5.0) as shipper:

        def ship(event: retrysafe.RetryEvent) -> None:
            if event.kind == "retry":
                shipper.get(URL)

        with retrysafe.Client(
            transport=httpx.MockTransport(refuses_once),
            policy=retrysafe.RetryPolicy(attempt_timeout=1.0, deadline=30.0),
            hooks=[ship],
            clock=FakeClock(randoms=[0.0]),
        ) as client:
            assert client.get(URL).status_code == 200
    assert len(attempts) == 2
    assert shipped.sent == [CALLERS]


def test_a_rule_can_read_where_the_response_came_from() -> None:
    """A transport's response gets its request only as httpx's client returns it, after
    the rules ran; the rules see it all the same (``response.url``, its method)."""
    seen: list[tuple[str, str]] = []

    def note(response: httpx.Response) -> retrysafe.Verdict | None:
        seen.append((response.request.method, str(response.url)))
        return None

    with retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        policy=retrysafe.RetryPolicy(rules=(note,)),
    ) as client:
        assert client.get(URL).status_code == 200
    assert seen == [("GET", URL)]


def test_a_calls_error_names_the_failure_that_ended_it_as_its_cause() -> None:
    """retrysafe's error for a failed call is raised from the last attempt's own
    exception, so a traceback shows what actually went wrong."""
    refused = httpx.ConnectError("connection refused")

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise refused

    with (
        retrysafe.Client(
            transport=httpx.MockTransport(unreachable), policy=retrysafe.RetryPolicy(attempts=1)
        ) as client,
        pytest.raises(retrysafe.TransportError) as caught,
    ):
        client.get(URL)
    assert caught.value.__cause__ is refused
