"""close(): the member leaves the fleet at once, and a closed fleet stays closed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from fleet_servers import FleetMaker, wait_for


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def fleet_threads() -> int:
    return sum(thread.name.startswith("retrysafe-fleet") for thread in threading.enumerate())


def test_a_closed_member_is_no_longer_counted_alive_at_once(
    make_fleet: FleetMaker, admin: redis.Redis, namespace: str
) -> None:
    """Not alive_for (3 s) later: the quorum is of the members still there."""
    staying, leaving = make_fleet(), make_fleet()
    name = leaving.process
    assert staying.process
    wait_for(lambda: staying.live_processes() == 2)
    leaving.close()
    assert admin.zscore(f"{namespace}:alive", name) is None
    wait_for(lambda: staying.live_processes() == 1, seconds=2.0)


def test_a_fleet_closed_before_its_first_use_starts_nothing_and_tells_the_fleet_nothing(
    make_fleet: FleetMaker, admin: redis.Redis, namespace: str
) -> None:
    fleet = make_fleet()
    fleet.close()
    threads = fleet_threads()
    assert not fleet.vote("api", 1.0, 30.0)  # nothing handed over: there is no writer
    assert not fleet.release("api", 10.0)
    fleet.share_cooldown("api", 5.0)
    assert fleet.flush()
    time.sleep(0.2)  # a refresher, had one started, would have heartbeaten by now
    assert fleet_threads() <= threads
    assert admin.exists(f"{namespace}:alive", f"{namespace}:cool:api") == 0


def test_a_closed_fleet_asks_redis_nothing_more_on_a_calls_path(
    make_fleet: FleetMaker, admin: redis.Redis, namespace: str
) -> None:
    """A call still made through it (its governor outlived it) is protected locally, as
    when Redis is away: no heartbeat that counts it alive again, no paced slot reserved."""
    fleet = make_fleet()
    assert fleet.process
    fleet.view("api")
    fleet.close()
    assert fleet.view("search").open_until is None
    assert fleet.reserve("search", 10.0, 1, 60.0) is None
    assert admin.zrange(f"{namespace}:alive", 0, -1) == []
