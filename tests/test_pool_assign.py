"""How the pools retrysafe wraps match queued requests with connections (pool_assign).

httpcore's own matching stays for other pools; in retrysafe's it is cheap when the pool is
full and busy, counts only idle connections against the keep-alive limit, and never closes
a connection a request holds (encode/httpcore#1110). The matching is driven directly here,
on stand-in connections that count what they are asked, in httpcore's sync pool (its
async one runs the same matching); two tests run real sockets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpcore
import httpx
import pytest
from httpcore._async.connection_pool import AsyncPoolRequest
from httpcore._sync.connection_pool import PoolRequest

import retrysafe
from local_http import AnswersOk, serving
from retrysafe.pool_wait import bound_pool_waits


class StandIn:
    """A connection in one state, for one origin, counting the questions put to it."""

    def __init__(self, state: str, host: bytes = b"a.test") -> None:
        self.state = state  # "busy", "idle", "shared" (HTTP/2), "closed" or "expired"
        self.origin = httpcore.Origin(b"http", host, 80)
        self.questions = 0

    def is_closed(self) -> bool:
        return self.state == "closed"

    def has_expired(self) -> bool:
        return self.state == "expired"

    def is_idle(self) -> bool:
        self.questions += 1
        return self.state == "idle"

    def is_available(self) -> bool:
        self.questions += 1
        return self.state in ("idle", "shared")

    def can_handle_request(self, origin: httpcore.Origin) -> bool:
        self.questions += 1
        return origin == self.origin

    def __repr__(self) -> str:
        return f"StandIn({self.state!r})"


def _pool(max_connections: int, max_keepalive: int, *, wrapped: bool) -> httpcore.ConnectionPool:
    pool = httpcore.ConnectionPool(
        max_connections=max_connections, max_keepalive_connections=max_keepalive
    )
    if wrapped:
        assert bound_pool_waits(pool)
    made: list[StandIn] = []

    def create_connection(origin: httpcore.Origin) -> StandIn:
        connection = StandIn("new", origin.host)
        made.append(connection)
        return connection

    pool.create_connection = create_connection  # type: ignore[method-assign,assignment]
    pool.made = made  # type: ignore[attr-defined]
    return pool


def _queue(pool: httpcore.ConnectionPool, count: int, host: str = "a.test") -> list[PoolRequest]:
    queued = [PoolRequest(httpcore.Request("GET", f"http://{host}/")) for _ in range(count)]
    pool._requests.extend(queued)
    return queued


@pytest.fixture(params=[True, False], ids=["retrysafe", "httpcore"])
def wrapped(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_a_full_busy_pool_is_not_scanned_once_per_queued_request() -> None:
    pool = _pool(5, 5, wrapped=True)
    busy = [StandIn("busy") for _ in range(5)]
    pool._connections.extend(busy)
    queued = _queue(pool, 200)

    assert pool._assign_requests_to_connections() == []

    assert all(request.is_queued() for request in queued)
    # One pass over the connections for the first request, then each other one skipped:
    # httpcore's matching asks each connection about each request (here 200 x 5 x 3).
    assert sum(connection.questions for connection in busy) <= 5 * 4


def test_httpcore_own_matching_scans_every_pair() -> None:
    pool = _pool(5, 5, wrapped=False)
    busy = [StandIn("busy") for _ in range(5)]
    pool._connections.extend(busy)
    _queue(pool, 200)

    pool._assign_requests_to_connections()

    assert sum(connection.questions for connection in busy) >= 200 * 5


def test_an_origin_passed_over_leaves_the_others_matched(wrapped: bool) -> None:
    pool = _pool(3, 3, wrapped=wrapped)
    shared = StandIn("shared", b"b.test")  # (HTTP/2: available, not idle)
    pool._connections.extend([StandIn("busy"), StandIn("busy"), shared])
    waiting = _queue(pool, 3, "a.test")
    matched = _queue(pool, 2, "b.test")

    assert pool._assign_requests_to_connections() == []

    assert all(request.is_queued() for request in waiting)
    assert [request.connection for request in matched] == [shared, shared]


def test_a_free_connection_goes_to_each_request_of_its_origin_as_httpcore_does(
    wrapped: bool,
) -> None:
    pool = _pool(2, 2, wrapped=wrapped)
    free = StandIn("idle")
    pool._connections.extend([free, StandIn("busy")])
    queued = _queue(pool, 3)

    pool._assign_requests_to_connections()

    # (the first to start on it uses it; the others find it taken and queue again)
    assert [request.connection for request in queued] == [free, free, free]


def test_new_connections_are_made_while_the_pool_has_room(wrapped: bool) -> None:
    pool = _pool(4, 4, wrapped=wrapped)
    pool._connections.append(StandIn("busy"))
    queued = _queue(pool, 5)

    pool._assign_requests_to_connections()

    assert len(pool._connections) == 4
    assert [request.is_queued() for request in queued] == [False, False, False, True, True]


def test_only_idle_connections_count_against_the_keep_alive_limit() -> None:
    # httpx's default keeps 20 of 100: with more connections than that, httpcore closes
    # every connection that goes idle, and the next request opens a new one.
    pool = _pool(10, 3, wrapped=True)
    pool._connections.extend(
        [StandIn("idle") for _ in range(3)] + [StandIn("busy") for _ in range(5)]
    )

    assert pool._assign_requests_to_connections() == []
    assert len(pool._connections) == 8

    pool._connections.append(StandIn("idle"))
    assert [c.state for c in pool._assign_requests_to_connections()] == ["idle"]
    assert len(pool._connections) == 8


def test_httpcore_counts_every_connection_against_it() -> None:
    pool = _pool(10, 3, wrapped=False)
    pool._connections.extend(
        [StandIn("idle") for _ in range(3)] + [StandIn("busy") for _ in range(5)]
    )

    assert len(pool._assign_requests_to_connections()) == 3


def test_a_connection_handed_to_a_request_not_started_on_it_is_not_closed() -> None:
    # encode/httpcore#1110: it still looks idle; closed, its request finds it closed, or
    # (sync) waits on a closed socket until its read timeout.
    pool = _pool(2, 0, wrapped=True)
    handed = StandIn("idle")
    pool._connections.extend([handed, StandIn("busy")])
    waiting = _queue(pool, 1)[0]
    waiting.assign_to_connection(handed)
    other = _queue(pool, 1, "b.test")[0]

    closing = pool._assign_requests_to_connections()

    # Not closed as surplus keep-alive (the limit is 0), nor to make room for b.test.
    assert closing == []
    assert handed in pool._connections
    assert other.is_queued()


def test_closed_and_expired_connections_go_as_in_httpcore(wrapped: bool) -> None:
    pool = _pool(5, 5, wrapped=wrapped)
    closed, expired = StandIn("closed"), StandIn("expired")
    pool._connections.extend([closed, expired, StandIn("busy")])

    assert pool._assign_requests_to_connections() == [expired]
    assert closed not in pool._connections
    assert expired not in pool._connections


# -- over real sockets -------------------------------------------------------------


class CountsConnections(AnswersOk):
    """Answers ``/slow`` after 0.4 s and anything else at once; counts connections."""

    accepted = 0

    def setup(self) -> None:
        CountsConnections.accepted += 1
        super().setup()

    def do_GET(self) -> None:
        if self.path == "/slow":
            import time

            time.sleep(0.4)
        super().do_GET()


def test_an_async_client_keeps_a_connection_that_went_idle_beside_busy_ones() -> None:
    # 6 connections, 5 of them busy, keep-alive limit 5: the one that goes idle is kept
    # and the next request reuses it (httpcore closed it: 6 connections > 5).
    CountsConnections.accepted = 0
    limits = httpx.Limits(max_connections=10, max_keepalive_connections=5)

    async def run(url: str) -> None:
        async with retrysafe.AsyncClient(limits=limits) as client:
            slow = [asyncio.create_task(client.get(url + "/slow")) for _ in range(5)]
            await client.get(url + "/fast")
            await client.get(url + "/fast")
            await asyncio.gather(*slow)

    with serving(CountsConnections) as url:
        asyncio.run(run(url))

    assert CountsConnections.accepted == 6


def test_a_burst_on_a_small_pool_is_answered_whole() -> None:
    async def run(url: str) -> int:
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=2)
        async with retrysafe.AsyncClient(limits=limits) as client:
            answers = await asyncio.gather(*(client.get(url) for _ in range(120)))
            pool = client._transport.transport._pool  # type: ignore[attr-defined]
            assert pool._requests == []
            return sum(answer.status_code == 200 for answer in answers)

    with serving(AnswersOk) as url:
        assert asyncio.run(run(url)) == 120


# -- async pools: a free HTTP/1.1 connection goes to one waiting request -------------


class AsyncHTTP11Connection:
    """Stands for httpcore's HTTP/1.1 protocol object (matched by its class's name)."""


class AsyncHTTP2Connection:
    """Stands for httpcore's HTTP/2 protocol object."""


def _async_pool(max_connections: int, max_keepalive: int) -> httpcore.AsyncConnectionPool:
    pool = httpcore.AsyncConnectionPool(
        max_connections=max_connections, max_keepalive_connections=max_keepalive
    )
    assert bound_pool_waits(pool)
    pool.create_connection = lambda origin: StandIn("new", origin.host)  # type: ignore[method-assign,assignment,return-value]
    return pool


def _speaking(connection: StandIn, protocol: type) -> StandIn:
    connection._connection = protocol()  # type: ignore[attr-defined]
    return connection


def _match_async(pool: httpcore.AsyncConnectionPool, count: int) -> list[Any]:
    async def match() -> list[Any]:
        queued = [AsyncPoolRequest(httpcore.Request("GET", "http://a.test/")) for _ in range(count)]
        pool._requests.extend(queued)
        pool._assign_requests_to_connections()
        return [request.connection for request in queued]

    return asyncio.run(match())


def test_async_a_free_http11_connection_goes_to_one_waiting_request() -> None:
    # Each request handed it would run to it, all but one find it taken, and the
    # oldest waiting ones lose the race again and again (calls of 0.5 s took 6 s).
    pool = _async_pool(3, 3)
    free = _speaking(StandIn("idle"), AsyncHTTP11Connection)
    pool._connections.extend([free, StandIn("busy")])

    handed = _match_async(pool, 3)

    assert handed[0] is free
    assert handed[1].state == "new"  # (room for one more)
    assert handed[2] is None  # (waits for the next connection to come free)


def test_async_a_free_http2_connection_goes_to_every_waiting_request() -> None:
    pool = _async_pool(2, 2)
    shared = _speaking(StandIn("shared"), AsyncHTTP2Connection)
    pool._connections.extend([shared, StandIn("busy")])

    assert _match_async(pool, 3) == [shared, shared, shared]


def test_idle_connections_beyond_the_limit_go_after_the_queue_had_its_pick() -> None:
    pool = _pool(10, 1, wrapped=True)
    idle = [StandIn("idle") for _ in range(3)]
    pool._connections.extend(idle)
    queued = _queue(pool, 1)

    closing = pool._assign_requests_to_connections()

    assert queued[0].connection is idle[0]
    assert closing == [idle[2]]  # (idle[1] kept: the limit is 1)


class CountsRetakes:
    """Counts requests that found the connection they were handed taken already."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        clear = AsyncPoolRequest.clear_connection

        def counted(request: AsyncPoolRequest) -> None:
            self.count += 1
            clear(request)

        monkeypatch.setattr(AsyncPoolRequest, "clear_connection", counted)


def test_an_async_burst_hands_no_connection_to_two_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    retakes = CountsRetakes(monkeypatch)

    async def run(url: str) -> int:
        limits = httpx.Limits(max_connections=5, max_keepalive_connections=5)
        async with retrysafe.AsyncClient(limits=limits) as client:
            answers = await asyncio.gather(*(client.get(url) for _ in range(150)))
            return sum(answer.status_code == 200 for answer in answers)

    with serving(AnswersOk) as url:
        assert asyncio.run(run(url)) == 150
    assert retakes.count == 0
