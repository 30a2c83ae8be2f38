"""What ``import retrysafe`` adds to ``import httpx`` where a user has it: in a fresh
virtual environment holding only a retrysafe wheel and its dependencies.

``overhead.py`` times the import in the environment it runs in. A checkout's
environment also holds httpx's command line (installed there for retrysafe's own), which
``import httpx`` loads there and which loads standard modules retrysafe would otherwise
load itself (``uuid`` was one), so it can hide part of retrysafe's cost. This makes one
virtual environment per wheel, installs the wheel with its dependencies only, and times
fresh interpreters running ``import httpx`` and ``import httpx, retrysafe`` in turns, in
every environment, interleaved, reporting the median of each and what retrysafe adds, in
wall time and in the CPU time each interpreter used (its own: other processes' load moves
it far less than the wall time, which on one machine and one day has read anywhere from
+9 to +30 ms). Each
statement also runs once more ending with ``os._exit(0)``, which leaves without the
interpreter's clean-up, so the report says how much of what retrysafe adds is that exit
(the interpreter tears down every module and object it holds: the compiled build's
modules cost more there than plain Python's).

    .venv/bin/python benchmarks/import_in_venv.py           # this checkout's plain wheel
    scripts/build-compiled /tmp/compiled                   # prints the compiled wheel
    .venv/bin/python benchmarks/import_in_venv.py --plain --wheel /tmp/compiled/retrysafe-*.whl

Each environment is made under a temporary directory and removed at the end. Installing
needs the package index pip is set up for.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATEMENTS = {
    "httpx": "import httpx",
    "httpx + retrysafe": "import httpx, retrysafe",
    # (the same, leaving without the interpreter's clean-up: the difference is its exit)
    "httpx, no exit": "import httpx, os; os._exit(0)",
    "httpx + retrysafe, no exit": "import httpx, retrysafe, os; os._exit(0)",
}


def plain_wheel(into: Path) -> Path:
    """Build this checkout's plain (pure Python) wheel into ``into``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(into), str(ROOT)],
        check=True,
    )
    return next(into.glob("retrysafe-*-none-any.whl"))


def environment_with(wheel: Path, where: Path) -> Path:
    """A fresh virtual environment at ``where`` holding ``wheel`` and its dependencies;
    its Python."""
    venv.EnvBuilder(with_pip=True).create(where)
    python = where / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], check=True)
    return python


def once(python: Path, statement: str, environment: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user and system), in ms, of a fresh ``python -c
    statement``. The CPU time is the interpreter's own: another process taking the CPU
    meanwhile lengthens the wall time, not it."""
    used_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [str(python), "-c", statement], env=environment, check=True, cwd=tempfile.gettempdir()
    )
    wall = (time.perf_counter() - started) * 1000
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (used.ru_utime - used_before.ru_utime) + (used.ru_stime - used_before.ru_stime)
    return wall, cpu * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wheel", action="append", type=Path, default=[], help="a retrysafe wheel (repeatable)"
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="also this checkout's plain wheel (the default with no --wheel)",
    )
    parser.add_argument(
        "--runs", type=int, default=30, help="fresh interpreters per statement and environment"
    )
    arguments = parser.parse_args()
    # (no bytecode-writing switch or extra import path from the caller's shell)
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "VIRTUAL_ENV")
    }
    with tempfile.TemporaryDirectory(prefix="retrysafe-import-") as scratch:
        wheels = list(arguments.wheel)
        if arguments.plain or not wheels:
            wheels.insert(0, plain_wheel(Path(scratch) / "wheel"))
        pythons = {}
        for number, wheel in enumerate(wheels):
            python = environment_with(wheel, Path(scratch) / f"venv{number}")
            built = subprocess.run(
                [str(python), "-c", "import retrysafe.compiled as c; print(c.is_compiled())"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            # (two wheels of one name, from two builds, are told apart by their paths)
            named = wheel.name if [w.name for w in wheels].count(wheel.name) == 1 else wheel
            pythons[f"{named} ({'compiled' if built == 'True' else 'plain'})"] = python
        runs = [(name, label) for name in pythons for label in STATEMENTS]
        for name, label in runs:  # writes the bytecode caches, warms the file cache
            once(pythons[name], STATEMENTS[label], environment)
        times: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
        cpu_times: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
        shuffle = random.Random(7)
        for _ in range(arguments.runs):
            shuffle.shuffle(runs)
            for name, label in runs:
                wall, cpu = once(pythons[name], STATEMENTS[label], environment)
                times[(name, label)].append(wall)
                cpu_times[(name, label)].append(cpu)
    print(
        f"Import in fresh virtual environments, median of {arguments.runs} fresh interpreters each"
    )
    for name in pythons:
        bare, both, bare_no_exit, both_no_exit = (
            statistics.median(times[(name, label)]) for label in STATEMENTS
        )
        bare_cpu, both_cpu = (
            statistics.median(cpu_times[(name, label)]) for label in list(STATEMENTS)[:2]
        )
        exit_added = (both - both_no_exit) - (bare - bare_no_exit)
        print(
            f"  {name}: import httpx {bare:.1f} ms, httpx + retrysafe {both:.1f} ms, "
            f"added {both - bare:+.1f} ms (of which the interpreter's exit {exit_added:+.1f}); "
            f"CPU time {bare_cpu:.1f} and {both_cpu:.1f} ms, added {both_cpu - bare_cpu:+.1f} ms"
        )


if __name__ == "__main__":
    main()
