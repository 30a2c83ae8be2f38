"""Fleets with different namespaces on one Redis are separate: neither hears the other's
announcements, follows its breaker or counts its processes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from fleet_servers import wait_for

from retrysafe.fleet import FleetSettings, RedisFleet

Maker = Callable[..., RedisFleet]


@pytest.fixture
def fleet_in(redis_url: str) -> Iterator[Maker]:
    """Makes a member of the fleet named by its namespace (made unique to the test)."""
    suffix = uuid.uuid4().hex[:8]
    made: list[RedisFleet] = []

    def make(namespace: str, refresh_every: float = 0.1) -> RedisFleet:
        settings = FleetSettings(
            timeout=0.1, quorum=2, refresh_every=refresh_every, alive_for=2 * refresh_every + 3
        )
        fleet = RedisFleet(redis_url, namespace=f"{namespace}-{suffix}", settings=settings)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.close()


def test_live_processes_counts_only_the_members_of_its_own_namespace(fleet_in: Maker) -> None:
    alone = fleet_in("blue")
    crowd = [fleet_in("green") for _ in range(3)]
    for member in [alone, *crowd]:
        assert member.process  # started: heartbeating
    wait_for(lambda: all(member.live_processes() == 3 for member in crowd))
    time.sleep(0.25)  # more refreshes of the lone member
    assert alone.live_processes() == 1


def test_another_namespaces_cooldown_and_breaker_do_not_hold_calls_back(
    fleet_in: Maker, redis_url: str
) -> None:
    """The bystander reads its state only every 5 s: what it hears on pub/sub would stick."""
    admin = redis.Redis.from_url(redis_url)

    def listeners() -> int:
        return sum(count for _, count in admin.pubsub_numsub(*admin.pubsub_channels()))

    before = listeners()
    bystander = fleet_in("blue", refresh_every=5.0)
    assert bystander.view("api").calm
    wait_for(lambda: listeners() == before + 1)  # it listens
    admin.close()
    members = [fleet_in("green") for _ in range(3)]
    watcher = members[2]
    assert watcher.view("api").calm
    members[0].share_cooldown("api", 5.0)
    assert members[0].flush()
    wait_for(lambda: watcher.view("api").cooldown_until > 0)
    time.sleep(0.2)  # more than the lag it took the other namespace's member
    assert bystander.view("api").calm
    for member in members[:2]:
        assert member.vote("api", 30.0, 60.0)
    for member in members[:2]:
        assert member.flush()
    wait_for(lambda: watcher.view("api").open_until is not None)
    time.sleep(0.2)
    assert bystander.view("api").calm
    probe = bystander.acquire_probe("api", lease=1.0)
    assert probe is not None
    assert probe.kind == "closed"
