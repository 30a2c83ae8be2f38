"""Changes reach the other processes on pub/sub, long before their next full read."""

from __future__ import annotations

import time

import redis
from fleet_servers import FleetMaker, wait_for

#: Far longer than the test: whatever the observer learns, it learns from announcements.
SLOW_REFRESH = {"refresh_every": 10.0, "alive_for": 20.0}


def test_a_cooldown_an_opened_breaker_and_a_probes_outcome_are_announced_at_once(
    make_fleet: FleetMaker, redis_url: str
) -> None:
    admin = redis.Redis.from_url(redis_url)

    def listeners() -> int:
        return sum(count for _, count in admin.pubsub_numsub(*admin.pubsub_channels()))

    before = listeners()
    observer = make_fleet(quorum=2, **SLOW_REFRESH)
    view = observer.view("api")  # read once now; next read in 10 s
    assert view.calm
    wait_for(lambda: listeners() == before + 1, 3.0)  # it listens
    admin.close()
    one, two = make_fleet(quorum=2), make_fleet(quorum=2)

    one.share_cooldown("api", 5.0)
    wait_for(lambda: view.cooldown_until > 0, 1.5)

    for member in (one, two):
        assert member.vote("api", 0.3, 30.0)
    wait_for(lambda: view.open_until is not None, 1.5)

    time.sleep(0.35)  # half-open
    probe = one.acquire_probe("api", lease=5.0)
    assert probe is not None
    assert probe.kind == "granted"
    assert one.report_probe(
        "api", probe.token, healthy=True, open_for=None, up_to=0.3, max_open_for=30.0
    )
    wait_for(lambda: view.open_until is None, 1.5)
