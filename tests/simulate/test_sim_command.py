"""``retrysafe simulate``: tables, JSON, your own settings, plots, and bad input."""

from __future__ import annotations

import errno
import importlib.util
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from retrysafe import simulate
from retrysafe.cli import main
from retrysafe.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from retrysafe.simulate import SettingsNotFound, check_plot_path, load_governor, load_policy

#: A plot path is checked once the plot extra is known to be there: without it, the
#: refusal names the extra (a checkout installed with '.[dev]' only, as on Python 3.10).
NEEDS_PLOT_EXTRA = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="the plot extra is not installed"
)


@pytest.fixture
def settings_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module of the user's own settings, importable as ``my_retry_settings``."""
    (tmp_path / "my_retry_settings.py").write_text(
        textwrap.dedent(
            """
            import retrysafe

            POLICY = retrysafe.RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.02)
            GOVERNOR = retrysafe.GovernorSettings.off()
            SHARED = retrysafe.Governor(retrysafe.GovernorSettings(breaker=None))
            NOT_A_POLICY = 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_retry_settings"
    sys.modules.pop("my_retry_settings", None)


def test_contention_json_from_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "contention", "--clients", "10,30", "--runs", "2", "--json"])
    assert code == EXIT_OK
    document = json.loads(capsys.readouterr().out)
    assert document["scenario"] == "contention"
    assert {row["strategy"] for row in document["results"]} == {
        "none",
        "exponential",
        "full",
        "equal",
        "decorrelated",
    }
    assert {row["clients"] for row in document["results"]} == {10, 30}
    assert all(
        set(row) == {"clients", "strategy", "calls", "completion_ms"} for row in document["results"]
    )


def test_contention_table_from_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "contention", "--clients", "10:30:20", "--runs", "1", "--workers", "1"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert "mean calls (conditional writes)" in out
    header = next(line for line in out.splitlines() if line.startswith("clients"))
    assert header.split() == ["clients", "none", "exponential", "full", "equal", "decorrelated"]
    rows = [line.split()[0] for line in out.splitlines() if line[:2] in ("10", "30")]
    assert rows == ["10", "30", "10", "30"]  # the calls table, then the time table


def test_brownout_with_your_settings(
    settings_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "simulate",
            "brownout",
            "--failure-rates",
            "0,100",
            "--calls",
            "50",
            "--policy",
            f"{settings_module}:POLICY",
            "--governor",
            f"{settings_module}:GOVERNOR",
            "--json",
            "--workers",
            "1",
        ]
    )
    assert code == EXIT_OK
    rows = json.loads(capsys.readouterr().out)["results"]
    yours = [row for row in rows if row["config"] == "yours"]
    assert [(row["failure_rate"], row["load"]) for row in yours] == [(0.0, 1.0), (1.0, 2.0)]


@pytest.mark.parametrize(
    "scenario",
    [
        ["outage", "--duration", "12", "--down-at", "2", "--down-for", "5"],
        ["layers", "--requests", "30"],
    ],
)
def test_outage_and_layers_print_tables(
    scenario: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *scenario, "--workers", "1"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "plain retrier" in out or "no guard, no deadline" in out
    assert "ran in" in out


def test_outage_in_buckets_that_floats_cannot_divide_exactly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 2.1 / 0.3 is 7.000000000000001: this used to end in a ZeroDivisionError traceback
    argv = ["outage", "--duration", "2.1", "--bucket", "0.3", "--down-at", "0.5"]
    assert main(["simulate", *argv, "--down-for", "1", "--workers", "1"]) == EXIT_OK
    header = next(line for line in capsys.readouterr().out.splitlines() if "from (s)" in line)
    assert header.split()[2:] == ["0", "0.3", "0.6", "0.9", "1.2", "1.5", "1.8"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate"], "name a scenario: contention, brownout, outage, layers"),
        (["simulate", "contention", "--clients", "ten"], "expected FIRST:LAST:STEP"),
        # (trial74: these said only "expected FIRST:LAST:STEP", not what was wrong)
        (["simulate", "contention", "--clients", "10:5:1"], "LAST (5) is under FIRST (10)"),
        (["simulate", "contention", "--clients", "10:50:0"], "STEP is 0, under 1"),
        (["simulate", "contention", "--runs", "0"], "runs must be a whole number from 1"),
        (["simulate", "contention", "--strategies", "full,fast"], "must be among none"),
        (
            ["simulate", "brownout", "--failure-rates", "0,150"],
            "expected a percentage from 0 to 100 (e.g. 50 for half), got '150'",
        ),
        (
            ["simulate", "brownout", "--failure-rates", "-5"],
            "from 0 to 100 (e.g. 50 for half), got '-5'",
        ),
        (["simulate", "brownout", "--failure-rates", "10,,20"], "separated by commas"),
        # the table finds a column by its rate: a second 50 % showed the first one's figures
        (
            ["simulate", "brownout", "--failure-rates", "10,50,50.0"],
            "expected each percentage once, got 50 twice in '10,50,50.0' (for another draw "
            "at the same rate, run again with another --seed)",
        ),
        (
            ["simulate", "layers", "--failure-rate", "150"],
            "from 0 to 100 (e.g. 50 for half), got '150'",
        ),
        (
            ["simulate", "layers", "--failure-rate", "nan"],
            "from 0 to 100 (e.g. 50 for half), got 'nan'",
        ),
        (["simulate", "outage", "--down-for", "100"], "must end within the run"),
        (
            ["simulate", "outage", "--down-at", "50", "--down-for", "20"],
            "--down-for must end within the run: --down-at + --down-for (70.0) > --duration (60.0)",
        ),
        # (a timeline of 600,000 columns took 520 MB; one of 200 million never ended)
        (["simulate", "outage", "--bucket", "0.0001"], "raise bucket to at least 0.06 s"),
        (["simulate", "outage", "--rate", "nan"], "--rate must be a number, got nan"),
        # a scenario's refusal names the flag, not the Python argument
        (["simulate", "brownout", "--calls", "0"], "simulate: --calls must be a whole number"),
        (["simulate", "contention", "--runs", "0"], "simulate: --runs must be a whole number"),
        (["simulate", "layers", "--deadline", "0"], "simulate: --deadline must be > 0, got 0.0"),
        (["simulate", "brownout", "--rate", "0"], "--rate must be > 0"),
        (["simulate", "layers", "--layers", "3xthree"], "e.g. 3x3x4"),
        (["simulate", "layers", "--fault", "fire"], "invalid choice"),
        (["simulate", "brownout", "--policy", "nowhere"], "must be given as module:NAME"),
        (["simulate", "brownout", "--policy", "no_such_module_x:P"], "cannot import"),
        (["simulate", "contention", "--workers", "0"], "--workers must be >= 1"),
        (
            ["simulate", "outage", "--processes", "0"],
            "simulate: --processes must be a whole number from 1 to 1000, got 0",
        ),
        (["simulate", "brownout", "--latency", "-1"], "--latency must be >= 0"),
        (["simulate", "contention", "--strategies", ","], "expected at least one strategy"),
        # a plot path is checked before the run, not after it
        pytest.param(
            ["simulate", "layers", "--plot", "/no/such/folder/x.png"],
            "no folder '/no/such/folder'",
            marks=NEEDS_PLOT_EXTRA,
        ),
        pytest.param(
            ["simulate", "layers", "--plot", "layers.txt"],
            "name a file ending in one of .png",
            marks=NEEDS_PLOT_EXTRA,
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_code_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (
            "POLICY = retrysafe.RetryPolicy(attempts=3\n",
            "line 3: SyntaxError: '(' was never closed",
        ),
        (
            "POLICY = retrysafe.RetryPolicy(attempts=0)\n",
            "line 3: ValueError: RetryPolicy.attempts must be >= 1, got 0",
        ),
        ("\nraise RuntimeError('boom')\n", "line 4: RuntimeError: boom"),
    ],
    ids=["syntax error", "bad value", "any exception"],
)
def test_settings_that_fail_to_load_are_one_line_naming_the_file_and_exit_2(
    source: str,
    problem: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = tmp_path / "broken_retry_settings.py"
    module.write_text("import retrysafe\n\n" + source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_retry_settings", raising=False)
    argv = ["simulate", "brownout", "--calls", "10", "--policy", "broken_retry_settings:POLICY"]
    assert main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.err == (
        f"retrysafe simulate: cannot load 'broken_retry_settings' for policy: {module}, {problem}\n"
    )
    assert captured.out == ""


def test_plot_without_matplotlib_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real_find_spec = importlib.util.find_spec

    def without_matplotlib(name: str, *args: object) -> object:
        return None if name == "matplotlib" else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_matplotlib)
    target = tmp_path / "layers.png"
    assert main(["simulate", "layers", "--plot", str(target)]) == EXIT_USAGE
    assert "pip install 'retrysafe[plot]'" in capsys.readouterr().err
    assert not target.exists()


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    target = tmp_path / "contention.png"
    argv = ["simulate", "contention", "--clients", "10,30", "--runs", "1", "--plot", str(target)]
    assert main(argv) == EXIT_OK
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(target) in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@NEEDS_PLOT_EXTRA
def test_an_unwritable_plot_path_is_refused_before_the_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # /proc exists and is a folder, yet no file can be made in it (not even by root)
    argv = ["simulate", "layers", "--requests", "5", "--workers", "1", "--plot", "/proc/x.png"]
    assert main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.err == (
        "retrysafe simulate: --plot: cannot write a plot to '/proc/x.png': "
        "No such file or directory\n"
    )
    assert captured.out == ""  # refused before the run, not after it


def test_checking_a_plot_path_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    check_plot_path(tmp_path / "new.png")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old.png").write_bytes(b"an earlier plot")
    check_plot_path(tmp_path / "old.png")
    assert (tmp_path / "old.png").read_bytes() == b"an earlier plot"


def test_a_plot_that_fails_to_save_after_the_run_keeps_the_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def disk_full(result: object, path: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(simulate, "require_plot_extra", lambda: None)
    monkeypatch.setattr(simulate, "plot", disk_full)
    target = str(tmp_path / "layers.png")
    argv = ["simulate", "layers", "--requests", "5", "--workers", "1", "--plot", target]
    assert main(argv) == EXIT_FAILED
    captured = capsys.readouterr()
    assert "no guard, no deadline" in captured.out  # the table was printed
    assert captured.err == (
        f"retrysafe simulate: --plot: cannot write {target!r}: No space left on device\n"
    )


def test_settings_are_read_from_module_and_name(settings_module: str) -> None:
    assert load_policy(f"{settings_module}:POLICY").attempts == 2
    assert load_governor(f"{settings_module}:GOVERNOR").budget is None
    assert load_governor(f"{settings_module}:SHARED").breaker is None  # a Governor's settings
    with pytest.raises(SettingsNotFound, match=r"is of type int, not a retrysafe\.RetryPolicy"):
        load_policy(f"{settings_module}:NOT_A_POLICY")
    with pytest.raises(SettingsNotFound, match="has no 'MISSING'"):
        load_governor(f"{settings_module}:MISSING")


def _job(seconds: float) -> float:
    if seconds < 0:
        raise RuntimeError("this job fails")
    import time

    time.sleep(seconds)
    return seconds


def test_a_failing_parallel_job_stops_the_rest_at_once() -> None:
    # (as Ctrl-C does: the workers are stopped, not waited for job after job)
    import time

    from retrysafe.simulate.parallel import run_jobs

    # Waiting for even one running job would take 20 s; the bound leaves room for starting
    # the workers, which a busy machine took 3 s for (with "forkserver": a fresh interpreter
    # each, where this process already runs a thread and cannot fork safely).
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="this job fails"):
        run_jobs(_job, [-1.0, 20.0, 20.0, 20.0, 20.0], workers=2)
    assert time.monotonic() - started < 10


def _dies(job: int) -> int:
    if job == 2:
        import os

        os._exit(1)  # (a worker killed: the OOM killer, a crash in a C extension)
    return job


def test_a_worker_that_dies_fails_the_run_instead_of_hanging_it() -> None:
    # (the submodule itself: concurrent.futures has it as an attribute only once
    # something imported it, which, under xdist, another test on the worker may not have)
    from concurrent.futures.process import BrokenProcessPool

    from retrysafe.simulate.parallel import run_jobs

    with pytest.raises(BrokenProcessPool):
        run_jobs(_dies, [1, 2, 3, 4], workers=2)


_MARK = "as imported"


def _mark(_: int) -> str:
    return _MARK


def test_with_another_thread_running_the_workers_start_fresh_not_forked() -> None:
    """A fork copies one thread of many, and a lock another thread holds stays held in
    the copy: with a second thread alive, no worker is a fork of this process (a fork
    would see the value set here after import)."""
    global _MARK
    from retrysafe.simulate.parallel import run_jobs

    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    _MARK = "set after import"
    try:
        assert run_jobs(_mark, [1, 2], workers=2) == ["as imported", "as imported"]
    finally:
        _MARK = "as imported"
        release.set()
        other.join()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is used on Linux only")
def test_a_process_with_one_thread_forks_its_workers() -> None:
    # (in a process of its own: pytest's may run threads of its own)
    script = textwrap.dedent(
        """
        import retrysafe.simulate.parallel as parallel
        parallel.MARK = "set after import"
        def mark(_):
            return getattr(parallel, "MARK", "as imported")
        if __name__ == "__main__":
            print(parallel.run_jobs(mark, [1, 2], workers=2))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "['set after import', 'set after import']"


def test_the_table_says_who_calls_and_how_fast_answers_come(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """trial99: a run's figures rest on how many processes share a governor and how long
    the dependency takes to answer; the header says both, and so does the JSON."""
    argv = ["simulate", "brownout", "--failure-rates", "50", "--calls", "50", "--workers", "1"]
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    assert "one client process (one governor: its budget, its breaker)" in out
    assert "answers take 20 ms on average (sd 5 ms)" in out
    assert main([*argv, "--processes", "4", "--latency", "0.05", "--json"]) == EXIT_OK
    document = json.loads(capsys.readouterr().out)
    assert (document["processes"], document["latency_s"]) == (4, 0.05)
    assert main([*argv, "--processes", "4", "--latency", "0.05"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "4 client processes, calls dealt in turn, each with a governor of its own" in out
    assert "answers take 50 ms on average (sd 12.5 ms)" in out


def test_rates_typed_as_fractions_run_as_typed_with_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--failure-rates 0.2,0.6`` (the Python functions take fractions) runs 0.2 % and
    0.6 %, as typed, and says how to type 20 % and 60 % (trial99: it ran silently)."""
    argv = ["simulate", "brownout", "--failure-rates", "0.2,0.6", "--calls", "20", "--json"]
    assert main([*argv, "--workers", "1"]) == EXIT_OK
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"][0]["failure_rate"] == pytest.approx(0.002)
    assert "--failure-rates takes percentages, so this runs 0.2 % and 0.6 %" in captured.err
    assert "type --failure-rates 20,60" in captured.err
    # (review95: a 0 or a 1 in the list hid the note; the docs' own [0.0, 0.5, 1.0])
    argv = ["simulate", "brownout", "--failure-rates", "0,0.5,1", "--calls", "20", "--json"]
    assert main([*argv, "--workers", "1"]) == EXIT_OK
    assert "type --failure-rates 0,50,100" in capsys.readouterr().err
    assert main(["simulate", "brownout", "--failure-rates", "0,20", "--calls", "20"]) == EXIT_OK
    assert capsys.readouterr().err == ""
    assert main(["simulate", "brownout", "--failure-rates", "0,1", "--calls", "20"]) == EXIT_OK
    assert capsys.readouterr().err == ""  # (0 % and 1 %: whole percentages, as typed)


def test_an_outage_with_no_call_or_no_failing_call_prints_a_dash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No call at all (rate 0.01/s over 20 s): no success rate to show, where it read
    0.0 %; no failing call: no time a failing call takes, where it read "never"."""
    argv = ["simulate", "outage", "--duration", "20", "--down-for", "5", "--workers", "1"]
    assert main([*argv, "--rate", "0.01"]) == EXIT_OK
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    defaults = next(row for row in rows if row[:1] == ["defaults"] and "ms" in " ".join(row))
    assert "0.0%" not in defaults
    assert defaults[-2] == "-"
    assert main([*argv, "--rate", "0.01", "--json"]) == EXIT_OK
    results = json.loads(capsys.readouterr().out)["results"]
    assert [row["success_rate"] for row in results] == [None, None, None]
    assert main([*argv, "--down-for", "0"]) == EXIT_OK
    out = capsys.readouterr().out
    lines = out.splitlines()
    plain = next(line for line in lines if line.startswith("plain retrier") and "%" in line)
    assert " - " in plain
    assert "never" in plain  # (it never failed fast: that column keeps its word)
