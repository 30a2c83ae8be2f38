"""What a successful call costs through retrysafe and through its peers, and what importing costs.

Contenders, each with its own client (and so its own connection pool):

* ``httpx``: a bare ``httpx.Client`` / ``httpx.AsyncClient``, the baseline;
* ``httpx, a second client``: another bare client, timed as a contender: what it "adds" is
  how far two identical clients' timings differ in this run (the noise floor to read every
  other "added" against);
* ``retrysafe.Client``: retrysafe's client, with the default :class:`retrysafe.Governor`
  (load protection on), and again with ``GovernorSettings.off()``;
* ``httpx + RetryTransport``: a bare httpx client over ``retrysafe.RetryTransport``
  (``AsyncRetryTransport``), governor on and off;
* ``httpx-retries``: a bare httpx client over ``httpx_retries.RetryTransport``;
* ``tenacity``: a ``@tenacity.retry``-decorated function calling a bare httpx client;
* ``stamina``: a ``@stamina.retry(on=...)``-decorated function calling a bare httpx client.

Each retries up to 3 attempts on transport errors and 5xx; every call here succeeds, so
what is measured is the cost of the retry layer on the happy path. Sync and async, on
``httpx.MockTransport`` (no I/O: the layer's own cost), async on a mock that first waits
on the event loop as many times as a network request does, and on loopback (a minimal HTTP/1.1
server in a child process on 127.0.0.1, keep-alive, so it does not share this process's
GIL). All (scenario, contender) pairs are interleaved: each round runs one batch of calls
of every pair, in a fresh random order, so drift (CPU frequency, other load) hits all
alike. Reported per pair: the median over rounds of microseconds per call, and the median
over rounds of the difference to bare httpx in the same round ("added").

Import time: fresh interpreters, interleaved, median wall time of ``import httpx, X``
(bytecode caches are written first, as an installed package has them), and what X adds
to ``import httpx`` alone.

    .venv/bin/python benchmarks/overhead.py [--quick] [--json] [--rounds N] [--max-seconds S]

Needs the bench extra (``pip install -e '.[bench]'``); a missing peer is left out and
named. Traffic goes only to 127.0.0.1. It measures the retrysafe it imports and says which
build that is: plain Python, or the compiled build (``scripts/build-compiled``; install
its wheel in a venv of its own and run this script with that venv's python).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

import retrysafe
import retrysafe.compiled

ATTEMPTS = 3
PEERS = ("httpx_retries", "tenacity", "stamina")
#: A second bare httpx client, the control: its "added" is the run's noise floor.
CONTROL = "httpx, a second client"
IMPORTS = ("httpx", "retrysafe", "httpx_retries", "tenacity", "stamina")

# A minimal keep-alive HTTP/1.1 server: every request (GET, no body) gets the same 200.
# It exits when its stdin closes, so it never outlives this process.
_SERVER = r"""
import asyncio, sys

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"

class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buffer = b""

    def data_received(self, data):
        self.buffer += data
        count = self.buffer.count(b"\r\n\r\n")
        if count:
            self.buffer = self.buffer[self.buffer.rindex(b"\r\n\r\n") + 4 :]
            self.transport.write(RESPONSE * count)

async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Answer, "127.0.0.1", 0, backlog=64)
    print(server.sockets[0].getsockname()[1], flush=True)
    done = loop.create_future()
    loop.add_reader(sys.stdin.fileno(), lambda: done.done() or done.set_result(None))
    await done

asyncio.run(main())
"""


@contextlib.contextmanager
def loopback_server() -> Iterator[str]:
    """Start the minimal server in a child process; yields its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/"
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def mock_transport() -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(200, content=b"ok"))


#: How many times the waiting mock yields to the event loop per request: as many turns as
#: an async request over loopback takes here (counted with the loop's own iterations).
NETWORK_WAITS = 6


class WaitingMockTransport(httpx.AsyncBaseTransport):
    """A mock that waits on the event loop as a network request does, before answering.

    Steadier than loopback (no socket, no server), closer to a real async call than the
    plain mock: every coroutine a request awaits through is resumed at each wait.
    """

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(NETWORK_WAITS):
            await asyncio.sleep(0)
        return httpx.Response(200, content=b"ok")


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


@dataclass
class Contender:
    """One way of making the call, in one scenario."""

    name: str
    call: Callable[[], Any]  # sync: returns a Response; async: returns an awaitable of one
    close: Callable[[], Any]
    rounds: list[float] = field(default_factory=list)  # microseconds per call, per round


def governor_off() -> retrysafe.Governor:
    return retrysafe.Governor(retrysafe.GovernorSettings.off())


def sync_contenders(
    url: str, transport: Callable[[], httpx.BaseTransport | None]
) -> list[Contender]:
    """Every sync contender; ``transport()`` is None for a real network transport."""

    def base() -> httpx.BaseTransport:
        made = transport()
        return made if made is not None else httpx.HTTPTransport()

    def plain(client: httpx.Client, name: str) -> Contender:
        return Contender(name, lambda: client.get(url), client.close)

    made = [
        plain(httpx.Client(transport=base()), "httpx"),
        plain(httpx.Client(transport=base()), CONTROL),
        plain(retrysafe.Client(transport=base()), "retrysafe.Client"),
        plain(
            retrysafe.Client(transport=base(), governor=governor_off()),
            "retrysafe.Client, governor off",
        ),
        plain(
            httpx.Client(transport=retrysafe.RetryTransport(base())),
            "httpx + RetryTransport",
        ),
        plain(
            httpx.Client(transport=retrysafe.RetryTransport(base(), governor=governor_off())),
            "httpx + RetryTransport, governor off",
        ),
    ]
    if importlib.util.find_spec("httpx_retries") is not None:
        import httpx_retries

        retry = httpx_retries.Retry(total=ATTEMPTS - 1, backoff_factor=0.5)
        made.append(
            plain(
                httpx.Client(transport=httpx_retries.RetryTransport(base(), retry=retry)),
                "httpx-retries",
            )
        )
    if importlib.util.find_spec("tenacity") is not None:
        import tenacity

        tenacity_client = httpx.Client(transport=base())

        @tenacity.retry(
            stop=tenacity.stop_after_attempt(ATTEMPTS),
            wait=tenacity.wait_random_exponential(multiplier=0.5, max=10),
            retry=tenacity.retry_if_exception(_retryable),
            reraise=True,
        )
        def tenacity_get() -> httpx.Response:
            response = tenacity_client.get(url)
            response.raise_for_status()
            return response

        made.append(Contender("tenacity", tenacity_get, tenacity_client.close))
    if importlib.util.find_spec("stamina") is not None:
        import stamina

        stamina_client = httpx.Client(transport=base())

        @stamina.retry(on=_retryable, attempts=ATTEMPTS)
        def stamina_get() -> httpx.Response:
            response = stamina_client.get(url)
            response.raise_for_status()
            return response

        made.append(Contender("stamina", stamina_get, stamina_client.close))
    return made


def async_contenders(
    url: str, transport: Callable[[], httpx.AsyncBaseTransport | None]
) -> list[Contender]:
    """Every async contender; ``transport()`` is None for a real network transport."""

    def base() -> httpx.AsyncBaseTransport:
        made = transport()
        return made if made is not None else httpx.AsyncHTTPTransport()

    def plain(client: httpx.AsyncClient, name: str) -> Contender:
        return Contender(name, lambda: client.get(url), client.aclose)

    made = [
        plain(httpx.AsyncClient(transport=base()), "httpx"),
        plain(httpx.AsyncClient(transport=base()), CONTROL),
        plain(retrysafe.AsyncClient(transport=base()), "retrysafe.Client"),
        plain(
            retrysafe.AsyncClient(transport=base(), governor=governor_off()),
            "retrysafe.Client, governor off",
        ),
        plain(
            httpx.AsyncClient(transport=retrysafe.AsyncRetryTransport(base())),
            "httpx + RetryTransport",
        ),
        plain(
            httpx.AsyncClient(
                transport=retrysafe.AsyncRetryTransport(base(), governor=governor_off())
            ),
            "httpx + RetryTransport, governor off",
        ),
    ]
    if importlib.util.find_spec("httpx_retries") is not None:
        import httpx_retries

        retry = httpx_retries.Retry(total=ATTEMPTS - 1, backoff_factor=0.5)
        made.append(
            plain(
                httpx.AsyncClient(transport=httpx_retries.RetryTransport(base(), retry=retry)),
                "httpx-retries",
            )
        )
    if importlib.util.find_spec("tenacity") is not None:
        import tenacity

        tenacity_client = httpx.AsyncClient(transport=base())

        @tenacity.retry(
            stop=tenacity.stop_after_attempt(ATTEMPTS),
            wait=tenacity.wait_random_exponential(multiplier=0.5, max=10),
            retry=tenacity.retry_if_exception(_retryable),
            reraise=True,
        )
        async def tenacity_get() -> httpx.Response:
            response = await tenacity_client.get(url)
            response.raise_for_status()
            return response

        made.append(Contender("tenacity", tenacity_get, tenacity_client.aclose))
    if importlib.util.find_spec("stamina") is not None:
        import stamina

        stamina_client = httpx.AsyncClient(transport=base())

        @stamina.retry(on=_retryable, attempts=ATTEMPTS)
        async def stamina_get() -> httpx.Response:
            response = await stamina_client.get(url)
            response.raise_for_status()
            return response

        made.append(Contender("stamina", stamina_get, stamina_client.aclose))
    return made


@dataclass
class Scenario:
    name: str  # e.g. "sync MockTransport"
    is_async: bool
    calls: int  # per batch
    contenders: list[Contender]


def run_batch(
    loop: asyncio.AbstractEventLoop,
    scenario: Scenario,
    contender: Contender,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> float:
    """Run one batch; microseconds per call, by ``clock`` (nanoseconds)."""
    calls = scenario.calls
    call = contender.call
    if scenario.is_async:

        async def batch() -> int:
            started = clock()
            for _ in range(calls):
                await call()
            return clock() - started

        elapsed = loop.run_until_complete(batch())
    else:
        started = clock()
        for _ in range(calls):
            call()
        elapsed = clock() - started
    return elapsed / calls / 1000


def standard_scenarios(
    url: str,
    sync_contenders: Callable[[str, Callable[[], Any]], list[Contender]],
    async_contenders: Callable[[str, Callable[[], Any]], list[Contender]],
    *,
    quick: bool,
) -> list[Scenario]:
    """The four scenarios (sync and async, on MockTransport and on loopback at ``url``)
    with the contenders the two functions make for each transport."""
    mock_calls, loopback_calls = (100, 40) if quick else (200, 80)
    return [
        Scenario("sync MockTransport", False, mock_calls, sync_contenders(url, mock_transport)),
        Scenario("async MockTransport", True, mock_calls, async_contenders(url, mock_transport)),
        Scenario("sync loopback", False, loopback_calls, sync_contenders(url, lambda: None)),
        Scenario("async loopback", True, loopback_calls, async_contenders(url, lambda: None)),
    ]


def close_scenarios(scenarios: list[Scenario], loop: asyncio.AbstractEventLoop) -> None:
    """Close every contender's client (on ``loop`` for the async ones)."""
    for scenario in scenarios:
        for contender in scenario.contenders:
            closed = contender.close()
            if scenario.is_async:
                loop.run_until_complete(closed)


def check_once(loop: asyncio.AbstractEventLoop, scenario: Scenario, contender: Contender) -> None:
    response = contender.call()
    if scenario.is_async:
        response = loop.run_until_complete(response)
    if response.status_code != 200 or response.content != b"ok":
        raise RuntimeError(f"{scenario.name} / {contender.name}: unexpected {response!r}")


def measure_calls(
    scenarios: list[Scenario],
    loop: asyncio.AbstractEventLoop,
    rounds: int,
    warmup_rounds: int,
    max_seconds: float,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> int:
    """Interleave every (scenario, contender) batch over the rounds, each round in a fresh
    random order, timed by ``clock``; returns the rounds run."""
    pairs = [(scenario, contender) for scenario in scenarios for contender in scenario.contenders]
    for scenario, contender in pairs:
        check_once(loop, scenario, contender)
    shuffle = random.Random(8)
    for _ in range(warmup_rounds):
        for scenario, contender in pairs:
            run_batch(loop, scenario, contender, clock)
    started = time.monotonic()
    done = 0
    while done < rounds and (done < 3 or time.monotonic() - started < max_seconds):
        shuffle.shuffle(pairs)
        gc.collect()
        for scenario, contender in pairs:
            contender.rounds.append(run_batch(loop, scenario, contender, clock))
        done += 1
    return done


def call_results(scenarios: list[Scenario]) -> list[dict[str, Any]]:
    rows = []
    for scenario in scenarios:
        bare = scenario.contenders[0]
        for contender in scenario.contenders:
            added = [mine - base for mine, base in zip(contender.rounds, bare.rounds, strict=True)]
            rows.append(
                {
                    "scenario": scenario.name,
                    "contender": contender.name,
                    "us_per_call": statistics.median(contender.rounds),
                    "added_us": statistics.median(added),
                    "ratio": statistics.median(
                        mine / base
                        for mine, base in zip(contender.rounds, bare.rounds, strict=True)
                    ),
                    "rounds": len(contender.rounds),
                    "calls_per_round": scenario.calls,
                }
            )
    return rows


def import_times(runs: int) -> list[dict[str, Any]]:
    """Median wall time of a fresh ``python -c 'import httpx, X'``, interleaved."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    statements = {"python (no import)": "pass"}
    for module in IMPORTS:
        if module == "httpx":
            statements[module] = "import httpx"
        elif importlib.util.find_spec(module) is not None:
            statements[module] = f"import httpx, {module}"
            if module in ("tenacity", "stamina"):  # these do not import httpx themselves
                statements[f"{module} (alone)"] = f"import {module}"

    def once(statement: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], env=environment, check=True)
        return (time.perf_counter() - started) * 1000

    for statement in statements.values():
        once(statement)  # writes bytecode caches, warms the file cache
    times: dict[str, list[float]] = {name: [] for name in statements}
    order = list(statements)
    shuffle = random.Random(15)
    for _ in range(runs):
        shuffle.shuffle(order)
        for name in order:
            times[name].append(once(statements[name]))
    httpx_ms = statistics.median(times["httpx"])
    return [
        {
            "module": name,
            "statement": statements[name],
            "ms": statistics.median(times[name]),
            "over_httpx_ms": (
                statistics.median(times[name]) - httpx_ms
                if statements[name].startswith("import httpx, ")
                else None
            ),
            "runs": runs,
        }
        for name in statements
    ]


def print_table(result: dict[str, Any]) -> None:
    versions = ", ".join(f"{name} {version}" for name, version in result["versions"].items())
    print(f"Python {result['python']}; {versions}; retrysafe build: {result['build']}")
    print(
        f"Per successful call: median of {result['rounds']} interleaved rounds; "
        "added = median over rounds of (contender - bare httpx) in the same round."
    )
    scenario = None
    for row in result["calls"]:
        if row["scenario"] != scenario:
            scenario = row["scenario"]
            print(f"\n{scenario} ({row['calls_per_round']} calls per batch)")
            print(f"  {'contender':38} {'µs/call':>9} {'added µs':>9} {'x bare':>7}")
        print(
            f"  {row['contender']:38} {row['us_per_call']:9.1f} "
            f"{row['added_us']:+9.1f} {row['ratio']:7.2f}"
        )
    print(f"\nImport, fresh interpreter, median of {result['imports'][0]['runs']} runs")
    print(f"  {'module':20} {'statement':30} {'ms':>7} {'over httpx':>10}")
    for row in result["imports"]:
        over = "" if row["over_httpx_ms"] is None else f"{row['over_httpx_ms']:+10.1f}"
        print(f"  {row['module']:20} {row['statement']:30} {row['ms']:7.1f} {over:>10}")
    if result["missing"]:
        print(
            f"\nLeft out (not installed; pip install -e '.[bench]'): {', '.join(result['missing'])}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a small run (~10 s)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 60, quick 12)")
    parser.add_argument(
        "--max-seconds",
        type=float,
        help="stop the call rounds after this long (default 80, quick 15)",
    )
    parser.add_argument("--import-runs", type=int, help="runs per import (default 15, quick 5)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (12 if args.quick else 60)
    max_seconds = args.max_seconds or (15.0 if args.quick else 80.0)
    import_runs = args.import_runs or (5 if args.quick else 15)
    loop = asyncio.new_event_loop()
    try:
        with loopback_server() as url:
            scenarios = standard_scenarios(url, sync_contenders, async_contenders, quick=args.quick)
            scenarios.append(
                Scenario(
                    f"async mock waiting {NETWORK_WAITS} times",
                    True,
                    scenarios[1].calls,
                    async_contenders(url, WaitingMockTransport),
                )
            )
            try:
                done = measure_calls(scenarios, loop, rounds, 1, max_seconds)
            finally:
                close_scenarios(scenarios, loop)
    finally:
        loop.close()
    result = {
        "python": sys.version.split()[0],
        # (the compiled build, scripts/build-compiled, or plain Python: see docs/cost.md)
        "build": "compiled (mypyc)" if retrysafe.compiled.is_compiled() else "plain Python",
        "versions": {
            name: _version(name)
            for name in ("httpx", "retrysafe", "httpx-retries", "tenacity", "stamina")
        },
        "rounds": done,
        "calls": call_results(scenarios),
        "imports": import_times(import_runs),
        "missing": [peer for peer in PEERS if importlib.util.find_spec(peer) is None],
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_table(result)
    return 0


def _version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
