"""Two ways a process used to stay out of the fleet's news (trial94), over a real Redis
and real sockets to the chaos server:

- the half-open probe's outcome, which Redis failed to take: dropped, its lease held
  every process off the recovered dependency until it ran out (about 11 s);
- a child forked after its parent's first call: its calls all took the healthy path,
  which never asks the fleet, so it never joined (no heartbeat, no cooldown heard).
"""

from __future__ import annotations

import os
import pickle
import time
from typing import Any

import pytest
import redis
from fleet_servers import FleetMaker, wait_for

import retrysafe
from retrysafe.chaos import KeyedChaos
from retrysafe.governor import Governor

pytestmark = pytest.mark.timeout(30)

ONCE = retrysafe.RetryPolicy(attempts=1, deadline=5.0)


def test_a_probe_outcome_redis_failed_to_take_is_sent_again_once_it_answers(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    prober_fleet = make_fleet(quorum=2, vote_after=1)
    other_fleet = make_fleet(quorum=2, vote_after=1)
    prober = retrysafe.Client(governor=Governor(fleet=prober_fleet), dependency="api", policy=ONCE)
    other = retrysafe.Client(governor=Governor(fleet=other_fleet), dependency="api", policy=ONCE)
    with prober, other:
        for member in (prober, other):  # (both vote: the fleet breaker opens, for 0.5 s)
            with pytest.raises(retrysafe.ServerError):
                member.get(chaos.url("/status/503"))
        wait_for(lambda: other_fleet.view("api").open_until is not None)
        time.sleep(0.6)  # (half-open now: the next call is the fleet's one probe)
        run_script = prober_fleet._script
        failed: list[str] = []

        def redis_fails_the_report(name: str, keys: Any, args: Any) -> Any:
            if name == "REPORT_PROBE" and not failed:
                failed.append(name)
                raise redis.exceptions.TimeoutError("Redis did not answer in time")
            return run_script(name, keys, args)

        prober_fleet._script = redis_fails_the_report  # type: ignore[method-assign]
        assert prober.get(chaos.url("/status/200")).status_code == 200  # (the probe)
        wait_for(lambda: failed)
        started = time.monotonic()
        while True:  # (the other member's calls go again once the fleet hears of it)
            try:
                assert other.get(chaos.url("/status/200")).status_code == 200
                break
            except retrysafe.CircuitOpen:
                assert time.monotonic() - started < 3.0, "the probe's lease held the fleet"
                time.sleep(0.05)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (3.12+: forking with threads)
def test_a_child_forked_after_a_call_joins_the_fleet_and_hears_its_cooldowns(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    """As under gunicorn ``--preload`` after a warm-up call, or Celery's prefork pool: the
    child is a member of its own, and a cooldown another member shares holds its calls."""
    fleet, other = make_fleet(), make_fleet()
    member = retrysafe.Client(governor=Governor(fleet=fleet), dependency="api", policy=ONCE)
    with member:
        assert member.get(chaos.url("/status/200")).status_code == 200  # (the warm-up)
        parents_identity = fleet.process
        reading, writing = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            try:
                heard = "no cooldown heard"
                deadline = time.monotonic() + 5.0
                while time.monotonic() < deadline:  # (its calls only: nothing else asks)
                    try:
                        member.get(chaos.url("/status/200"))
                    except retrysafe.CooldownActive:
                        heard = "cooldown heard"
                        break
                    time.sleep(0.05)
                os.write(writing, pickle.dumps((heard, fleet.process)))
            finally:
                os._exit(0)
        os.close(writing)
        time.sleep(0.3)  # (the child's calls go, calm)
        other.share_cooldown("api", 20.0)  # (longer than the deadline: refused at once)
        with os.fdopen(reading, "rb") as from_child:
            heard, childs_identity = pickle.loads(from_child.read())
        os.waitpid(child, 0)
    assert heard == "cooldown heard"
    assert childs_identity != parents_identity


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (3.12+: forking with threads)
def test_a_child_that_never_calls_is_no_member(make_fleet: FleetMaker, chaos: KeyedChaos) -> None:
    """A CPU-bound pool worker, or a ``preexec_fn`` before an exec: joined at the fork,
    each such child counted as a member, raising the quorum two real processes needed
    to open the fleet breaker (review88)."""
    fleet, other = make_fleet(), make_fleet()
    member = retrysafe.Client(governor=Governor(fleet=fleet), dependency="api", policy=ONCE)
    with member:
        assert member.get(chaos.url("/status/200")).status_code == 200
        child = os.fork()
        if child == 0:  # pragma: no cover - the child only waits
            time.sleep(1.0)
            os._exit(0)
        time.sleep(0.6)  # (many heartbeats: a child that had joined would be heard)
        other.view("api")  # (a member reading the dependency: it counts the living)
        wait_for(lambda: other.live_processes() == 2)  # (this process's two members)
        time.sleep(0.2)
        assert other.live_processes() == 2
        os.waitpid(child, 0)
