"""A sync attempt ends at its time even while it waits in httpcore's pool, and a wait
that runs out leaves no connection slot behind.

httpcore's sync pool waits for a connection with the pool timeout httpx gave the request,
and when the connection it is then given turns out taken by another request first, it
waits again, with the whole pool timeout again. A load trial (200 threads on 100
keep-alive connections to a healthy server) saw attempts of 0.5 s wait there for up to
2 s. Here one connection is handed to the waiting request every 0.1 s and taken by
another each time, so no single wait reaches the pool timeout: only a bound on the
attempt ends it. Wall-clock tests, short, asserting bounds.

A wait that runs out just as another request ends, and so is handed a connection made
for it, used to leave that connection in the pool for ever, never opened (as in
encode/httpcore#1093): each such slot lost, until every request failed unsent. Here that
moment is made to happen every time.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpcore
import httpx
import pytest
from httpcore._sync import connection_pool
from tests.local_http import QuietHandler, serving

import retrysafe
from retrysafe import RetryPolicy

pytestmark = pytest.mark.timeout(20)


class _AlwaysTaken(httpcore.ConnectionInterface):
    """A connection that looks free to the pool, and is taken by someone else each time
    a request is given it (httpcore's ConnectionNotAvailable)."""

    def __init__(self) -> None:
        self.free = False

    def handle_request(self, request: httpcore.Request) -> httpcore.Response:
        self.free = False
        raise httpcore.ConnectionNotAvailable()

    def can_handle_request(self, origin: httpcore.Origin) -> bool:
        return True

    def is_available(self) -> bool:
        return self.free

    def has_expired(self) -> bool:
        return False

    def is_idle(self) -> bool:
        return False

    def is_closed(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def info(self) -> str:
        return "always taken"


def _pool_that_keeps_handing_out_a_taken_connection() -> tuple[httpx.HTTPTransport, Any]:
    """httpx's own transport with one connection, freed and handed to the waiting request
    every 0.1 s (as a request ending elsewhere would), and taken again each time; and
    the event that stops the thread doing it."""
    transport = httpx.HTTPTransport(limits=httpx.Limits(max_connections=1))
    pool: Any = transport._pool
    connection = _AlwaysTaken()
    pool._connections = [connection]
    stop = threading.Event()

    def hand_out() -> None:
        while not stop.wait(0.1):
            with pool._optional_thread_lock:
                connection.free = True
                pool._assign_requests_to_connections()

    threading.Thread(target=hand_out, daemon=True).start()
    return transport, stop


def test_an_attempt_waiting_again_and_again_in_the_pool_ends_at_its_time() -> None:
    transport, stop = _pool_that_keeps_handing_out_a_taken_connection()
    try:
        with retrysafe.Client(
            transport=transport,
            policy=RetryPolicy(attempts=1, attempt_timeout=0.3, deadline=5.0),
            governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
        ) as client:
            started = time.monotonic()
            with pytest.raises(retrysafe.ApiError) as caught:
                client.get("http://127.0.0.1:9/")
            elapsed = time.monotonic() - started
    finally:
        stop.set()
    assert caught.value.history[0].outcome == "pool_timeout"  # never sent
    assert caught.value.processed == "no"
    assert elapsed < 0.3 + 0.3  # its time, some slack (it waited for ever before)


def test_a_request_outside_any_attempt_keeps_its_own_pool_timeout() -> None:
    """Plain httpx beside retrysafe in one process: a wait of its own ends at its own pool
    timeout, as before (0.05 s, shorter than the 0.1 s between hand-outs)."""
    retrysafe.RetryTransport()  # (wraps a pool: the bound is in place from now on)
    transport, stop = _pool_that_keeps_handing_out_a_taken_connection()
    try:
        with httpx.Client(transport=transport, timeout=httpx.Timeout(5.0, pool=0.05)) as client:
            started = time.monotonic()
            with pytest.raises(httpx.PoolTimeout):
                client.get("http://127.0.0.1:9/")
            assert time.monotonic() - started < 1.0
    finally:
        stop.set()


class _Answers(QuietHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def _pool_whose_only_connection_ends_as_the_wait_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[httpx.HTTPTransport, Any]:
    """httpx's own transport with room for one connection, held by another request
    (never free), which ends at the very moment a waiting request's wait runs out: its
    slot is given to the waiting request, which is handed a new connection made for it,
    and then times out all the same."""
    transport = httpx.HTTPTransport(limits=httpx.Limits(max_connections=1))
    pool: Any = transport._pool
    busy = _AlwaysTaken()
    pool._connections = [busy]

    class EndsAsTheWaitRunsOut(connection_pool.Event):  # type: ignore[name-defined,misc]
        def wait(self, timeout: float | None = None) -> None:
            if not self._event.wait(timeout):
                with pool._optional_thread_lock:  # (as the ending request's thread would)
                    if busy in pool._connections:
                        pool._connections.remove(busy)
                    pool._assign_requests_to_connections()
                raise httpcore.PoolTimeout()

    monkeypatch.setattr(connection_pool, "Event", EndsAsTheWaitRunsOut)
    return transport, pool


def _never_opened(pool: Any) -> list[Any]:
    return [c for c in pool._connections if c._connection is None and not c._connect_failed]


def test_a_wait_that_runs_out_as_it_is_handed_a_new_connection_leaves_no_slot_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport, pool = _pool_whose_only_connection_ends_as_the_wait_runs_out(monkeypatch)
    with (
        serving(_Answers) as url,
        retrysafe.Client(
            transport=transport,
            policy=RetryPolicy(attempts=1, attempt_timeout=0.2, deadline=5.0),
            governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
        ) as client,
    ):
        with pytest.raises(retrysafe.ApiError) as caught:
            client.get(url)
        assert caught.value.history[0].outcome == "pool_timeout"
        assert _never_opened(pool) == []  # (before: the new connection, for ever)
        assert pool._requests == []
        monkeypatch.undo()
        started = time.monotonic()
        assert client.get(url).status_code == 200  # the slot is there to use
        assert time.monotonic() - started < 0.2 + 0.3


def test_a_connection_in_use_elsewhere_is_not_dropped_when_a_wait_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The waiting request is handed an existing connection as its wait runs out (one
    that an HTTP/2 pool may share): it stays in the pool for the requests using it."""
    transport, pool = _pool_whose_only_connection_ends_as_the_wait_runs_out(monkeypatch)
    shared = _AlwaysTaken()
    shared.free = True  # (available: handed out as it is, no new one made)

    class Handing(connection_pool.Event):  # type: ignore[name-defined,misc]
        def wait(self, timeout: float | None = None) -> None:
            if not self._event.wait(timeout):
                with pool._optional_thread_lock:
                    pool._connections[:] = [shared]
                    pool._assign_requests_to_connections()
                raise httpcore.PoolTimeout()

    monkeypatch.setattr(connection_pool, "Event", Handing)
    with retrysafe.Client(
        transport=transport,
        policy=RetryPolicy(attempts=1, attempt_timeout=0.2, deadline=5.0),
        governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
    ) as client:
        with pytest.raises(retrysafe.ApiError):
            client.get("http://127.0.0.1:9/")
        assert pool._connections == [shared]
        assert pool._requests == []
