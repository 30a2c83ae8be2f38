"""Plain-text tables of the scenarios' results (what the command prints without --json)."""

from __future__ import annotations

from collections.abc import Sequence

from retrysafe.simulate.brownout import BrownoutResult
from retrysafe.simulate.contention import ContentionResult
from retrysafe.simulate.formulas import FORMULA_LABELS
from retrysafe.simulate.layers import LayersResult
from retrysafe.simulate.outage import OutageResult
from retrysafe.simulate.traffic import TrafficShape

__all__ = [
    "SimulationResult",
    "brownout_table",
    "contention_table",
    "layers_table",
    "outage_table",
    "render",
]

#: What any scenario returns.
SimulationResult = ContentionResult | BrownoutResult | OutageResult | LayersResult


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell: the first left-aligned, the rest right."""
    widths = [max(len(row[index]) for row in [header, *rows]) for index in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.ljust(width) if index == 0 else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _seconds(value: float | None) -> str:
    if value is None:
        return "never"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s"


def _clients_and_answers(shape: TrafficShape) -> str:
    """Who calls and how fast the dependency answers: what a run's figures rest on."""
    clients = (
        "one client process (one governor: its budget, its breaker)"
        if shape.processes == 1
        else f"{shape.processes} client processes, calls dealt in turn, each with a governor "
        "of its own (not shared through a fleet)"
    )
    return (
        f"{clients}; answers take {shape.latency * 1000:g} ms on average "
        f"(sd {shape.latency_sd * 1000:g} ms)"
    )


def contention_table(result: ContentionResult) -> list[str]:
    """Mean conditional writes and mean completion time, per clients and strategy."""
    settings = result.settings
    names = list(dict.fromkeys(row.strategy for row in result.rows))
    lines = [
        f"contention: N clients contend for one row (read, then conditional write); "
        f"{settings.runs} runs per cell, seed {settings.seed}",
        f"message latency |Normal({settings.latency * 1000:g} ms, sd "
        f"{settings.latency_sd * 1000:g} ms)|, backoff base {settings.backoff_base * 1000:g} ms, "
        f"cap {settings.backoff_cap:g} s",
        "",
        "mean calls (conditional writes) until every client has written",
    ]
    table = [
        [str(count)] + [f"{result.row(count, name).calls:.1f}" for name in names]
        for count in settings.clients
    ]
    lines += _grid(["clients", *names], table)
    lines += ["", "mean completion time (ms) until the last client is done"]
    table = [
        [str(count)] + [f"{result.row(count, name).completion_ms:.0f}" for name in names]
        for count in settings.clients
    ]
    lines += _grid(["clients", *names], table)
    if "yours" in names:
        lines += ["", "yours: clients that gave up (mean)"]
        lines += _grid(
            ["clients", "gave up"],
            [
                [str(count), f"{result.row(count, 'yours').gave_up:.1f}"]
                for count in settings.clients
            ],
        )
    lines += ["", "strategies (c = min(cap, base * 2 ** retries so far)):"]
    for name in names:
        label = FORMULA_LABELS.get(name)  # type: ignore[call-overload]
        if name == "yours":
            label = "your policy and governor, through retrysafe's engine"
        lines.append(f"  {name:<13} {label}")
    return lines


def brownout_table(result: BrownoutResult) -> list[str]:
    """Load amplification and success rate per configuration and failure rate."""
    shape = result.shape
    rates = result.failure_rates
    header = ["failure rate", *[f"{rate * 100:g}%" for rate in rates]]
    lines = [
        f"brownout: {shape.calls} calls per failure rate at {shape.rate:g}/s (Poisson), "
        f"each attempt failing independently ({shape.fault}); RetryPolicy() everywhere "
        f"unless yours; seed {result.seed}",
        _clients_and_answers(shape),
        "",
        "load amplification (attempts reaching the dependency per call)",
    ]
    lines += _grid(
        header,
        [
            [config, *[f"{result.row(config, rate).load:.2f}" for rate in rates]]
            for config in result.configs
        ],
    )
    lines += ["", "success rate (% of calls)"]
    lines += _grid(
        header,
        [
            [config, *[f"{result.row(config, rate).success_rate * 100:.1f}" for rate in rates]]
            for config in result.configs
        ],
    )
    lines += ["", "calls refused without sending (breaker open)"]
    lines += _grid(
        header,
        [
            [config, *[str(result.row(config, rate).refused_unsent) for rate in rates]]
            for config in result.configs
        ],
    )
    return lines


def outage_table(result: OutageResult) -> list[str]:
    """Load over time, and how each configuration failed and recovered."""
    window = result.window
    shape = result.shape
    starts = result.bucket_starts()
    lines = [
        f"outage: calls at {shape.rate:g}/s (Poisson) for {window.duration:g} s; the dependency "
        f"fails every attempt ({shape.fault}) from {window.down_at:g} s to {window.up_at:g} s; "
        f"seed {result.seed}",
        _clients_and_answers(shape),
        "",
        f"attempts per second reaching the dependency, per {window.bucket:g} s from",
    ]
    header = ["from (s)", *[f"{start:g}" for start in starts]]
    rows = [[row.config, *[f"{value:.1f}" for value in row.load_per_s]] for row in result.rows]
    if result.rows:
        rows.append(["calls started", *[f"{value:.1f}" for value in result.rows[0].offered_per_s]])
    lines += _grid(header, rows)
    lines += [""]
    lines += _grid(
        [
            "",
            "attempts/call while down",
            "fails fast after",
            "failing call takes (p50)",
            "recovered after",
            "success",
            "breaker opened",
        ],
        [
            [
                row.config,
                f"{row.attempts_per_call_down:.2f}",
                _seconds(row.fail_fast_after),
                "-" if row.failure_p50 is None else _seconds(row.failure_p50),
                _seconds(row.recover_after),
                "-" if row.success_rate is None else f"{row.success_rate * 100:.1f}%",
                str(row.breaker_opened),
            ]
            for row in result.rows
        ],
    )
    lines += [
        "",
        "fails fast after: from the outage's start to the first call refused without sending;",
        "recovered after: from the outage's end until every call started later succeeded.",
    ]
    return lines


def layers_table(result: LayersResult) -> list[str]:
    """Calls reaching the dependency per user request, per configuration."""
    stack = " x ".join(str(count) for count in result.attempts)
    lines = [
        f"layers: {stack} attempts (top layer first); the dependency fails "
        f"{result.failure_rate * 100:g}% of attempts ({result.fault}); user deadline "
        f"{result.user_deadline:g} s where deadlines propagate; seed {result.seed}",
        "",
    ]
    lines += _grid(
        ["", "calls at the bottom per request", "success", "mean time", "slowest"],
        [
            [
                row.config,
                f"{row.calls_per_request:.2f}",
                f"{row.success_rate * 100:.1f}%",
                _seconds(row.mean_seconds),
                _seconds(row.max_seconds),
            ]
            for row in result.rows
        ],
    )
    return lines


def render(result: SimulationResult) -> list[str]:
    """The table for any scenario's result."""
    if isinstance(result, ContentionResult):
        return contention_table(result)
    if isinstance(result, BrownoutResult):
        return brownout_table(result)
    if isinstance(result, OutageResult):
        return outage_table(result)
    return layers_table(result)
