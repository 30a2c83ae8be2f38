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

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpcore
import httpx
import pytest
from httpcore._sync import connection_pool
from tests.local_http import AnswersOk, serving

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


class _Handover:
    """What another request does as it ends, freeing the one connection slot of ``pool``
    (held by ``busy``): httpcore hands the slot to the requests still queued."""

    def __init__(self, pool: Any, busy: _AlwaysTaken) -> None:
        self.pool = pool
        self.busy = busy

    def __call__(self) -> None:
        with self.pool._optional_thread_lock:  # (as the ending request's thread would)
            if self.busy in self.pool._connections:
                self.pool._connections.remove(self.busy)
            self.pool._assign_requests_to_connections()


def _pool_of_one_held_by_another_request(
    proxy: str | None = None,
) -> tuple[httpx.HTTPTransport, Any, _Handover]:
    """httpx's own transport with room for one connection, held by another request (never
    free); and that request's end, which hands the slot on."""
    transport = httpx.HTTPTransport(limits=httpx.Limits(max_connections=1), proxy=proxy)
    pool: Any = transport._pool
    busy = _AlwaysTaken()
    pool._connections = [busy]
    return transport, pool, _Handover(pool, busy)


def _as_each_wait_runs_out(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]) -> None:
    """From now on, ``then()`` runs at the very moment a pool wait runs out, before the
    wait raises its pool timeout (as another thread may run it there)."""

    class RunsOut(connection_pool.Event):  # type: ignore[name-defined,misc]
        def wait(self, timeout: float | None = None) -> None:
            if not self._event.wait(timeout):
                then()
                raise httpcore.PoolTimeout()

    monkeypatch.setattr(connection_pool, "Event", RunsOut)


def _stranded(pool: Any) -> list[Any]:
    """The pool's connections that no request uses and httpcore will never reclaim nor
    hand out: neither idle, closed nor available (made for a request, never opened)."""
    return [c for c in pool._connections if not (c.is_idle() or c.is_closed() or c.is_available())]


def _one_attempt_client(transport: httpx.BaseTransport) -> retrysafe.Client:
    return retrysafe.Client(
        transport=transport,
        policy=RetryPolicy(attempts=1, attempt_timeout=0.2, deadline=5.0),
        governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
    )


def _fails_unsent(client: retrysafe.Client, url: str) -> None:
    with pytest.raises(retrysafe.ApiError) as caught:
        client.get(url)
    assert caught.value.history[0].outcome == "pool_timeout"


@pytest.mark.parametrize("through", ["direct", "proxy"])
def test_a_wait_that_runs_out_as_it_is_handed_a_new_connection_leaves_no_slot_behind(
    monkeypatch: pytest.MonkeyPatch, through: str
) -> None:
    """The slot is handed to the waiting request, as a new connection made for it, just
    as its wait runs out. (Through a proxy, the connection wraps one to the proxy.)"""
    with serving(AnswersOk) as url:
        transport, pool, handover = _pool_of_one_held_by_another_request(
            proxy=url if through == "proxy" else None
        )
        target = url if through == "direct" else "http://target.test/"
        _as_each_wait_runs_out(monkeypatch, handover)
        with _one_attempt_client(transport) as client:
            _fails_unsent(client, target)
            assert _stranded(pool) == []  # (before: the new connection, for ever)
            assert pool._requests == []
            monkeypatch.undo()
            started = time.monotonic()
            assert client.get(target).status_code == 200  # the slot is there to use
            assert time.monotonic() - started < 0.2 + 0.3


def test_nothing_is_handed_to_a_request_that_gave_up_before_it_leaves_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other request ends after the waiting one gave up, but before httpcore took it
    out of its queue: the slot must not go to it (it would never open it)."""
    transport, pool, handover = _pool_of_one_held_by_another_request()
    real_lock = pool._optional_thread_lock
    entries_to_skip: list[int] = []

    class HandsOverBeforeTheQueueIsLeft:
        """The pool's lock; when armed, the second time it is taken (httpcore taking the
        request out of its queue, after the give-up), the slot is handed on first."""

        def __enter__(self) -> None:
            if entries_to_skip:
                entries_to_skip[0] -= 1
                if entries_to_skip[0] < 0:
                    entries_to_skip.clear()
                    pool._optional_thread_lock = real_lock
                    handover()
            real_lock.__enter__()

        def __exit__(self, *exc_info: object) -> None:
            real_lock.__exit__(*exc_info)

    pool._optional_thread_lock = HandsOverBeforeTheQueueIsLeft()
    _as_each_wait_runs_out(monkeypatch, lambda: entries_to_skip.append(1))
    with serving(AnswersOk) as url, _one_attempt_client(transport) as client:
        _fails_unsent(client, url)
        assert not entries_to_skip  # (the slot was handed on, as arranged)
        assert _stranded(pool) == []
        monkeypatch.undo()
        assert client.get(url).status_code == 200


def test_a_connection_another_request_holds_is_not_dropped_when_a_wait_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The new connection handed to the waiting request is also held by another queued
    request (as one HTTP/2 connection being opened is, for several): it stays, for that
    request to open."""
    transport, pool, handover = _pool_of_one_held_by_another_request()
    other = connection_pool.PoolRequest(httpcore.Request("GET", "http://127.0.0.1:9/"))

    def handed_to_both() -> None:
        handover()
        with pool._optional_thread_lock:
            other.assign_to_connection(pool._connections[0])
            pool._requests.append(other)

    _as_each_wait_runs_out(monkeypatch, handed_to_both)
    with _one_attempt_client(transport) as client:
        _fails_unsent(client, "http://127.0.0.1:9/")
        assert pool._connections == [other.connection]
        pool._requests.remove(other)


def test_a_connection_others_can_use_is_left_in_the_pool_when_a_wait_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The waiting request is handed an existing, available connection as its wait runs
    out: it stays in the pool for the next request."""
    transport, pool, _ = _pool_of_one_held_by_another_request()
    shared = _AlwaysTaken()
    shared.free = True  # (available: handed out as it is, no new one made)

    def hand_over_the_free_one() -> None:
        with pool._optional_thread_lock:
            pool._connections[:] = [shared]
            pool._assign_requests_to_connections()

    _as_each_wait_runs_out(monkeypatch, hand_over_the_free_one)
    with _one_attempt_client(transport) as client:
        _fails_unsent(client, "http://127.0.0.1:9/")
        assert pool._connections == [shared]
        assert pool._requests == []


def test_a_plain_pool_used_inside_an_attempt_keeps_httpcores_own_wait() -> None:
    """A transport of the caller's own, which sends through a plain httpx transport of its
    own: retrysafe does not wrap that pool, so its wait keeps its own pool timeout."""
    plain, _, _ = _pool_of_one_held_by_another_request()

    class OwnTransport(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            request.extensions["timeout"] = {**request.extensions["timeout"], "pool": 0.6}
            return plain.handle_request(request)

    with _one_attempt_client(OwnTransport()) as client:
        started = time.monotonic()
        with pytest.raises(retrysafe.ApiError):
            client.get("http://127.0.0.1:9/")
        assert time.monotonic() - started >= 0.55  # its own 0.6 s, not the attempt's 0.2 s


def test_finding_a_waits_pool_while_other_threads_add_pools_never_fails() -> None:
    """Clients made in other threads add their pools while a wait looks for its own: the
    look must not fail (a set changing size while read), which would replace the pool
    timeout with a RuntimeError and skip the give-up."""
    from retrysafe import pool_wait

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    stop = threading.Event()
    kept: list[httpx.HTTPTransport] = []

    def make_clients() -> None:
        while not stop.is_set():
            kept.append(httpx.HTTPTransport())
            pool_wait.bound_pool_waits(kept[-1]._pool)
            if len(kept) > 300:
                del kept[:150]

    maker = threading.Thread(target=make_clients, daemon=True)
    maker.start()
    not_queued = connection_pool.PoolRequest(httpcore.Request("GET", "http://127.0.0.1:9/"))
    try:
        ends = time.monotonic() + 0.5
        while time.monotonic() < ends:
            assert pool_wait._pool_queueing(not_queued) is None
    finally:
        stop.set()
        maker.join()
        sys.setswitchinterval(switch)
