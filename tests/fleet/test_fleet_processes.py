"""The fleet across real processes: sync and asyncio members, a real Redis, the chaos server.

Each member is ``fleet_worker.py`` in its own interpreter; they start together (a
ready/go handshake) and report what they got as JSON.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fleet_servers import FleetMaker, RestartableRedis

import retrysafe
from retrysafe.chaos import KeyedChaos
from retrysafe.governor import Governor

WORKER = str(Path(__file__).resolve().parent / "fleet_worker.py")


class Members:
    """Worker processes started together; :meth:`results` waits for their reports."""

    def __init__(self, configs: list[dict[str, Any]]) -> None:
        self.processes = [
            subprocess.Popen(
                [sys.executable, WORKER, json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for config in configs
        ]
        for process in self.processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.strip() == "ready", process.stderr.read() if process.stderr else line
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        self.started = time.monotonic()

    def results(self) -> list[dict[str, Any]]:
        reports = []
        for process in self.processes:
            out, err = process.communicate(timeout=30)
            assert process.returncode == 0, err
            report = json.loads(out.strip().splitlines()[-1])
            report["log"] = err
            reports.append(report)
        return reports

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def members() -> Iterator[list[Members]]:
    started: list[Members] = []
    yield started
    for group in started:
        group.kill()


def total(reports: list[dict[str, Any]], field: str) -> collections.Counter[str]:
    counted: collections.Counter[str] = collections.Counter()
    for report in reports:
        counted.update(report[field])
    return counted


def test_processes_pace_together_under_the_servers_limit(
    redis_url: str, namespace: str, chaos: KeyedChaos, members: list[Members]
) -> None:
    # The server allows 20 requests/s (burst 2) from all callers; the fleet paces 16/s.
    base = {
        "redis": redis_url,
        "namespace": namespace,
        "warm_up": chaos.url("/status/200", warm_up=1),
        "url": chaos.url("/rate-limit/fleet", rps=20, burst=2),
        "dependency": "api",
        "seconds": 2.0,
        "threads": 2,
        "rps": 16,
        "deadline": 5.0,
        "timeout": 0.2,  # about the shared schedule, not a slow Redis
    }
    group = Members([{**base, "mode": mode} for mode in ("sync", "sync", "asyncio", "asyncio")])
    members.append(group)
    reports = group.results()
    statuses = total(reports, "statuses")
    assert all(report["outages"] == 0 for report in reports)
    assert statuses["429"] == 0
    # 16/s for the fleet over ~2 s (plus calls waiting for their slot at the end).
    assert 16 <= statuses["200"] <= 20 * 2.0 + 2 + 8


def test_a_429_in_one_process_pauses_the_other_processes(
    redis_url: str,
    namespace: str,
    chaos: KeyedChaos,
    members: list[Members],
    make_fleet: FleetMaker,
) -> None:
    base = {
        "redis": redis_url,
        "namespace": namespace,
        "warm_up": chaos.url("/status/200", warm_up=1),
        "url": chaos.url("/status/200", worker=1),
        "dependency": "api",
        "seconds": 4.5,
        "threads": 2,
        "deadline": 5.0,
        "pause": 0.01,
        # (a second attempt for a connection a busy machine's server dropped: one
        # member's call, of some 800, ended in a TransportError once in a full run)
        "attempts": 2,
    }
    group = Members([{**base, "mode": mode} for mode in ("sync", "sync", "asyncio")])
    members.append(group)
    # This test process is a fourth member; it is the one the server tells to slow down.
    ours = retrysafe.Client(
        governor=Governor(fleet=make_fleet()),
        dependency="api",
        policy=retrysafe.RetryPolicy(attempts=1),
    )
    time.sleep(0.8)
    with pytest.raises(retrysafe.RateLimited):
        ours.get(chaos.url("/status/429", retry_after=2))
    reports = group.results()
    assert not total(reports, "errors")  # they waited the cooldown out, none gave up
    log = chaos.log()
    told = next(record.time for record in log if record.path == "/status/429")
    others = [
        record.time - told
        for record in log
        if record.path == "/status/200" and "warm_up" not in record.query
    ]
    # Requests already in flight (or sent within the fleet's lag) may still arrive...
    assert any(offset < 0 for offset in others)
    # ...but during the cooldown no member sends; afterwards they go on.
    during = [offset for offset in others if 0.15 < offset < 1.9]
    assert during == []
    assert any(offset >= 1.9 for offset in others)


def test_one_process_with_its_network_broken_does_not_open_the_breaker_for_all(
    redis_url: str, namespace: str, chaos: KeyedChaos, members: list[Members]
) -> None:
    base = {
        "redis": redis_url,
        "namespace": namespace,
        "warm_up": chaos.url("/status/200", warm_up=1),
        "dependency": "api",
        "seconds": 1.5,
        "threads": 2,
        "pause": 0.01,
    }
    bad = {**base, "url": chaos.server.closed_port_url(), "mode": "sync"}
    good = {**base, "url": chaos.url("/status/200"), "mode": "asyncio"}
    group = Members([bad, good, good])
    members.append(group)
    reports = group.results()
    assert reports[0]["errors"].get("TransportError", 0) >= 5  # it failed, and voted
    for report in reports[1:]:
        assert report["errors"] == {}
        assert report["statuses"]["200"] > 10
    assert redis.Redis.from_url(redis_url).exists(f"{namespace}:open:api") == 0


def test_redis_killed_and_restarted_under_running_processes(
    namespace: str, chaos: KeyedChaos, members: list[Members]
) -> None:
    with RestartableRedis() as server:
        base = {
            "redis": server.url,
            "namespace": namespace,
            "warm_up": chaos.url("/status/200", warm_up=1),
            "url": chaos.url("/status/200"),
            "dependency": "api",
            "seconds": 3.0,
            "threads": 2,
            "rps": 300,
            "burst": 10,
            "pause": 0.005,
        }
        group = Members([{**base, "mode": mode} for mode in ("sync", "asyncio", "sync")])
        members.append(group)
        kill = threading.Timer(1.0, server.kill)
        kill.start()
        time.sleep(2.0)
        kill.join()
        server.start()
        reports = group.results()
    assert not total(reports, "errors")  # not one call failed because Redis did
    assert total(reports, "statuses")["200"] > 30
    for report in reports:
        assert report["outages"] >= 1
        assert report["up"]  # rejoined once Redis answered again
        assert report["log"].count("is not answering") == 1  # logged once
