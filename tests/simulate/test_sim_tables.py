"""The tables ``retrysafe simulate`` prints: each figure under its own heading and column,
in the unit the heading names (percent, ms or s), read from results made by hand."""

from __future__ import annotations

from retrysafe.simulate import (
    BrownoutResult,
    BrownoutRow,
    ContentionResult,
    ContentionRow,
    ContentionSettings,
    LayersResult,
    LayersRow,
    OutageResult,
    OutageRow,
    render,
)
from retrysafe.simulate.outage import OutageWindow
from retrysafe.simulate.traffic import TrafficShape


def _section(lines: list[str], heading: str) -> list[str]:
    """The lines under ``heading``, up to the next blank line."""
    start = lines.index(heading) + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def test_the_brownout_table_shows_load_success_percent_and_refusals() -> None:
    result = BrownoutResult(
        TrafficShape(calls=200, rate=100.0),
        0,
        (0.0, 0.5),
        ("plain retrier", "defaults"),
        (
            BrownoutRow("plain retrier", 0.0, 200, 200, 200, 0, 0),
            BrownoutRow("defaults", 0.0, 200, 200, 200, 0, 0),
            BrownoutRow("plain retrier", 0.5, 200, 500, 150, 0, 0),
            BrownoutRow("defaults", 0.5, 200, 300, 120, 30, 2),
        ),
    )
    lines = render(result)
    load = "load amplification (attempts reaching the dependency per call)"
    assert [line.split() for line in _section(lines, load)] == [
        ["failure", "rate", "0%", "50%"],
        ["plain", "retrier", "1.00", "2.50"],
        ["defaults", "1.00", "1.50"],
    ]
    assert [line.split() for line in _section(lines, "success rate (% of calls)")][1:] == [
        ["plain", "retrier", "100.0", "75.0"],
        ["defaults", "100.0", "60.0"],
    ]
    refused = "calls refused without sending (breaker open)"
    assert [line.split() for line in _section(lines, refused)][1:] == [
        ["plain", "retrier", "0", "0"],
        ["defaults", "0", "30"],
    ]


def test_the_outage_table_puts_each_figure_under_its_heading() -> None:
    window = OutageWindow(duration=20.0, down_at=5.0, down_for=10.0, bucket=10.0)
    rows = (
        OutageRow("defaults", 1000, (70.0, 12.5), (50.0, 49.0), 0.25, 0.5, 1.0, 3.0, 0.8125, 3),
        OutageRow(
            "plain retrier", 1000, (180.0, 90.0), (50.0, 49.0), 4.0, None, 0.999, 0.0, 0.5, 0
        ),
    )
    result = OutageResult(TrafficShape(calls=None, until=20.0, rate=50.0), window, 0, rows)
    lines = render(result)
    timeline = _section(lines, "attempts per second reaching the dependency, per 10 s from")
    assert [line.split() for line in timeline] == [
        ["from", "(s)", "0", "10"],
        ["defaults", "70.0", "12.5"],
        ["plain", "retrier", "180.0", "90.0"],
        ["calls", "started", "50.0", "49.0"],
    ]
    header = next(line for line in lines if "attempts/call while down" in line)
    columns = [
        "attempts/call while down",
        "fails fast after",
        "failing call takes (p50)",
        "recovered after",
        "success",
        "breaker opened",
    ]
    assert [header.index(column) for column in columns] == sorted(
        header.index(column) for column in columns
    )
    defaults = next(line for line in lines if line.startswith("defaults ") and "%" in line)
    assert defaults.split() == [
        "defaults",
        "0.25",
        "500",
        "ms",
        "1.00",
        "s",
        "3.00",
        "s",
        "81.2%",
        "3",
    ]
    plain = next(line for line in lines if line.startswith("plain retrier ") and "%" in line)
    assert plain.split()[2:] == ["4.00", "never", "999", "ms", "0", "ms", "50.0%", "0"]


def test_the_layers_table_shows_calls_per_request_success_percent_and_times() -> None:
    result = LayersResult(
        (3, 3, 4), 1.0, "503", 5.0, 0, (LayersRow("guard only", 10, 20, 5, 0.25, 1.5),)
    )
    lines = render(result)
    assert lines[0].startswith("layers: 3 x 3 x 4 attempts (top layer first)")
    row = next(line for line in lines if line.startswith("guard only"))
    assert row.split() == ["guard", "only", "2.00", "50.0%", "250", "ms", "1.50", "s"]


def test_the_contention_table_shows_calls_then_completion_milliseconds() -> None:
    settings = ContentionSettings(clients=(10,), runs=2, strategies=("none", "full"))
    result = ContentionResult(
        settings, (ContentionRow(10, "none", 51.5, 382.6), ContentionRow(10, "full", 23.0, 250.4))
    )
    lines = render(result)
    calls = _section(lines, "mean calls (conditional writes) until every client has written")
    assert [line.split() for line in calls] == [["clients", "none", "full"], ["10", "51.5", "23.0"]]
    times = _section(lines, "mean completion time (ms) until the last client is done")
    assert [line.split() for line in times] == [["clients", "none", "full"], ["10", "383", "250"]]


def test_the_contention_table_of_your_settings_shows_how_many_gave_up() -> None:
    settings = ContentionSettings(clients=(10, 30), runs=2, strategies=("full",))
    rows = (
        ContentionRow(10, "full", 23.0, 250.4),
        ContentionRow(10, "yours", 18.5, 120.0, gave_up=2.5),
        ContentionRow(30, "full", 80.0, 700.0),
        ContentionRow(30, "yours", 40.0, 150.0, gave_up=12.0),
    )
    lines = render(ContentionResult(settings, rows))
    assert [line.split() for line in _section(lines, "yours: clients that gave up (mean)")] == [
        ["clients", "gave", "up"],
        ["10", "2.5"],
        ["30", "12.0"],
    ]
    assert "  yours         your policy and governor, through retrysafe's engine" in lines
