"""retrysafe beside the Python retry libraries people reach for, on one loopback chaos server.

Each peer is set up the way its own documentation suggests for "retry transient HTTP
failures, 4 attempts, jittered backoff", with the same time budget where it has a way to
say one (the configurations are printed under the table):

- retrysafe: ``retrysafe.Client(policy=RetryPolicy(attempts=4, deadline=BUDGET))``, its
  default governor (retry budget, circuit breaker);
- tenacity around an ``httpx.Client(timeout=BUDGET)``: ``stop_after_attempt(4) |
  stop_after_delay(BUDGET)``, ``wait_random_exponential(multiplier=0.5, max=10)``, retrying
  transport errors and 429/5xx raised by ``raise_for_status()``;
- stamina around the same: ``stamina.retry(on=hook, attempts=4, timeout=BUDGET)``, the hook
  retrying the same errors and returning a 429/503's ``Retry-After`` as the wait (stamina's
  documented backoff hook);
- httpx-retries: ``RetryTransport(retry=Retry(total=3, backoff_factor=0.5,
  total_timeout=BUDGET))`` with ``timeout=BUDGET``;
- requests + urllib3: ``HTTPAdapter(max_retries=Retry(total=3, backoff_factor=0.5,
  backoff_jitter=0.5, status_forcelist=(429, 500, 502, 503, 504), raise_on_status=False))``,
  ``session.get(url, timeout=BUDGET)``.

One run of each measurement, against a ``ChaosServer`` started in this process on 127.0.0.1
(attempts are counted from the server's own log, never from the client):

1. happy path: microseconds per successful call (``/status/200``), sequentially, beside the
   bare client each peer wraps (httpx or requests);
2. full outage: attempts per call reaching the server, ``/status/503`` for every call,
   CALLS calls 20 at a time through one client (what a service does to a dead dependency);
3. 10 % independent failures (``/flaky?rate=0.1``, the same draws for every peer): success
   rate and attempts per call;
4. a server that never answers (``/hang``) with a budget of BUDGET: how long a call took;
5. a ``429`` whose ``Retry-After`` is longer than the budget (``/retry-after``, enforced: an
   early retry is refused again): what the peer did and how long it took.

Measurements 2-5 run side by side, every peer in its own thread (each with its own keys on
the server), so the whole run takes about as long as its slowest part. ``--quick`` scales
it down (a 1 s budget, a 2 s Retry-After, fewer calls) to about ten seconds, most of it
requests + urllib3 retrying the hanging server; CI runs it from a test.

    .venv/bin/python benchmarks/peers.py [--quick]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import logging
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import httpx

import retrysafe
from retrysafe.chaos import ChaosServer

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
PEERS = ("retrysafe", "tenacity", "stamina", "httpx-retries", "requests + urllib3")


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big a run is: the time budget, the Retry-After beyond it, and call counts."""

    budget: float
    retry_after: int
    happy_calls: int
    outage_calls: int
    flaky_calls: int
    #: Interleaved rounds the happy-path calls are split into (the median is reported).
    happy_rounds: int


FULL = Scale(
    budget=2.0, retry_after=4, happy_calls=1500, outage_calls=200, flaky_calls=500, happy_rounds=15
)
QUICK = Scale(
    budget=1.0, retry_after=2, happy_calls=100, outage_calls=20, flaky_calls=100, happy_rounds=5
)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one call ended, as the caller sees it."""

    ok: bool
    status: int | None
    error: str | None
    seconds: float


@dataclasses.dataclass
class Peer:
    """One library set up one way: ``call(url)`` makes a call; ``close()`` frees it."""

    name: str
    call: Callable[[str], Outcome]
    close: Callable[[], None]
    config: str


# -- the peers, each as its docs suggest ------------------------------------------------


def _transient(exc: BaseException) -> bool:
    """What tenacity and stamina are told to retry: transport errors and 429/5xx."""
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code in TRANSIENT_STATUSES
    return isinstance(exc, httpx.TransportError)


def _timed(call: Callable[[], httpx.Response]) -> Outcome:
    started = time.perf_counter()
    try:
        response = call()
    except httpx.HTTPStatusError as exc:
        return Outcome(False, exc.response.status_code, type(exc).__name__, _since(started))
    except Exception as exc:  # every failure is a data point here
        status = getattr(exc, "status", None)
        return Outcome(False, status, type(exc).__name__, _since(started))
    ok = response.status_code == 200
    return Outcome(ok, response.status_code, None, _since(started))


def _since(started: float) -> float:
    return time.perf_counter() - started


def make_retrysafe(scale: Scale) -> Peer:
    # No attempt starts with less than min_attempt_time left (0.5 s by default): a budget
    # shorter than a few of those needs a smaller one, or no attempt could start.
    shortest = min(0.5, scale.budget / 4)
    policy = retrysafe.RetryPolicy(attempts=4, deadline=scale.budget, min_attempt_time=shortest)
    client = retrysafe.Client(policy=policy, limits=_LIMITS)
    return Peer(
        "retrysafe",
        lambda url: _timed(lambda: client.get(url)),
        client.close,
        f"retrysafe.Client(policy=RetryPolicy(attempts=4, deadline={scale.budget:g}, "
        f"min_attempt_time={shortest:g})), default governor (budget + breaker)",
    )


def make_tenacity(scale: Scale) -> Peer:
    import tenacity

    client = httpx.Client(timeout=scale.budget, limits=_LIMITS)

    @tenacity.retry(
        stop=tenacity.stop_after_attempt(4) | tenacity.stop_after_delay(scale.budget),
        wait=tenacity.wait_random_exponential(multiplier=0.5, max=10),
        retry=tenacity.retry_if_exception(_transient),
        reraise=True,
    )
    def get(url: str) -> httpx.Response:
        response = client.get(url)
        response.raise_for_status()
        return response

    return Peer(
        "tenacity",
        lambda url: _timed(lambda: get(url)),
        client.close,
        f"@retry(stop=stop_after_attempt(4) | stop_after_delay({scale.budget:g}), "
        "wait=wait_random_exponential(multiplier=0.5, max=10), "
        f"retry=retry_if_exception(transient)), httpx.Client(timeout={scale.budget:g})",
    )


def make_stamina(scale: Scale) -> Peer:
    import stamina

    client = httpx.Client(timeout=scale.budget, limits=_LIMITS)

    def backoff_hook(exc: Exception) -> bool | float:
        """stamina's documented backoff hook: retry transient errors, and wait a 429/503's
        Retry-After when the server gives one."""
        if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in (429, 503):
            hint = exc.response.headers.get("Retry-After", "")
            if hint.isdigit():
                return float(hint)
        return _transient(exc)

    @stamina.retry(on=backoff_hook, attempts=4, timeout=scale.budget)
    def get(url: str) -> httpx.Response:
        response = client.get(url)
        response.raise_for_status()
        return response

    return Peer(
        "stamina",
        lambda url: _timed(lambda: get(url)),
        client.close,
        f"@stamina.retry(on=hook, attempts=4, timeout={scale.budget:g}), the hook returning "
        f"Retry-After; httpx.Client(timeout={scale.budget:g})",
    )


def make_httpx_retries(scale: Scale) -> Peer:
    import httpx_retries

    retry = httpx_retries.Retry(total=3, backoff_factor=0.5, total_timeout=scale.budget)
    client = httpx.Client(
        transport=httpx_retries.RetryTransport(retry=retry), timeout=scale.budget, limits=_LIMITS
    )
    return Peer(
        "httpx-retries",
        lambda url: _timed(lambda: client.get(url)),
        client.close,
        f"RetryTransport(retry=Retry(total=3, backoff_factor=0.5, total_timeout="
        f"{scale.budget:g})), timeout={scale.budget:g}",
    )


def make_requests(scale: Scale) -> Peer:
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    session = requests.Session()
    retry = Retry(
        total=3,
        backoff_factor=0.5,
        backoff_jitter=0.5,
        status_forcelist=sorted(TRANSIENT_STATUSES),
        raise_on_status=False,
    )
    adapter = HTTPAdapter(max_retries=retry, pool_maxsize=_POOL)
    session.mount("http://", adapter)

    def call(url: str) -> Outcome:
        started = time.perf_counter()
        try:
            response = session.get(url, timeout=scale.budget)
        except Exception as exc:
            return Outcome(False, None, type(exc).__name__, _since(started))
        ok = response.status_code == 200
        return Outcome(ok, response.status_code, None, _since(started))

    return Peer(
        "requests + urllib3",
        call,
        session.close,
        "HTTPAdapter(max_retries=Retry(total=3, backoff_factor=0.5, backoff_jitter=0.5, "
        "status_forcelist=(429, 500, 502, 503, 504), raise_on_status=False)), "
        f"session.get(url, timeout={scale.budget:g})",
    )


_POOL = 20
_LIMITS = httpx.Limits(max_connections=_POOL, max_keepalive_connections=_POOL)
MAKERS: dict[str, tuple[str | None, Callable[[Scale], Peer]]] = {
    "retrysafe": (None, make_retrysafe),
    "tenacity": ("tenacity", make_tenacity),
    "stamina": ("stamina", make_stamina),
    "httpx-retries": ("httpx_retries", make_httpx_retries),
    "requests + urllib3": ("requests", make_requests),
}


def installed_peers() -> list[str]:
    return [name for name, (module, _) in MAKERS.items() if module is None or _has(module)]


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# -- measurements -----------------------------------------------------------------------


def happy_path(
    server: ChaosServer, names: Sequence[str], scale: Scale
) -> tuple[dict[str, float], dict[str, str]]:
    """Microseconds per successful call, sequentially, for each peer and the bare clients;
    and each peer's configuration."""
    url = f"{server.url}/status/200?key=happy"
    bare_httpx = httpx.Client()
    contenders: list[tuple[str, Callable[[str], object], Callable[[], None]]] = [
        ("bare httpx", bare_httpx.get, bare_httpx.close)
    ]
    if _has("requests"):
        import requests

        session = requests.Session()
        contenders.append(("bare requests", session.get, session.close))
    peers = [MAKERS[name][1](scale) for name in names]
    contenders += [(peer.name, peer.call, peer.close) for peer in peers]
    try:
        for _name, call, _ in contenders:
            for _ in range(10):  # warm up: connections, imports, caches
                call(url)
        # Interleaved: each round runs one batch of every contender, so a machine that gets
        # busier or quieter meanwhile touches them all alike.
        per_batch = max(1, scale.happy_calls // scale.happy_rounds)
        batches: dict[str, list[float]] = {name: [] for name, _, _ in contenders}
        for _ in range(scale.happy_rounds):
            for name, call, _ in contenders:
                started = time.perf_counter()
                for _ in range(per_batch):
                    call(url)
                batches[name].append((time.perf_counter() - started) / per_batch * 1e6)
        results = {name: statistics.median(times) for name, times in batches.items()}
    finally:
        for _, _, close in contenders:
            close()
    return results, {peer.name: peer.config for peer in peers}


def _side_by_side(
    names: Sequence[str], scale: Scale, work: Callable[[Peer], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Run ``work`` for every peer at once, each in its own thread with a fresh client."""

    def one(name: str) -> dict[str, Any]:
        peer = MAKERS[name][1](scale)
        try:
            return work(peer)
        finally:
            peer.close()

    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


def _many(peer: Peer, urls: Sequence[str]) -> list[Outcome]:
    with concurrent.futures.ThreadPoolExecutor(_POOL) as pool:
        return list(pool.map(peer.call, urls))


def _slug(name: str) -> str:
    return "".join(char if char.isalnum() else "-" for char in name)


def full_outage(server: ChaosServer, names: Sequence[str], scale: Scale) -> dict[str, Any]:
    def work(peer: Peer) -> dict[str, Any]:
        key = f"outage-{_slug(peer.name)}"
        outcomes = _many(peer, [f"{server.url}/status/503?key={key}"] * scale.outage_calls)
        return {
            "attempts_per_call": len(server.log(key)) / scale.outage_calls,
            "ok": sum(outcome.ok for outcome in outcomes),
        }

    return _side_by_side(names, scale, work)


def independent_failures(server: ChaosServer, names: Sequence[str], scale: Scale) -> dict[str, Any]:
    def work(peer: Peer) -> dict[str, Any]:
        prefix = f"flaky-{_slug(peer.name)}-"
        urls = [
            f"{server.url}/flaky?rate=0.1&seed=7&key={prefix}{index}"
            for index in range(scale.flaky_calls)
        ]
        outcomes = _many(peer, urls)
        attempts = sum(record.key.startswith(prefix) for record in server.log())
        return {
            "success_pct": 100.0 * sum(outcome.ok for outcome in outcomes) / len(urls),
            "attempts_per_call": attempts / len(urls),
        }

    return _side_by_side(names, scale, work)


def hanging_server(server: ChaosServer, names: Sequence[str], scale: Scale) -> dict[str, Any]:
    def work(peer: Peer) -> dict[str, Any]:
        key = f"hang-{_slug(peer.name)}"
        outcome = peer.call(f"{server.url}/hang?key={key}")
        return {
            "seconds": outcome.seconds,
            "overrun": outcome.seconds - scale.budget,
            "attempts": len(server.log(key)),
            "error": outcome.error,
        }

    return _side_by_side(names, scale, work)


def long_retry_after(server: ChaosServer, names: Sequence[str], scale: Scale) -> dict[str, Any]:
    def work(peer: Peer) -> dict[str, Any]:
        key = f"ra-{_slug(peer.name)}"
        outcome = peer.call(f"{server.url}/retry-after?seconds={scale.retry_after}&key={key}")
        records = server.log(key)
        return {
            "seconds": outcome.seconds,
            "attempts": len(records),
            "early": sum(record.action == "early" for record in records),
            "ok": outcome.ok,
            "status": outcome.status,
            "error": outcome.error,
        }

    return _side_by_side(names, scale, work)


# -- output -----------------------------------------------------------------------------


def _retry_after_cell(row: dict[str, Any], scale: Scale) -> str:
    took = f"{row['seconds']:.2f} s"
    if row["ok"]:
        return (
            f"waited it out: 200 after {took} ({row['seconds'] - scale.budget:+.2f} s past budget)"
        )
    what = row["error"] or f"HTTP {row['status']}"
    if row["early"]:
        return f"retried early {row['early']}x, refused; {what} after {took}"
    if row["attempts"] == 1:
        return f"gave up at once: {what} after {took}"
    return f"{what} after {row['attempts']} attempts, {took}"


def markdown(report: dict[str, Any], scale: Scale) -> list[str]:
    names = report["peers"]
    happy = report["happy"]
    lines = [
        f"| library | happy path µs/call (bare client) | full outage: attempts/call "
        f"| 10 % failures: success, attempts/call | hanging server, {scale.budget:g} s budget "
        f"| Retry-After {scale.retry_after} s > {scale.budget:g} s budget |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        bare = happy["bare requests"] if name.startswith("requests") else happy["bare httpx"]
        outage = report["outage"][name]
        flaky = report["flaky"][name]
        hang = report["hang"][name]
        retry_after = report["retry_after"][name]
        lines.append(
            f"| {name} | {happy[name]:.0f} ({bare:.0f}) | {outage['attempts_per_call']:.2f} "
            f"| {flaky['success_pct']:.1f} %, {flaky['attempts_per_call']:.2f} "
            f"| {hang['seconds']:.2f} s ({hang['overrun']:+.2f} s), {hang['attempts']} attempts "
            f"| {_retry_after_cell(retry_after, scale)} |"
        )
    return lines


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "-"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds: CI runs this")
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    for noisy in ("retrysafe", "stamina", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)  # thousands of retries, no lines
    names = installed_peers()
    missing = [name for name in PEERS if name not in names]
    began = time.monotonic()
    with ChaosServer("127.0.0.1") as server:
        report: dict[str, Any] = {"peers": names}
        report["happy"], configs = happy_path(server, names, scale)
        measurements = {
            "outage": full_outage,
            "flaky": independent_failures,
            "hang": hanging_server,
            "retry_after": long_retry_after,
        }
        # Side by side: every measurement and every peer in its own thread (keys keep
        # them apart on the server), so the run lasts as long as its slowest part.
        with concurrent.futures.ThreadPoolExecutor(len(measurements)) as pool:
            running = {
                name: pool.submit(measure, server, names, scale)
                for name, measure in measurements.items()
            }
            report.update({name: future.result() for name, future in running.items()})
    wall = time.monotonic() - began
    versions = ", ".join(
        f"{name} {_version(name)}"
        for name in ("retrysafe", "httpx", "tenacity", "stamina", "httpx-retries", "requests")
    )
    print(
        f"peers{' (--quick)' if args.quick else ''}: Python {platform.python_version()}; {versions}"
    )
    print(
        f"one run each, loopback chaos server; outage {scale.outage_calls} calls and 10 % "
        f"failures {scale.flaky_calls} calls, 20 at a time; happy path: median of "
        f"{scale.happy_rounds} interleaved batches of "
        f"{max(1, scale.happy_calls // scale.happy_rounds)} (a busy machine shows in it)"
    )
    print()
    for line in markdown(report, scale):
        print(line)
    print()
    print("configurations:")
    for name in names:
        print(f"- {name}: {configs[name]}")
    if missing:
        print(f"\nnot installed (pip install -e '.[bench]'): {', '.join(missing)}")
    print(f"\nwall time {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
