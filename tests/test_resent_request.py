"""A request sent twice: the second call starts from the caller's own timeouts.

Each attempt's phases are bounded, on the caller's request, by the time the attempt has
left. A caller (or an SDK retrying on its own) may send that same ``httpx.Request``
again; that call must see the timeouts the caller gave, not the shrunken ones the
first call's last attempt was sent with.
"""

from __future__ import annotations

import httpx
import pytest

import retrysafe
from retrysafe.testing import FakeClock
from timeout_recorder import CALLERS, TimeoutRecorder

pytestmark = pytest.mark.anyio

URL = "http://api.test/items"


def test_a_request_sent_again_by_the_client_gets_the_callers_timeouts() -> None:
    server = TimeoutRecorder()
    with retrysafe.Client(transport=httpx.MockTransport(server), timeout=5.0) as client:
        request = client.build_request("GET", URL)
        with retrysafe.deadline(1):
            client.send(request)
        client.send(request)

    first, second = server.sent
    assert all(0 < value <= 1.0 for value in first.values()), first
    assert second == CALLERS


async def test_a_request_sent_again_by_the_async_client_gets_the_callers_timeouts() -> None:
    server = TimeoutRecorder()
    async with retrysafe.AsyncClient(transport=httpx.MockTransport(server), timeout=5.0) as client:
        request = client.build_request("GET", URL)
        async with retrysafe.deadline(1):
            await client.send(request)
        await client.send(request)

    first, second = server.sent
    assert all(0 < value <= 1.0 for value in first.values()), first
    assert second == CALLERS


def test_a_request_sent_again_through_the_transport_gets_the_callers_timeouts() -> None:
    server = TimeoutRecorder()
    short = retrysafe.RetryTransport(
        httpx.MockTransport(server), policy=retrysafe.RetryPolicy(deadline=1)
    )
    roomy = retrysafe.RetryTransport(httpx.MockTransport(server))
    with (
        httpx.Client(transport=short, timeout=5.0) as tight,
        httpx.Client(transport=roomy, timeout=5.0) as loose,
    ):
        request = tight.build_request("GET", URL)
        tight.send(request)
        loose.send(request)  # e.g. an SDK handing its request to another client

    first, second = server.sent
    assert all(0 < value <= 1.0 for value in first.values()), first
    assert second == CALLERS


def test_a_retrysafe_layer_inside_another_keeps_the_outer_attempts_bounds() -> None:
    # Not a request sent again: the inner layer sends the outer attempt's request while
    # that attempt runs, and the outer attempt's time is all it has.
    server = TimeoutRecorder()
    inner = retrysafe.RetryTransport(httpx.MockTransport(server))
    outer = retrysafe.RetryTransport(inner, policy=retrysafe.RetryPolicy(deadline=1))
    with httpx.Client(transport=outer, timeout=5.0) as client:
        request = client.build_request("GET", URL)
        client.send(request)
        client.send(request)  # and again: each time within the outer's 1 s

    assert len(server.sent) == 2
    for sent in server.sent:
        assert all(0 < value <= 1.0 for value in sent.values()), sent


def test_timeouts_the_caller_changed_before_sending_again_are_used() -> None:
    server = TimeoutRecorder()
    with retrysafe.Client(transport=httpx.MockTransport(server), timeout=5.0) as client:
        request = client.build_request("GET", URL)
        with retrysafe.deadline(1):
            client.send(request)
        left = request.extensions["timeout"]
        left["read"] = 8.0  # edited in place: the mapping as it now stands is the caller's
        client.send(request)
        request.extensions["timeout"] = {**CALLERS, "connect": 2.0}  # or replaced
        client.send(request)

    assert server.sent[1] == left
    assert server.sent[1]["read"] == 8.0
    assert server.sent[2] == {**CALLERS, "connect": 2.0}


def test_the_bounded_timeouts_stay_on_the_request_the_attempt_was_sent_with() -> None:
    # httpcore reads the request's timeouts while the body streams in, after the call
    # returns: they must stay bounded there, and read as the plain mapping httpx made.
    server = TimeoutRecorder()
    with (
        retrysafe.Client(transport=httpx.MockTransport(server), timeout=5.0) as client,
        retrysafe.deadline(1),
    ):
        response = client.get(URL)

    sent = response.request.extensions["timeout"]
    assert dict(sent) == server.sent[0]
    assert set(sent) == set(CALLERS)
    assert all(0 < value <= 1.0 for value in sent.values())


def test_a_deadline_too_short_for_any_attempt_says_which_setting_to_change() -> None:
    server = TimeoutRecorder()
    policy = retrysafe.RetryPolicy(min_attempt_time=0.5)
    with (
        retrysafe.Client(transport=httpx.MockTransport(server), policy=policy) as client,
        retrysafe.deadline(0.2),
        pytest.raises(retrysafe.DeadlineExceeded) as caught,
    ):
        client.get(URL)

    assert server.sent == []
    assert caught.value.attempts == 0
    assert "no attempt started" in str(caught.value)
    assert "min_attempt_time" in str(caught.value)


# -- the deadline header ------------------------------------------------------------------


class HeaderRecorder:
    """A mock server that notes the ``Request-Timeout`` header each attempt carried."""

    def __init__(self) -> None:
        self.sent: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.headers.get("Request-Timeout"))
        return httpx.Response(200)


def test_an_attempt_with_no_time_limit_sends_no_deadline_header() -> None:
    """With neither an attempt timeout nor a deadline there is no time to tell the server:
    the header is left off rather than sent as ``inf``."""
    server = HeaderRecorder()
    unbounded = retrysafe.RetryPolicy(attempt_timeout=float("inf"), deadline=float("inf"))
    with retrysafe.Client(
        transport=httpx.MockTransport(server), policy=unbounded, deadline_header="Request-Timeout"
    ) as client:
        assert client.get("https://api.test/items").status_code == 200
    assert server.sent == [None]


def test_a_request_sent_again_without_a_deadline_header_carries_no_stale_one() -> None:
    # The header said how long the first call's attempt had; sent again by a client that
    # does not send the header, it would tell the server a time nobody gave it.
    server = HeaderRecorder()
    with (
        retrysafe.Client(
            transport=httpx.MockTransport(server),
            policy=retrysafe.RetryPolicy(deadline=1),
            deadline_header="Request-Timeout",
        ) as sharing,
        retrysafe.Client(transport=httpx.MockTransport(server)) as silent,
    ):
        request = sharing.build_request("GET", URL)
        sharing.send(request)
        silent.send(request)

    first, second = server.sent
    assert first is not None
    assert 0 < float(first) <= 1.0
    assert second is None
    assert "Request-Timeout" not in request.headers


async def test_an_async_request_sent_again_without_a_deadline_header_carries_no_stale_one() -> None:
    server = HeaderRecorder()
    async with (
        retrysafe.AsyncClient(
            transport=httpx.MockTransport(server),
            policy=retrysafe.RetryPolicy(deadline=1),
            deadline_header="Request-Timeout",
        ) as sharing,
        retrysafe.AsyncClient(transport=httpx.MockTransport(server)) as silent,
    ):
        request = sharing.build_request("GET", URL)
        await sharing.send(request)
        await silent.send(request)

    assert server.sent[0] is not None
    assert server.sent[1] is None


def test_a_request_sent_again_by_a_client_that_shares_its_deadline_gets_a_fresh_value() -> None:
    server = HeaderRecorder()
    with retrysafe.Client(
        transport=httpx.MockTransport(server), deadline_header="Request-Timeout"
    ) as client:
        request = client.build_request("GET", URL)
        with retrysafe.deadline(1):
            client.send(request)
        client.send(request)

    first, second = server.sent
    assert first is not None
    assert second is not None
    assert 0 < float(first) <= 1.0
    assert float(second) == 10.0  # the attempt's own time, no longer the scope's second


def test_a_deadline_header_the_caller_set_before_sending_again_is_kept() -> None:
    server = HeaderRecorder()
    with (
        retrysafe.Client(
            transport=httpx.MockTransport(server), deadline_header="Request-Timeout"
        ) as sharing,
        retrysafe.Client(transport=httpx.MockTransport(server)) as silent,
    ):
        request = sharing.build_request("GET", URL)
        sharing.send(request)
        request.headers["Request-Timeout"] = "3"  # the caller's own, after the first call
        silent.send(request)

    assert server.sent[1] == "3"


def test_a_layer_without_the_header_inside_one_with_it_keeps_the_outer_value() -> None:
    # Not a request sent again: the inner layer sends the outer attempt's request, whose
    # header the outer attempt has just set.
    server = HeaderRecorder()
    inner = retrysafe.RetryTransport(httpx.MockTransport(server))
    outer = retrysafe.RetryTransport(inner, deadline_header="Request-Timeout")
    with httpx.Client(transport=outer) as client:
        request = client.build_request("GET", URL)
        client.send(request)
        client.send(request)

    assert server.sent == ["10.000", "10.000"]


# -- the header on each attempt of one call -------------------------------------------------


class SlowFirstRefusal:
    """A mock server whose first answer is a 503 after 0.5 s (on the fake clock), and
    which notes the ``Request-Timeout`` header each attempt carried."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.sent: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(float(request.headers["Request-Timeout"]))
        if len(self.sent) == 1:
            self.clock.advance(0.5)
            return httpx.Response(503)
        return httpx.Response(200)


HEADER_POLICY = retrysafe.RetryPolicy(deadline=2.0, attempt_timeout=10.0, retry_after_jitter=0.0)


def test_each_attempt_tells_the_server_the_time_it_has_left() -> None:
    clock = FakeClock(randoms=[0.0])  # (no backoff wait)
    server = SlowFirstRefusal(clock)
    with retrysafe.Client(
        transport=httpx.MockTransport(server),
        policy=HEADER_POLICY,
        clock=clock,
        deadline_header="Request-Timeout",
    ) as client:
        assert client.get(URL).status_code == 200
    assert server.sent == [2.0, 1.5]


async def test_each_async_attempt_tells_the_server_the_time_it_has_left() -> None:
    clock = FakeClock(randoms=[0.0])
    server = SlowFirstRefusal(clock)
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(server),
        policy=HEADER_POLICY,
        clock=clock,
        deadline_header="Request-Timeout",
    ) as client:
        assert (await client.get(URL)).status_code == 200
    assert server.sent == [2.0, 1.5]
