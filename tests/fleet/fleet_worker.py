"""One member of a test fleet: a real process calling the chaos server through a governor.

Run as ``python fleet_worker.py '<json>'``. It builds its client, prints ``ready``, waits
for a line on stdin (so every member starts together), calls ``url`` from ``threads``
threads (``mode="sync"``) or tasks (``mode="asyncio"``) for ``seconds``, then prints one
JSON line: the statuses it got, the errors it gave up with, and its fleet's state.

Config keys: ``redis`` (None: local-only governor), ``namespace``, ``url``,
``dependency``, ``seconds``, ``threads``, ``mode``, ``rps`` and ``burst`` (pacing),
``deadline``, ``attempts``, ``timeout`` (the fleet's), ``breaker_run`` (local
``consecutive_failures``), ``pause`` (seconds between a thread's calls), ``warm_up`` (a
URL called once before ``ready``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import sys
import threading
import time
from typing import Any

import retrysafe
from retrysafe.governor import BreakerSettings, Governor, GovernorSettings, LimiterSettings


def governor_for(config: dict[str, Any]) -> tuple[Governor, Any]:
    rps = config.get("rps")
    settings = GovernorSettings(
        limiter=LimiterSettings(requests_per_second=rps, burst=config.get("burst", 1)),
        breaker=BreakerSettings(consecutive_failures=config.get("breaker_run", 20), open_for=5),
    )
    fleet = None
    if config.get("redis"):
        from retrysafe.fleet import FleetSettings, RedisFleet

        fleet = RedisFleet(
            config["redis"],
            namespace=config["namespace"],
            settings=FleetSettings(timeout=config.get("timeout", 0.005)),
        )
    return Governor(settings, fleet=fleet), fleet


def warm_up(config: dict[str, Any], governor: Governor) -> None:
    """One call of the same kind before the start, under another dependency name: what a
    first call imports and connects is paid before the clock runs, and leaves the
    dependency under test untouched."""
    options = {"governor": governor, "dependency": "warm-up"}
    if config.get("mode", "sync") == "sync":
        with retrysafe.Client(**options) as client:
            client.get(config["warm_up"])
    else:

        async def once() -> None:
            async with retrysafe.AsyncClient(**options) as client:
                await client.get(config["warm_up"])

        asyncio.run(once())


def main() -> None:
    config = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # the fleet's log lines
    governor, fleet = governor_for(config)
    if fleet is not None:
        fleet.view(config["dependency"])  # join now: read the state, start the refresher
    policy = retrysafe.RetryPolicy(
        attempts=config.get("attempts", 1), deadline=config.get("deadline", 2.0)
    )
    statuses: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    options = {"governor": governor, "dependency": config["dependency"], "policy": policy}
    warm_up(config, governor)
    print("ready", flush=True)
    sys.stdin.readline()
    ends = time.monotonic() + config["seconds"]
    pause = config.get("pause", 0.0)

    def count(status: int | None, error: BaseException | None) -> None:
        with lock:
            if error is not None:
                errors[type(error).__name__] += 1
            else:
                statuses[str(status)] += 1

    if config.get("mode", "sync") == "sync":
        client = retrysafe.Client(**options)

        def run() -> None:
            while time.monotonic() < ends:
                try:
                    count(client.get(config["url"]).status_code, None)
                except retrysafe.ApiError as error:
                    count(None, error)
                if pause:
                    time.sleep(pause)

        threads = [threading.Thread(target=run) for _ in range(config["threads"])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        client.close()
    else:

        async def run_async() -> None:
            async with retrysafe.AsyncClient(**options) as client:

                async def one() -> None:
                    while time.monotonic() < ends:
                        try:
                            count((await client.get(config["url"])).status_code, None)
                        except retrysafe.ApiError as error:
                            count(None, error)
                        if pause:
                            await asyncio.sleep(pause)

                await asyncio.gather(*(one() for _ in range(config["threads"])))

        asyncio.run(run_async())
    report: dict[str, Any] = {"statuses": statuses, "errors": errors}
    if fleet is not None:
        settle = time.monotonic() + 3.0  # give a returning Redis time to be found again
        while not fleet.up and time.monotonic() < settle:
            time.sleep(0.02)
        report.update(up=fleet.up, outages=fleet.availability.outages)
        fleet.close()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
