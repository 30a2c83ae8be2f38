"""How many 429s a client collects from a server that announces its rate limit.

An in-process server (an ``httpx.MockTransport``: nothing leaves the process) allows
``--limit`` requests per fixed window of ``--window`` seconds. Every 200 announces what
is left, in the form picked with ``--form``:

- ``ietf``: ``RateLimit: "default";r=<left>;t=<seconds to reset, rounded up>``
- ``draft``: ``RateLimit-Remaining: <left>`` and ``RateLimit-Reset: <seconds, with a fraction>``
- ``github``: ``X-RateLimit-Remaining: <left>`` and ``X-RateLimit-Reset: <Unix time, fraction>``

Past the limit it answers 429 with ``Retry-After`` (whole seconds, rounded up) and
``retry-after-ms``. ``--workers`` threads share one client and make ``--calls`` GETs
each. The clients compared:

1. retrysafe, default governor, server announcing: hint pacing on (a response saying 0
   remaining pauses every caller until the reset);
2. retrysafe, default governor, server silent: it learns only from 429s (their cooldown);
3. retrysafe with the limiter off (``GovernorSettings(limiter=None)``), server announcing:
   each call retries its own 429s;
4. a plain httpx loop of 4 attempts that sleeps out ``Retry-After`` plus up to 0.25 s jitter.

Requests and 429s are counted by the server. Real time, bounded: every call has a
30 s deadline.

    .venv/bin/python benchmarks/rate_limit_hints.py [--form ietf|draft|github]
        [--limit 10] [--window 1.0] [--workers 8] [--calls 5] [--seed N]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import logging
import math
import random
import threading
import time
from collections.abc import Callable

import httpx

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.governor import Governor, GovernorSettings

URL = "http://limited.test/items"
POLICY = RetryPolicy(deadline=30.0)


class WindowServer:
    """A fixed-window rate limit, announced on every answer (or not, ``announce=False``)."""

    def __init__(self, *, limit: int, window: float, form: str, announce: bool) -> None:
        self.limit, self.window, self.form, self.announce = limit, window, form, announce
        self._lock = threading.Lock()
        self._window_start = time.monotonic()
        self._used = 0
        self.requests = 0
        self.refused = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            now = time.monotonic()
            self.requests += 1
            passed = now - self._window_start
            if passed >= self.window:
                self._window_start += self.window * math.floor(passed / self.window)
                self._used = 0
            reset = self._window_start + self.window - now
            if self._used >= self.limit:
                self.refused += 1
                return httpx.Response(
                    429,
                    headers={
                        "Retry-After": str(max(1, math.ceil(reset))),
                        "retry-after-ms": f"{reset * 1000:.0f}",
                    },
                )
            self._used += 1
            left = self.limit - self._used
        return httpx.Response(200, headers=self._announcement(left, reset) if self.announce else {})

    def _announcement(self, left: int, reset: float) -> dict[str, str]:
        if self.form == "ietf":
            return {"RateLimit": f'"default";r={left};t={math.ceil(reset)}'}
        if self.form == "draft":
            return {"RateLimit-Remaining": str(left), "RateLimit-Reset": f"{reset:.3f}"}
        return {
            "X-RateLimit-Remaining": str(left),
            "X-RateLimit-Reset": f"{time.time() + reset:.3f}",
        }


@dataclasses.dataclass
class Row:
    client: str
    succeeded: int
    failed: int
    requests: int
    refused: int
    seconds: float


def plain_get(client: httpx.Client, rng: random.Random) -> httpx.Response:
    """A typical hand-written retry loop: 4 attempts, Retry-After honoured, jitter on top."""
    response = client.get(URL)
    for _ in range(3):
        if response.status_code != 429:
            break
        time.sleep(float(response.headers.get("Retry-After", "1")) + rng.random() * 0.25)
        response = client.get(URL)
    response.raise_for_status()
    return response


def run(
    name: str, server: WindowServer, get: Callable[[], object], workers: int, calls: int
) -> Row:
    failed = 0
    lock = threading.Lock()

    def worker() -> None:
        nonlocal failed
        for _ in range(calls):
            try:
                get()
            except (retrysafe.ApiError, httpx.HTTPStatusError):
                with lock:
                    failed += 1

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(worker) for _ in range(workers)]:
            future.result()
    seconds = time.monotonic() - started
    total = workers * calls
    return Row(name, total - failed, failed, server.requests, server.refused, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=("ietf", "draft", "github"), default="ietf")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("retrysafe").setLevel(logging.CRITICAL)  # one WARNING per failed call
    rng = random.Random(args.seed)
    rows: list[Row] = []

    def server_for(announce: bool) -> WindowServer:
        return WindowServer(limit=args.limit, window=args.window, form=args.form, announce=announce)

    for name, announce, settings in (
        ("retrysafe, hint pacing on", True, GovernorSettings()),
        ("retrysafe, server silent (429s only)", False, GovernorSettings()),
        ("retrysafe, limiter off", True, GovernorSettings(limiter=None)),
    ):
        server = server_for(announce)
        client = retrysafe.Client(
            transport=httpx.MockTransport(server), governor=Governor(settings), policy=POLICY
        )
        with client:
            rows.append(
                run(name, server, functools.partial(client.get, URL), args.workers, args.calls)
            )

    server = server_for(True)
    with httpx.Client(transport=httpx.MockTransport(server)) as plain:
        lock = threading.Lock()

        def get() -> httpx.Response:
            with lock:
                local = random.Random(rng.random())
            return plain_get(plain, local)

        rows.append(run("plain httpx loop (4 attempts)", server, get, args.workers, args.calls))

    total = args.workers * args.calls
    print(
        f"{total} GETs from {args.workers} threads; server allows {args.limit} per "
        f"{args.window:g} s window, announces in the {args.form!r} form"
    )
    header = f"{'client':<38} {'ok':>4} {'failed':>6} {'requests':>8} {'429s':>5} {'seconds':>7}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row.client:<38} {row.succeeded:>4} {row.failed:>6} {row.requests:>8} "
            f"{row.refused:>5} {row.seconds:>7.2f}"
        )


if __name__ == "__main__":
    main()
