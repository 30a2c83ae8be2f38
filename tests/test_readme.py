"""The README's quick start and pytest example work when pasted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_block_after(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no python block after {heading!r}"
    return match.group(1)


def test_the_quick_start_runs_as_pasted() -> None:
    result = subprocess.run(
        [sys.executable, "-c", python_block_after("## Quick start")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0].startswith("200 3 ")
    assert lines[1:] == ["404 not_found False", "maybe unsafe_to_repeat"]


def test_the_pytest_example_passes_as_pasted(tmp_path: Path) -> None:
    example = tmp_path / "test_example.py"
    example.write_text(python_block_after("## The chaos server and the pytest plugin"))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(example)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert "1 passed" in result.stdout, result.stdout + result.stderr
