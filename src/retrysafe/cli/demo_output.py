"""Showing the demo: live progress while it runs, then a table or JSON of the results.

Nothing here decides whether a case passed; it renders a :class:`DemoReport` that
:func:`~retrysafe.cli.demo.run_demo` has already judged.
"""

from __future__ import annotations

from typing import Any, TextIO

from retrysafe import RetryEvent
from retrysafe.cli.demo import CaseResult, DemoCase, DemoReport
from retrysafe.cli.demo_checks import Happened
from retrysafe.cli.terminal import Cell, Spinner, Style, can_encode, render_table

__all__ = ["LiveProgress", "PlainProgress", "render_report", "report_as_json"]

_NONE = "-"


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _retry_line(event: RetryEvent) -> str:
    got = f"HTTP {event.status} {event.outcome}" if event.status is not None else event.outcome
    return f"attempt {event.attempt} got {got}, retrying in {_seconds(event.wait)}"


class LiveProgress:
    """A spinner on a terminal naming the running case and any wait it is in."""

    def __init__(self, stream: TextIO) -> None:
        self._spinner = Spinner(stream)
        self._current = ""

    def __enter__(self) -> LiveProgress:
        self._spinner.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._spinner.stop()

    def case_started(self, number: int, total: int, case: DemoCase) -> None:
        self._current = f"[{number}/{total}] running {case.name}..."
        self._spinner.update(self._current)

    def retrying(self, case: DemoCase, event: RetryEvent) -> None:
        self._spinner.update(f"{self._current} {_retry_line(event)}")

    def case_finished(self, number: int, total: int, result: CaseResult) -> None:
        """Nothing to add: the table follows."""


class PlainProgress:
    """One line per finished case (and per retry), for logs and pipes."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stream.flush()

    def case_started(self, number: int, total: int, case: DemoCase) -> None:
        self._write(f"[{number}/{total}] running {case.name}...")

    def retrying(self, case: DemoCase, event: RetryEvent) -> None:
        self._write(f"    {_retry_line(event)}")

    def case_finished(self, number: int, total: int, result: CaseResult) -> None:
        verdict = "as expected" if result.ok else "NOT as expected"
        self._write(f"[{number}/{total}] {result.case.name}: {verdict}")

    def _write(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()


# -- the table -------------------------------------------------------------------------------

_HEADER = ("", "case", "status", "error", "reason", "retried?", "attempts", "time")


def _retried(happened: Happened) -> str:
    if not happened.retried:
        return "no"
    got = ", ".join(happened.retried_after)
    return f"yes: {got}, waited {_seconds(sum(happened.waits))}"


def _row(result: CaseResult, marks: tuple[str, str]) -> list[Cell]:
    happened = result.happened
    return [
        Cell(marks[0], "green") if result.ok else Cell(marks[1], "red"),
        Cell(result.case.name),
        Cell(_NONE if happened.status is None else str(happened.status)),
        Cell(happened.error or _NONE, "" if happened.error else "dim"),
        Cell(_NONE if happened.error is None else happened.reason, "dim"),
        Cell(_retried(happened)),
        Cell(str(happened.attempts)),
        Cell(_seconds(happened.elapsed)),
    ]


def render_report(report: DemoReport, style: Style, stream: TextIO) -> list[str]:
    """The results as lines: a table, any mismatches, and a one-line verdict."""
    marks = ("✓", "✗") if can_encode(stream, "✓✗") else ("ok", "XX")
    lines = [
        style.paint("retrysafe demo", "bold")
        + f": {len(report.results)} failures an API client meets, on a local chaos server"
        f" ({report.server_url})",
        "",
    ]
    lines += render_table(_HEADER, [_row(result, marks) for result in report.results], style)
    failed = [result for result in report.results if not result.ok]
    for result in failed:
        lines.append("")
        lines.append(style.paint(f"{result.case.name}: not as expected", "red"))
        lines.extend(f"  {mismatch}" for mismatch in result.mismatches)
        if result.happened.message:
            lines.append(f"  error: {result.happened.message}")
    passed = len(report.results) - len(failed)
    summary = (
        f"{passed}/{len(report.results)} cases behaved as expected in {_seconds(report.elapsed)}."
    )
    lines += ["", style.paint(summary, "red" if failed else "green")]
    return lines


# -- JSON -------------------------------------------------------------------------------------


def _expected_json(result: CaseResult) -> dict[str, Any]:
    expected = result.case.expected
    return {
        "outcome": expected.outcome,
        "retried": expected.retried,
        "attempts": expected.attempts,
        "reason": expected.reason,
        "sent": expected.sent,
        "checks": [check.describe() for check in expected.checks],
    }


def _happened_json(result: CaseResult) -> dict[str, Any]:
    happened = result.happened
    return {
        "outcome": happened.outcome,
        "status": happened.status,
        "reason": happened.reason,
        "retried": happened.retried,
        "attempts": happened.attempts,
        "retried_after": list(happened.retried_after),
        "waits": [round(wait, 4) for wait in happened.waits],
        "elapsed": round(happened.elapsed, 4),
        "sent": happened.sent,
        "retry_after": happened.retry_after,
        "idempotency_key": happened.idempotency_key,
        "message": happened.message,
        "checks": [
            {"check": check.check, "ok": check.ok, "seen": check.seen} for check in result.checks
        ],
    }


def report_as_json(report: DemoReport) -> dict[str, Any]:
    """The results as JSON-ready data: per case its name, expected, happened and ok."""
    return {
        "ok": report.ok,
        "elapsed": round(report.elapsed, 4),
        "server": report.server_url,
        "cases": [
            {
                "name": result.case.name,
                "shows": result.case.shows,
                "request": {"method": result.case.method, "url": result.url},
                "expected": _expected_json(result),
                "happened": _happened_json(result),
                "ok": result.ok,
                "mismatches": list(result.mismatches),
            }
            for result in report.results
        ],
    }
