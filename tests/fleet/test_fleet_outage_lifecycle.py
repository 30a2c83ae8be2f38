"""A Redis that goes away: what calls, the writer and the refresher do meanwhile.

The Redis servers here are loopback sockets: a port nobody listens on (connections
refused), one that listens and never reads (every operation times out), and one that
hangs up on every connection (counting them); and a real redis-server that is killed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from fleet_servers import FleetMaker, RestartableRedis, wait_for
from store_servers import free_port

import retrysafe
from retrysafe.governor import Governor


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A Redis that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"


class HangingUp:
    """Accepts every connection and closes it at once, counting them."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.05)
        self.url = f"redis://127.0.0.1:{self._listener.getsockname()[1]}/0"
        self.connections = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(2.0)
        self._listener.close()


@pytest.fixture
def hanging_up() -> Iterator[HangingUp]:
    server = HangingUp()
    yield server
    server.close()


def test_the_call_that_finds_redis_silent_waits_the_calls_timeout_not_the_background_one(
    make_fleet: FleetMaker, silent_url: str
) -> None:
    fleet = make_fleet(silent_url, timeout=0.05, background_timeout=2.0)
    started = time.monotonic()
    assert fleet.reserve("api", 10.0, 1, 60.0) is None
    assert time.monotonic() - started < 1.0
    assert not fleet.up


def test_what_was_handed_to_the_writer_before_an_outage_was_known_is_dropped_not_sent(
    make_fleet: FleetMaker, silent_url: str
) -> None:
    """Each write would wait out the background timeout: once Redis is known away, the
    queue is dropped at once."""
    fleet = make_fleet(silent_url, timeout=0.05, background_timeout=0.2)
    for _ in range(10):  # handed over while the fleet still looks up
        assert fleet.vote("api", 1.0, 30.0)
    started = time.monotonic()
    assert fleet.flush(timeout=3.0)
    assert time.monotonic() - started < 1.2  # not 10 x 0.2 s
    assert not fleet.up


def test_flush_and_close_return_at_once_while_redis_is_away(make_fleet: FleetMaker) -> None:
    fleet = make_fleet(f"redis://127.0.0.1:{free_port()}/0")
    assert fleet.process  # started
    wait_for(lambda: not fleet.up)
    started = time.monotonic()
    assert fleet.flush(timeout=1.0)
    fleet.close()
    assert time.monotonic() - started < 0.9


def test_a_background_write_that_fails_marks_redis_away(
    make_fleet: FleetMaker, redis_url: str, namespace: str
) -> None:
    """Here only the writer meets the trouble: the refresher is between its (slow) reads."""
    fleet = make_fleet(refresh_every=2.0, alive_for=4.0, background_timeout=0.1)
    admin = redis.Redis.from_url(redis_url)
    try:
        wait_for(lambda: admin.zscore(f"{namespace}:alive", fleet.process) is not None)
        assert fleet.flush()
        admin.client_pause(400)  # Redis stops answering for 0.4 s
        try:
            assert fleet.vote("api", 1.0, 30.0)
            assert fleet.flush(timeout=2.0)
        finally:
            admin.client_unpause()
        assert not fleet.up
    finally:
        admin.close()


def test_the_refresher_waits_a_period_between_attempts_on_a_failing_redis(
    make_fleet: FleetMaker, hanging_up: HangingUp
) -> None:
    fleet = make_fleet(hanging_up.url, refresh_every=0.1)
    assert fleet.process  # started
    time.sleep(0.5)
    # About two connections per attempt, one attempt per 0.1 s: not a busy loop.
    assert 1 <= hanging_up.connections <= 40
    assert not fleet.up


def test_while_redis_is_away_the_fleet_breaker_is_forgotten_and_nothing_is_handed_over(
    make_fleet: FleetMaker,
) -> None:
    with RestartableRedis() as server:
        watcher, other = make_fleet(server.url, quorum=2), make_fleet(server.url, quorum=2)
        view = watcher.view("api")
        for member in (watcher, other):
            assert member.vote("api", 30.0, 60.0)
            assert member.flush()
        wait_for(lambda: view.open_until is not None)
        server.kill()
        # (the fleet marks Redis away, then forgets its views' breakers, on its own thread)
        wait_for(lambda: not watcher.up and view.open_until is None)
        # Its open period would need Redis to end (the probe): the local breaker decides.
        assert view.open_until is None
        assert view.calm
        with retrysafe.Client(
            transport=httpx.MockTransport(lambda request: httpx.Response(200)),
            governor=Governor(fleet=watcher),
            dependency="api",
            policy=retrysafe.RetryPolicy(attempts=1, deadline=2.0),
        ) as client:
            assert client.get("http://api.test/").status_code == 200
        # What would tell the fleet something is not handed over: False, as documented.
        assert not watcher.vote("api", 30.0, 60.0)
        assert not watcher.release("api", 10.0)
        assert not watcher.report_probe(
            "api", "some-token", healthy=True, open_for=None, up_to=1.0, max_open_for=30.0
        )
