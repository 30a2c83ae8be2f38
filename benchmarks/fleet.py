"""The fleet against local-only governors: 8 processes sharing (or not) one Redis.

Starts a private redis-server and a :class:`retrysafe.chaos.ChaosServer` (in this
process, on a background thread), and a pool of worker processes (this file run with
``--worker``), each calling from several threads. Every scenario runs twice in the same
run, with the same workers and the same ``GovernorSettings``: once with
``Governor(settings, fleet=RedisFleet(...))`` and once with local-only governors.
Requests are counted from the chaos server's own log (one state key per worker).

1. Rate limit: the endpoint allows 50 requests/s (burst 5) from all callers together;
   the governors pace at 48/s (``LimiterSettings(requests_per_second=48)``): the fleet's
   rate is the fleet's, a local governor's is its own. 429s received, throughput.
2. One worker gets a 429 with ``Retry-After: 2``: requests the other workers send in
   the 2 s that follow (the first 50 ms are counted apart: requests in flight, or sent
   within the fleet's propagation lag).
3. Full outage (every call a 503): requests reaching the server before every worker
   fails fast. Then one bad worker (its own network broken: a closed port under the
   same dependency name) among 7 healthy ones: calls the healthy ones lose.
4. Redis killed mid-run and restarted (paced fleet): calls that failed, and latency
   while Redis was down against the same run's local-only governors.
5. Latency per call in one process (sequential, modes interleaved): local governor,
   fleet governor (healthy path: no round trip), and the paced path (one round trip).

    .venv/bin/python benchmarks/fleet.py [--quick] [--processes 8] [--threads 4]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent / "tests" / "idempotency"))
sys.path.insert(0, str(HERE.parent.parent / "tests" / "fleet"))

import retrysafe  # noqa: E402
from retrysafe.governor import (  # noqa: E402
    Governor,
    GovernorSettings,
    LimiterSettings,
)

# -- the worker (a separate process) ------------------------------------------------------


def _governor(config: dict[str, Any]) -> tuple[Governor, Any]:
    settings = GovernorSettings(
        limiter=LimiterSettings(requests_per_second=config.get("rps"), burst=config.get("burst", 1))
    )
    fleet = None
    if config.get("redis"):
        from retrysafe.fleet import FleetSettings, RedisFleet

        fleet = RedisFleet(
            config["redis"],
            namespace=config["namespace"],
            settings=FleetSettings(timeout=config.get("timeout", 0.005)),
        )
        fleet.view(config["dependency"])  # join: read the state, start the refresher
    return Governor(settings, fleet=fleet), fleet


def _run_scenario(config: dict[str, Any]) -> dict[str, Any]:
    """One scenario in this worker: build, say ready, wait for go, call, report."""
    governor, fleet = _governor(config)
    policy = retrysafe.RetryPolicy(
        attempts=config.get("attempts", 4), deadline=config.get("deadline", 5.0)
    )
    client = retrysafe.Client(governor=governor, dependency=config["dependency"], policy=policy)
    statuses: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    latencies: list[tuple[float, float]] = []
    lock = threading.Lock()
    print("ready", flush=True)
    sys.stdin.readline()
    ends = time.monotonic() + config["seconds"]
    trigger: dict[str, float] = {}

    def call(url: str) -> None:
        started_wall, started = time.time(), time.perf_counter()
        status, error = None, None
        try:
            status = client.get(url).status_code
        except retrysafe.ApiError as exc:
            error = type(exc).__name__
        except Exception as exc:  # anything else is a failure the fleet caused: count it
            error = f"unexpected {type(exc).__name__}"
        spent = time.perf_counter() - started
        with lock:
            if error is None:
                statuses[str(status)] += 1
            else:
                errors[error] += 1
            if config.get("latency"):
                latencies.append((started_wall, spent))

    def loop() -> None:
        while time.monotonic() < ends:
            call(config["url"])

    def fire_trigger() -> None:
        time.sleep(config["trigger_after"])
        trigger["wall"] = time.time()
        with contextlib.suppress(retrysafe.ApiError):  # the 429 is the point
            retrysafe.Client(
                governor=governor,
                dependency=config["dependency"],
                policy=retrysafe.RetryPolicy(attempts=1),
            ).get(config["trigger_url"])
        trigger["answered"] = time.time()  # the 429 is in: its cooldown applied here

    threads = [threading.Thread(target=loop) for _ in range(config["threads"])]
    if config.get("trigger_url"):
        threads.append(threading.Thread(target=fire_trigger))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()
    report: dict[str, Any] = {
        "statuses": statuses,
        "errors": errors,
        "latencies": latencies,
        "trigger": trigger,
    }
    if fleet is not None:
        settle = time.monotonic() + 3.0
        while not fleet.up and time.monotonic() < settle:
            time.sleep(0.02)
        report.update(up=fleet.up, outages=fleet.availability.outages)
        fleet.close()
    return report


def worker_main() -> None:
    """Serve scenarios, one JSON line each on stdin, until stdin closes."""
    logging.basicConfig(level=logging.ERROR)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(_run_scenario(json.loads(line))), flush=True)


# -- the conductor -----------------------------------------------------------------------


class Pool:
    """Worker processes kept for the whole run (their start-up is paid once)."""

    def __init__(self, size: int) -> None:
        self.processes = [
            subprocess.Popen(
                [sys.executable, str(HERE), "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(size)
        ]

    def run(self, configs: list[dict[str, Any]], during: Any = None) -> list[dict[str, Any]]:
        """Send each worker its config, start them together, return their reports."""
        for process, config in zip(self.processes, configs, strict=True):
            assert process.stdin is not None
            process.stdin.write(json.dumps(config) + "\n")
            process.stdin.flush()
        for process in self.processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        started = time.time()
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        if during is not None:
            during(started)
        reports = []
        for process in self.processes:
            assert process.stdout is not None
            reports.append(json.loads(process.stdout.readline()))
        return reports

    def close(self) -> None:
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.close()
        for process in self.processes:
            process.wait(timeout=30)


def _sum(reports: list[dict[str, Any]], field: str) -> collections.Counter[str]:
    counted: collections.Counter[str] = collections.Counter()
    for report in reports:
        counted.update(report[field])
    return counted


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, args: argparse.Namespace, redis_url: str, server: Any, redis: Any) -> None:
        self.args = args
        self.redis_url = redis_url
        self.server = server
        self.redis = redis
        self.pool = Pool(args.processes)
        self.rows: list[tuple[str, str, str]] = []

    def configs(self, fleet: bool, key: str, **common: Any) -> list[dict[str, Any]]:
        namespace = f"bench-{uuid.uuid4().hex[:8]}"
        configs = []
        for index in range(self.args.processes):
            config = {
                "redis": self.redis_url if fleet else None,
                "namespace": namespace,
                "dependency": "api",
                "threads": self.args.threads,
                **common,
            }
            config["url"] = config["url"].format(key=f"{key}-w{index}")
            configs.append(config)
        return configs

    def row(self, figure: str, fleet: str, local: str) -> None:
        self.rows.append((figure, fleet, local))
        print(f"  {figure:<58} fleet {fleet:>14}   local {local:>14}", flush=True)

    def log_of(self, key: str) -> list[Any]:
        return [r for r in self.server.log() if r.key.startswith(key)]

    # 1 ----------------------------------------------------------------------------------
    def rate_limit(self) -> None:
        seconds = 2.0 if self.args.quick else 4.0
        print("1. an endpoint allowing 50 req/s from all callers (paced at 48/s)")
        results = {}
        for fleet in (True, False):
            key = f"rl-{uuid.uuid4().hex[:6]}"
            # One bucket for every worker: the key is the bucket's owner, not the worker.
            url = self.server.url + f"/rate-limit/shared?rps=50&burst=5&key={key}&w={{key}}"
            configs = self.configs(fleet, key, url=url, seconds=seconds, rps=48, deadline=5.0)
            reports = self.pool.run(configs)
            log = self.log_of(key)
            refused = sum(1 for r in log if r.action == "status:429")
            served = sum(1 for r in log if r.action == "status:200")
            span = max(r.time for r in log) - min(r.time for r in log)
            outages = sum(report.get("outages", 0) for report in reports)
            results[fleet] = (refused, served / span, _sum(reports, "errors"), served, outages)
        fleet_result, local = results[True], results[False]
        self.row("429s received", str(fleet_result[0]), str(local[0]))
        self.row("requests served (200)", str(fleet_result[3]), str(local[3]))
        self.row(
            "throughput (200s per second of the run)", f"{fleet_result[1]:.1f}", f"{local[1]:.1f}"
        )
        self.row(
            "calls that gave up", str(sum(fleet_result[2].values())), str(sum(local[2].values()))
        )
        self.row(
            "times a worker found Redis slow (> 5 ms) and went local", str(fleet_result[4]), "n/a"
        )

    # 2 ----------------------------------------------------------------------------------
    def retry_after(self) -> None:
        seconds = 3.5
        print("2. one worker gets a 429 with Retry-After: 2")
        results = {}
        for fleet in (True, False):
            key = f"ra-{uuid.uuid4().hex[:6]}"
            url = self.server.url + "/status/200?key={key}"
            configs = self.configs(fleet, key, url=url, seconds=seconds, deadline=5.0, latency=True)
            configs[0]["trigger_url"] = self.server.url + f"/status/429?retry_after=2&key={key}-t"
            configs[0]["trigger_after"] = 1.0
            reports = self.pool.run(configs)
            # Arrivals at the server, from the 429's arrival on (other workers only)...
            log = self.log_of(key)
            told = next(r.time for r in log if r.key == f"{key}-t")
            others = [r.time - told for r in log if r.key != f"{key}-t" and r.key != f"{key}-w0"]
            arrived = sum(1 for offset in others if 0 <= offset < 2.0)
            # ...and requests the other workers started after the 429 was answered.
            answered = reports[0]["trigger"]["answered"]
            starts = [t - answered for r in reports[1:] for (t, _) in r["latencies"]]
            in_lag = sum(1 for offset in starts if 0 <= offset < 0.05)
            later = sum(1 for offset in starts if 0.05 <= offset < 2.0)
            last = max((offset for offset in starts if 0 <= offset < 2.0), default=0.0)
            results[fleet] = (arrived, in_lag, later, last)
        fleet_result, local = results[True], results[False]
        self.row(
            "requests of the 7 others arriving in the 2 s", str(fleet_result[0]), str(local[0])
        )
        self.row(
            "  of them started after the 429 was answered, +50 ms on",
            str(fleet_result[2]),
            str(local[2]),
        )
        self.row(
            "  started within 50 ms of it (the fleet's lag)",
            str(fleet_result[1]),
            str(local[1]),
        )
        self.row(
            "  the last one started after it, at (ms)",
            f"{fleet_result[3] * 1e3:.0f}",
            f"{local[3] * 1e3:.0f}",
        )

    # 3 ----------------------------------------------------------------------------------
    def outage(self) -> None:
        seconds = 3.0
        print("3. a full outage (every call a 503)")
        results = {}
        for fleet in (True, False):
            key = f"out-{uuid.uuid4().hex[:6]}"
            url = self.server.url + "/status/503?key={key}"
            configs = self.configs(fleet, key, url=url, seconds=seconds, deadline=2.0)
            reports = self.pool.run(configs)
            log = self.log_of(key)
            first = min(r.time for r in log)
            last = max(r.time for r in log)
            results[fleet] = (len(log), last - first, _sum(reports, "errors").get("CircuitOpen", 0))
        self.row(
            "requests reaching the server in 3 s", str(results[True][0]), str(results[False][0])
        )
        self.row(
            "time from the first to the last of them (s)",
            f"{results[True][1]:.2f}",
            f"{results[False][1]:.2f}",
        )
        self.row("calls refused fast (CircuitOpen)", str(results[True][2]), str(results[False][2]))
        print("   one bad worker (closed port, same dependency) among healthy ones")
        results = {}
        for fleet in (True, False):
            key = f"bad-{uuid.uuid4().hex[:6]}"
            url = self.server.url + "/status/200?key={key}"
            configs = self.configs(fleet, key, url=url, seconds=seconds, deadline=2.0)
            configs[0]["url"] = self.server.closed_port_url()
            namespace = configs[0]["namespace"]
            reports = self.pool.run(configs)
            lost = sum(sum(report["errors"].values()) for report in reports[1:])
            bad = sum(reports[0]["errors"].values())
            opened = bool(self.redis.exists(f"{namespace}:open:api")) if fleet else False
            results[fleet] = (lost, bad, opened)
        self.row("calls the healthy workers lost", str(results[True][0]), str(results[False][0]))
        self.row("calls the bad worker lost", str(results[True][1]), str(results[False][1]))
        self.row("fleet breaker opened", str(results[True][2]), "n/a")

    # 4 ----------------------------------------------------------------------------------
    def redis_killed(self, restartable: Any) -> None:
        seconds = 4.0
        print("4. Redis killed 1 s in, restarted 2.5 s in (paced at 2000/s, not binding)")
        results = {}
        window: dict[str, float] = {}

        def chaos(started: float) -> None:
            time.sleep(max(0.0, started + 1.0 - time.time()))
            window["down"] = time.time()
            restartable.kill()
            time.sleep(max(0.0, started + 2.5 - time.time()))
            restartable.start()
            window["up"] = time.time()

        for fleet in (True, False):
            key = f"kill-{uuid.uuid4().hex[:6]}"
            url = self.server.url + "/status/200?key={key}"
            configs = self.configs(
                fleet, key, url=url, seconds=seconds, rps=2000, burst=50, latency=True
            )
            reports = self.pool.run(configs, during=chaos)
            errors = _sum(reports, "errors")
            down, up = window["down"], window["up"]
            while_down = [s for r in reports for (t, s) in r["latencies"] if down <= t < up]
            while_up = [
                s for r in reports for (t, s) in r["latencies"] if t < down or t >= up + 0.5
            ]
            rejoined = all(r.get("up", True) for r in reports)
            results[fleet] = (errors, while_down, while_up, rejoined)
        fleet_errors, local_errors = results[True][0], results[False][0]
        self.row(
            "calls that failed", str(sum(fleet_errors.values())), str(sum(local_errors.values()))
        )
        for label, index in (("while Redis was down", 1), ("while Redis was up", 2)):
            f, lo = results[True][index], results[False][index]
            self.row(
                f"latency p50 / p99 {label} (ms)",
                f"{_pct(f, 0.5) * 1e3:.2f} / {_pct(f, 0.99) * 1e3:.2f}",
                f"{_pct(lo, 0.5) * 1e3:.2f} / {_pct(lo, 0.99) * 1e3:.2f}",
            )
        self.row("every worker rejoined the fleet", str(results[True][3]), "n/a")

    # 5 ----------------------------------------------------------------------------------
    def latency(self) -> None:
        from retrysafe.fleet import RedisFleet

        rounds = 300 if self.args.quick else 1500
        print(f"5. latency per call, one process, {rounds} sequential calls per mode, interleaved")
        fleets = [
            RedisFleet(self.redis_url, namespace=f"lat-{uuid.uuid4().hex[:6]}") for _ in range(2)
        ]
        paced = GovernorSettings(limiter=LimiterSettings(requests_per_second=1e6, burst=1000))
        modes = {
            "local": Governor(),
            "fleet": Governor(fleet=fleets[0]),
            "local paced": Governor(paced),
            "fleet paced": Governor(paced, fleet=fleets[1]),
        }
        url = self.server.url + "/status/200?key=latency"
        clients = {
            name: retrysafe.Client(governor=g, dependency="api", policy=retrysafe.RetryPolicy())
            for name, g in modes.items()
        }
        for c in clients.values():
            for _ in range(20):
                c.get(url)  # warm: connections, scripts
        spent: dict[str, list[float]] = {name: [] for name in clients}
        for _ in range(rounds):
            for name, c in clients.items():
                started = time.perf_counter()
                c.get(url)
                spent[name].append(time.perf_counter() - started)
        # The fleet's own round trip, alone: what the paced path adds at most.
        trips = []
        for _ in range(rounds):
            started = time.perf_counter()
            fleets[1].reserve("trip", 1e6, 1000, 60.0)
            trips.append(time.perf_counter() - started)
        for c in clients.values():
            c.close()
        for healthy, base in (("fleet", "local"), ("fleet paced", "local paced")):
            f, lo = spent[healthy], spent[base]
            self.row(
                f"{healthy}: call p50 / p99 (ms), vs {base}",
                f"{_pct(f, 0.5) * 1e3:.3f} / {_pct(f, 0.99) * 1e3:.3f}",
                f"{_pct(lo, 0.5) * 1e3:.3f} / {_pct(lo, 0.99) * 1e3:.3f}",
            )
            self.row(
                f"{healthy}: added p50 / p99 (ms)",
                f"{(_pct(f, 0.5) - _pct(lo, 0.5)) * 1e3:+.3f} / "
                f"{(_pct(f, 0.99) - _pct(lo, 0.99)) * 1e3:+.3f}",
                "-",
            )
        self.row(
            "one pacing script call alone, p50 / p99 (ms)",
            f"{_pct(trips, 0.5) * 1e3:.3f} / {_pct(trips, 0.99) * 1e3:.3f}",
            "-",
        )
        self.row(
            "governor work per healthy call (admit + count it, us)",
            f"{_governor_work(Governor(fleet=fleets[0])):.2f}",
            f"{_governor_work(Governor()):.2f}",
        )
        self.row(
            "mean call, fleet vs local (ms)",
            f"{statistics.mean(spent['fleet']) * 1e3:.3f}",
            f"{statistics.mean(spent['local']) * 1e3:.3f}",
        )
        for fleet in fleets:
            fleet.close()


class _FirstAttempt:
    """What a guard reads of a call about to make its first attempt."""

    attempts = 0
    pacing_held = False

    def probe_lease(self) -> float:
        return 10.0


def _governor_work(governor: Governor, rounds: int = 100_000) -> float:
    """Microseconds a guard spends admitting a healthy attempt and counting its success,
    as the shells do it (the breaker's short path where it has one, else ``apply``)."""
    from retrysafe.decisions import RecordHealth
    from retrysafe.governor.breaker import CLOSED_PERMIT

    guard = governor.guard("work")
    call = _FirstAttempt()
    healthy = RecordHealth(CLOSED_PERMIT, "healthy", None)
    short_path = getattr(guard.breaker, "record_healthy_call", None)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(rounds):
            guard.admit(call)
            if short_path is not None:
                short_path()
            else:
                guard.apply(healthy)
        best = min(best, time.perf_counter() - started)
    return best / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    if args.worker:
        worker_main()
        return
    import redis
    from fleet_servers import RestartableRedis

    from retrysafe.chaos import ChaosServer

    logging.basicConfig(level=logging.ERROR)
    began = time.monotonic()
    with RestartableRedis() as restartable, ChaosServer() as server:
        admin = redis.Redis.from_url(restartable.url)
        bench = Bench(args, restartable.url, server, admin)
        print(
            f"fleet benchmark: {args.processes} processes x {args.threads} threads, "
            f"python {sys.version.split()[0]}, redis-py {redis.__version__}"
        )
        try:
            bench.rate_limit()
            bench.retry_after()
            bench.outage()
            bench.redis_killed(restartable)
        finally:
            bench.pool.close()
        bench.latency()
    print(f"\ntotal {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
