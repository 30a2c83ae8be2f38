"""What telemetry costs per successful call: off, and each integration on.

Contenders, each with its own client (the harness of ``benchmarks/overhead.py``:
interleaved rounds in a fresh random order, medians over rounds, "added" is the
median over rounds of the difference to bare httpx in the same round):

* ``httpx``: a bare ``httpx.Client`` / ``httpx.AsyncClient``, the baseline;
* ``retrysafe, telemetry off``: ``retrysafe.Client`` with no hooks (the default);
* ``+ OpenTelemetry, no SDK``: ``hooks=[OpenTelemetry()]`` with no SDK configured (the
  API's no-op tracer and meter: what a library user pays before choosing an SDK);
* ``+ OpenTelemetry, SDK``: the same with the SDK's ``TracerProvider`` (spans recorded,
  handed to a processor that drops them) and ``MeterProvider`` (metrics aggregated);
* ``+ Prometheus``: ``hooks=[PrometheusMetrics(registry=CollectorRegistry())]``.

Sync and async, on ``httpx.MockTransport`` (no I/O: the layers' own cost) and on
loopback (the minimal keep-alive server of ``overhead.py`` in a child process).

Batches are timed with this thread's CPU time (``time.thread_time_ns``) by default, not
the wall clock: on a shared machine, time spent preempted by other processes lands on
whichever contender was running and swamps differences of a few microseconds. (On
loopback that leaves out the time waiting for the server, the same for every
contender, so "added" is still the layer's cost.) ``--wall`` times with
``time.perf_counter_ns`` as ``overhead.py`` does.

    .venv/bin/python benchmarks/telemetry_overhead.py [--quick] [--wall] [--json] [--rounds N]

Needs the dev extras (opentelemetry-sdk, prometheus-client). Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from overhead import (
    Contender,
    call_results,
    close_scenarios,
    loopback_server,
    measure_calls,
    standard_scenarios,
)
from prometheus_client import CollectorRegistry

import retrysafe
from retrysafe.observe import EventHook
from retrysafe.telemetry.otel import OpenTelemetry
from retrysafe.telemetry.prometheus import PrometheusMetrics


class _Dropping(SpanProcessor):
    """Takes every ended span and keeps none (an exporter's cost is not retrysafe's)."""

    def on_end(self, span: ReadableSpan) -> None:
        return None


def _sdk_hook() -> OpenTelemetry:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(_Dropping())
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return OpenTelemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)


#: (name, hooks maker) of each retrysafe contender.
VARIANTS: list[tuple[str, Callable[[], list[EventHook]]]] = [
    ("retrysafe, telemetry off", list),
    ("+ OpenTelemetry, no SDK", lambda: [OpenTelemetry()]),
    ("+ OpenTelemetry, SDK", lambda: [_sdk_hook()]),
    ("+ Prometheus", lambda: [PrometheusMetrics(registry=CollectorRegistry())]),
]


def sync_contenders(
    url: str, transport: Callable[[], httpx.BaseTransport | None]
) -> list[Contender]:
    def base() -> httpx.BaseTransport:
        made = transport()
        return made if made is not None else httpx.HTTPTransport()

    def plain(client: httpx.Client, name: str) -> Contender:
        return Contender(name, lambda: client.get(url), client.close)

    made = [plain(httpx.Client(transport=base()), "httpx")]
    for name, hooks in VARIANTS:
        made.append(plain(retrysafe.Client(transport=base(), hooks=hooks()), name))
    return made


def async_contenders(
    url: str, transport: Callable[[], httpx.AsyncBaseTransport | None]
) -> list[Contender]:
    def base() -> httpx.AsyncBaseTransport:
        made = transport()
        return made if made is not None else httpx.AsyncHTTPTransport()

    def plain(client: httpx.AsyncClient, name: str) -> Contender:
        return Contender(name, lambda: client.get(url), client.aclose)

    made = [plain(httpx.AsyncClient(transport=base()), "httpx")]
    for name, hooks in VARIANTS:
        made.append(plain(retrysafe.AsyncClient(transport=base(), hooks=hooks()), name))
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a small run (~15 s)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 40, quick 10)")
    parser.add_argument("--max-seconds", type=float, help="stop after this long (default 60)")
    parser.add_argument("--wall", action="store_true", help="time with the wall clock")
    args = parser.parse_args(argv)
    clock = time.perf_counter_ns if args.wall else time.thread_time_ns
    rounds = args.rounds or (10 if args.quick else 40)
    max_seconds = args.max_seconds or (15.0 if args.quick else 60.0)
    loop = asyncio.new_event_loop()
    try:
        with loopback_server() as url:
            scenarios = standard_scenarios(url, sync_contenders, async_contenders, quick=args.quick)
            try:
                done = measure_calls(scenarios, loop, rounds, 1, max_seconds, clock)
            finally:
                close_scenarios(scenarios, loop)
    finally:
        loop.close()
    rows: list[dict[str, Any]] = call_results(scenarios)
    if args.json:
        json.dump({"rounds": done, "wall": args.wall, "calls": rows}, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"Per successful call ({'wall clock' if args.wall else 'thread CPU time'}): median of "
        f"{done} interleaved rounds; added = median over rounds of (contender - bare httpx) "
        "in the same round."
    )
    scenario_name = None
    for row in rows:
        if row["scenario"] != scenario_name:
            scenario_name = row["scenario"]
            print(f"\n{scenario_name} ({row['calls_per_round']} calls per batch)")
            print(f"  {'contender':30} {'µs/call':>9} {'added µs':>9} {'x bare':>7}")
        print(
            f"  {row['contender']:30} {row['us_per_call']:9.1f} "
            f"{row['added_us']:+9.1f} {row['ratio']:7.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
