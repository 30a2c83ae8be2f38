"""``retrysafe demo``: every case behaves as expected, end to end, in-process and as the
installed console script; a case that misbehaves fails; the rules do what they say."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe.chaos.content_endpoints import REFUSED_SITE_ERROR
from retrysafe.cli import main
from retrysafe.cli.demo import CASES, DemoCase, error_in_body, run_demo, website_refused
from retrysafe.cli.demo_checks import Expected, ServerSaw
from retrysafe.cli.demo_output import render_report
from retrysafe.cli.terminal import Style

CONSOLE_SCRIPT = Path(sys.executable).parent / "retrysafe"


@dataclasses.dataclass(frozen=True)
class DemoRun:
    code: int
    out: str
    err: str
    wall_time: float


@pytest.fixture(scope="module")
def demo_json() -> DemoRun:
    """One in-process ``retrysafe demo --json`` run, shared by the tests that read it."""
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["demo", "--json"])
    return DemoRun(code, out.getvalue(), err.getvalue(), time.monotonic() - started)


def test_the_demo_exits_0_with_every_case_as_expected(demo_json: DemoRun) -> None:
    report = json.loads(demo_json.out)
    assert demo_json.code == 0
    assert report["ok"] is True
    assert [case["name"] for case in report["cases"]] == [case.name for case in CASES]
    not_ok = [case for case in report["cases"] if not case["ok"]]
    assert not_ok == []


def test_the_demo_runs_in_under_15_seconds(demo_json: DemoRun) -> None:
    assert demo_json.wall_time < 15


def test_each_json_case_states_expected_and_happened(demo_json: DemoRun) -> None:
    for case in json.loads(demo_json.out)["cases"]:
        assert set(case) >= {"name", "expected", "happened", "ok"}
        expected, happened = case["expected"], case["happened"]
        assert (expected["outcome"], expected["attempts"], expected["retried"]) == (
            happened["outcome"],
            happened["attempts"],
            happened["retried"],
        )


def test_the_lost_post_reply_is_applied_once_under_one_key(demo_json: DemoRun) -> None:
    cases = {case["name"]: case for case in json.loads(demo_json.out)["cases"]}
    checks = cases["POST reply lost after commit"]["happened"]["checks"]
    assert [(check["check"], check["ok"]) for check in checks] == [
        ("same Idempotency-Key on every attempt", True),
        ("ledger of 'orders' shows 1 effect(s)", True),
        ("server received 2 request(s)", True),
    ]


def test_the_timed_out_post_is_sent_once_and_maybe_processed(demo_json: DemoRun) -> None:
    cases = {case["name"]: case for case in json.loads(demo_json.out)["cases"]}
    happened = cases["POST times out (1 s)"]["happened"]
    assert (happened["outcome"], happened["sent"], happened["attempts"]) == (
        "TransportError",
        "maybe",
        1,
    )


def test_progress_goes_to_stderr_one_line_per_case_when_not_a_terminal(
    demo_json: DemoRun,
) -> None:
    finished = [line for line in demo_json.err.splitlines() if line.endswith(": as expected")]
    assert len(finished) == len(CASES)


def test_the_installed_console_script_runs_the_demo() -> None:
    completed = subprocess.run(
        [str(CONSOLE_SCRIPT), "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert all(case["ok"] for case in report["cases"])
    assert "Traceback" not in completed.stderr


def test_a_proxy_in_the_environment_does_not_take_the_demos_requests_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A corporate or CI machine's proxy (here a closed port) cannot reach the demo's own
    # loopback server: the demo must not send its requests there.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    by_name = {case.name: case for case in CASES}
    report = run_demo([by_name["no API key"], by_name["out of credits (429)"]])
    assert [result.ok for result in report.results] == [True, True]


# -- judging and rendering, on a few fast cases ---------------------------------------------------


@pytest.fixture(scope="module")
def quick_report() -> Any:
    """Two fast cases that behave and one whose expectation is deliberately wrong."""
    wrong = DemoCase(
        name="404 wrongly expected to succeed",
        shows="a case whose expectation does not hold",
        method="GET",
        path="/status/404",
        expected=Expected(None, attempts=1, checks=(ServerSaw(3),)),
    )
    by_name = {case.name: case for case in CASES}
    return run_demo([by_name["no API key"], by_name["out of credits (429)"], wrong])


def test_a_case_that_misbehaves_fails_with_the_differences(quick_report: Any) -> None:
    ok = [result.ok for result in quick_report.results]
    assert ok == [True, True, False]
    assert quick_report.ok is False
    assert quick_report.results[2].mismatches == (
        "outcome: expected success, happened ClientError",
        "check failed: server received 3 request(s) (1 request(s))",
    )


def test_the_table_has_a_row_per_case_and_a_verdict(quick_report: Any) -> None:
    lines = render_report(quick_report, Style(enabled=False), io.StringIO())
    text = "\n".join(lines)
    assert "\x1b[" not in text
    header = next(line for line in lines if "case" in line and "attempts" in line)
    for column in ("status", "error", "retried?", "attempts", "time"):
        assert column in header
    assert any("no API key" in line and "401" in line and "ClientError" in line for line in lines)
    assert "404 wrongly expected to succeed: not as expected" in text
    assert lines[-1] == f"2/3 cases behaved as expected in {lines[-1].split(' in ')[1]}"


def test_a_failing_case_makes_the_demo_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = dataclasses.replace(CASES[0], expected=Expected(retrysafe.ServerError, attempts=1))
    monkeypatch.setattr("retrysafe.cli.demo.CASES", (wrong,))
    assert main(["demo", "--no-color"]) == 1
    assert "0/1 cases behaved as expected" in capsys.readouterr().out


# -- the rules the demo shows users --------------------------------------------------------------


def response(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, json=body, request=httpx.Request("GET", "http://127.0.0.1/"))


def test_website_refused_makes_a_site_refusal_final() -> None:
    verdict = website_refused(response(503, {"error": REFUSED_SITE_ERROR}))
    assert verdict == retrysafe.Verdict.permanent("target_site_refused")


def test_website_refused_leaves_other_503s_to_the_defaults() -> None:
    assert website_refused(response(503, {"error": "Service Unavailable"})) is None
    assert website_refused(response(502, {"error": REFUSED_SITE_ERROR})) is None


def test_error_in_body_catches_a_200_that_says_error() -> None:
    verdict = error_in_body(response(200, {"status": "error", "error": "nope"}))
    assert verdict == retrysafe.Verdict.permanent("error_in_body")


def test_error_in_body_ignores_other_bodies() -> None:
    assert error_in_body(response(200, {"status": "ok"})) is None
    assert error_in_body(response(200, ["status", "error"])) is None
    assert error_in_body(response(500, {"status": "error"})) is None
    text = httpx.Response(200, text="status: error", request=httpx.Request("GET", "http://x/"))
    assert error_in_body(text) is None
