"""What the fleet's Lua scripts decide, read straight from Redis: votes, probes, cooldowns,
who counts as alive. Each ``RedisFleet`` stands for one process of the fleet."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from fleet_servers import FleetMaker, wait_for

from retrysafe.fleet import RedisFleet


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def all_alive(members: list[RedisFleet]) -> None:
    """Start ``members`` and wait until each has heard every other's heartbeat."""
    for member in members:
        assert member.process
    wait_for(lambda: all(member.live_processes() == len(members) for member in members))


def vote(member: RedisFleet, open_for: float, max_open_for: float = 30.0) -> None:
    assert member.vote("dep", open_for, max_open_for)
    assert member.flush()


def test_votes_while_the_breaker_is_open_neither_count_nor_extend_it(
    make_fleet: FleetMaker, admin: redis.Redis, namespace: str
) -> None:
    members = [make_fleet(quorum=2) for _ in range(2)]
    for member in members:
        vote(member, open_for=30.0)
    until = admin.hget(f"{namespace}:open:dep", "until")
    assert until is not None
    for member in members:  # a quorum again, while it is open
        vote(member, open_for=30.0)
    assert admin.hget(f"{namespace}:open:dep", "until") == until
    assert admin.zcard(f"{namespace}:votes:dep") == 0


def test_votes_while_the_breaker_is_half_open_do_not_open_it_again(
    make_fleet: FleetMaker, admin: redis.Redis, namespace: str
) -> None:
    """Half-open is the probe's to end: failures of other calls meanwhile are no vote."""
    members = [make_fleet(quorum=2) for _ in range(2)]
    for member in members:
        vote(member, open_for=0.1)
    time.sleep(0.2)  # the open period is over: half-open
    until = admin.hget(f"{namespace}:open:dep", "until")
    for member in members:
        vote(member, open_for=30.0)
    assert admin.hget(f"{namespace}:open:dep", "until") == until
    answer = members[0].acquire_probe("dep", lease=1.0)
    assert answer is not None
    assert answer.kind == "granted"


def test_a_vote_older_than_the_vote_window_no_longer_counts(make_fleet: FleetMaker) -> None:
    # Three alive with quorum_share 1: three votes are needed, each within 0.5 s of the last.
    members = [make_fleet(quorum=3, quorum_share=1, vote_window=0.5) for _ in range(3)]
    all_alive(members)
    vote(members[0], open_for=30.0)
    time.sleep(0.3)
    vote(members[1], open_for=30.0)
    time.sleep(0.3)  # the first vote is 0.6 s old now
    vote(members[2], open_for=30.0)
    answer = members[0].acquire_probe("dep", lease=1.0)
    assert answer is not None
    assert answer.kind == "closed"


def test_the_votes_that_open_the_breaker_are_used_up(
    make_fleet: FleetMaker, admin: redis.Redis, namespace: str
) -> None:
    """Once the breaker it opened is gone, one new failure is one vote, not a quorum."""
    members = [make_fleet(quorum=2) for _ in range(2)]
    for member in members:
        vote(member, open_for=0.1, max_open_for=0.1)
    assert admin.exists(f"{namespace}:open:dep") == 1
    # Nobody probed: the half-open state is dropped after its keep time.
    wait_for(lambda: admin.exists(f"{namespace}:open:dep") == 0)
    vote(members[0], open_for=30.0)
    answer = members[1].acquire_probe("dep", lease=1.0)
    assert answer is not None
    assert answer.kind == "closed"


def test_a_lost_probe_giving_its_lease_back_late_does_not_free_the_live_probe(
    make_fleet: FleetMaker,
) -> None:
    one, two, three = make_fleet(quorum=2), make_fleet(quorum=2), make_fleet(quorum=2)
    vote(one, open_for=0.1)
    vote(two, open_for=0.1)
    time.sleep(0.15)  # half-open
    lost = one.acquire_probe("dep", lease=0.1)
    assert lost is not None
    assert lost.kind == "granted"
    time.sleep(0.15)  # its lease ran out: another member probes
    live = two.acquire_probe("dep", lease=5.0)
    assert live is not None
    assert live.kind == "granted"
    one.release_probe("dep", lost.token)  # the lost probe ends late, with no outcome
    assert one.flush()
    answer = three.acquire_probe("dep", lease=5.0)
    assert answer is not None
    assert answer.kind == "busy"


def test_a_member_not_heard_from_within_alive_for_is_not_counted_alive(
    make_fleet: FleetMaker, admin: redis.Redis, namespace: str
) -> None:
    seconds, micros = admin.time()
    last_heard = seconds * 1000 + micros / 1000 - 4000  # 4 s ago, alive_for is 1.5 s
    admin.zadd(f"{namespace}:alive", {"gone-host:1:dead": last_heard})
    members = [make_fleet(alive_for=1.5) for _ in range(2)]
    for member in members:
        assert member.process
    wait_for(lambda: all(member.live_processes() >= 2 for member in members))
    time.sleep(0.25)  # a few more refreshes
    assert [member.live_processes() for member in members] == [2, 2]


def test_a_shorter_cooldown_does_not_shorten_the_fleets_longer_one(
    make_fleet: FleetMaker,
) -> None:
    sharing, other = make_fleet(), make_fleet()
    assert other.view("api").calm
    sharing.share_cooldown("api", 5.0)
    assert sharing.flush()
    wait_for(lambda: not other.view("api").calm)
    sharing.share_cooldown("api", 0.1)
    assert sharing.flush()
    time.sleep(0.4)  # past the short one's end, and a few refreshes
    view = other.view("api")
    assert not view.calm
    assert view.cooldown_until - other.clock.monotonic() > 3.0
