"""A probe lease Redis granted after its process stopped waiting for the answer is given
back once Redis answers again (trial94).

The process took no answer for a refusal and went on with its local breaker; the lease
it never knew it held kept every other process from probing the dependency until it ran
out (the attempt's time plus a second), long after the dependency recovered.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from fleet_servers import FleetMaker

from retrysafe.fleet import RedisFleet


def _half_open(members: list[RedisFleet]) -> None:
    """Open the fleet breaker for "dep" (a quorum of two) for 0.1 s, then wait it out."""
    for member in members:
        assert member.vote("dep", 0.1, 30.0)
        assert member.flush()
    time.sleep(0.2)


def _reply_lost_after_it_ran(member: RedisFleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next script call runs in Redis, but its reply does not come in time."""
    real = member._redis.evalsha

    def late(*args: Any) -> Any:
        real(*args)
        monkeypatch.setattr(member._redis, "evalsha", real)
        raise redis.TimeoutError("Timeout reading from socket")

    monkeypatch.setattr(member._redis, "evalsha", late)


def test_a_probe_granted_after_its_answer_timed_out_is_given_back(
    make_fleet: FleetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    late, other = make_fleet(quorum=2), make_fleet(quorum=2)
    _half_open([late, other])
    _reply_lost_after_it_ran(late, monkeypatch)

    assert late.acquire_probe("dep", lease=30.0) is None  # (no answer: Redis is away)
    held = other.acquire_probe("dep", lease=30.0)
    assert held is not None
    assert held.kind == "busy"  # the lease Redis granted, which no one knows it holds

    late._refresh()  # Redis answers the refresher again
    answer = other.acquire_probe("dep", lease=30.0)
    assert answer is not None
    assert answer.kind == "granted"
