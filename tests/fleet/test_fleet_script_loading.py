"""The scripts go to Redis from the background: when a fleet starts, and each time Redis
loses them (SCRIPT FLUSH, a restart), however often that happens."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis
from fleet_servers import FleetMaker


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_a_fleet_that_starts_on_a_redis_without_its_scripts_loads_them_before_calls_need_them(
    make_fleet: FleetMaker, admin: redis.Redis
) -> None:
    """A new member's first paced call is answered by the fleet, not sent local."""
    admin.script_flush()  # a Redis that never ran the fleet's scripts
    fleet = make_fleet()
    assert fleet.process  # started (as by its first call): its background is at work
    assert fleet.flush()
    assert fleet.reserve("first", 10.0, 1, 60.0) == 0.0


def test_the_scripts_come_back_after_every_flush_not_only_the_first(
    make_fleet: FleetMaker, admin: redis.Redis
) -> None:
    fleet = make_fleet()
    assert fleet.process
    assert fleet.flush()
    for flush in range(3):
        admin.script_flush()
        # The call that finds them gone goes local; the background loads them again.
        assert fleet.reserve(f"after-{flush}", 10.0, 1, 60.0) is None
        assert fleet.flush()
        assert fleet.reserve(f"after-{flush}", 10.0, 1, 60.0) == 0.0, flush
    assert fleet.up


def test_calls_made_before_the_first_load_finishes_are_answered_by_the_fleet(
    make_fleet: FleetMaker, admin: redis.Redis
) -> None:
    """A process's first calls come at once, before its writer has loaded the scripts: they
    run them by their text (one round trip) rather than fall back to the process's share
    of the pace, which would let every new process send its first calls unpaced."""
    admin.script_flush()  # a Redis that never ran the fleet's scripts
    fleet = make_fleet(timeout=0.5)
    loaded = threading.Event()
    load_scripts = fleet._load_scripts

    def load_late() -> None:  # (the writer, held up: the calls below come first)
        loaded.wait(5)
        load_scripts()

    fleet._load_scripts = load_late  # type: ignore[method-assign]
    try:
        # Three calls at once for a pace of 10/s, burst 1: the fleet spaces them.
        waits = [fleet.reserve("first", 10.0, 1, 60.0) for _ in range(3)]
    finally:
        loaded.set()
    assert waits == [0.0, pytest.approx(0.1, abs=0.05), pytest.approx(0.2, abs=0.05)]
    assert fleet.flush()
    assert fleet.up
