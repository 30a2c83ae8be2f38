"""The release's configuration holds together (docs/releasing.md).

The release workflow runs only on a tag, on machines this suite never sees, so what
can be checked here is checked here: every supported Python gets a compiled wheel,
each wheel is tested in a way that fails if it came out plain, and the workflow's
jobs hand each other the files they name. ``scripts/build-release`` runs the same
table's build and tests on one machine.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # (tomli is tomllib before 3.11)
        import tomli as tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _cibuildwheel() -> dict[str, Any]:
    table: dict[str, Any] = _pyproject()["tool"]["cibuildwheel"]
    return table


def test_every_supported_cpython_gets_a_compiled_wheel() -> None:
    oldest = re.fullmatch(r">=3\.(\d+)", _pyproject()["project"]["requires-python"])
    assert oldest is not None
    minors = sorted(
        int(m.group(1))
        for m in (re.fullmatch(r"cp3(\d+)-\*", s) for s in _cibuildwheel()["build"])
        if m is not None
    )
    assert len(minors) == len(_cibuildwheel()["build"]), "every selector is cp3NN-*"
    assert minors[0] == int(oldest.group(1))
    assert minors == list(range(minors[0], minors[-1] + 1)), "no Python left out between"
    assert minors[-1] >= sys.version_info.minor  # (at least the Python running this)


def test_each_supported_python_is_named_in_the_classifiers() -> None:
    project = _pyproject()["project"]
    named = sorted(
        int(m.group(1))
        for m in (
            re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c)
            for c in project["classifiers"]
        )
        if m is not None
    )
    built = sorted(int(s[3:-2]) for s in _cibuildwheel()["build"])
    assert named == built


def test_the_version_is_one_in_the_package_and_its_metadata() -> None:
    import retrysafe

    assert retrysafe.__version__ == _pyproject()["project"]["version"]


def test_each_wheel_is_tested_so_that_a_plain_one_fails() -> None:
    table = _cibuildwheel()
    assert table["environment"] == {"HATCH_BUILD_HOOK_ENABLE_MYPYC": "1"}
    assert table["test-environment"] == {"RETRYSAFE_EXPECT_COMPILED": "1"}
    assert "@tests/compiled_build_tests.txt" in table["test-command"].split()
    # The tests run from a copy of these, against the installed wheel, and read pyproject.toml.
    assert set(table["test-sources"]) == {"tests", "pyproject.toml"}
    listed = (ROOT / "tests" / "compiled_build_tests.txt").read_text().split()
    assert "tests/test_compiled_build.py" in listed  # (fails on a wheel that is not compiled)
    assert [path for path in listed if not (ROOT / path).exists()] == []
    # CI's compiled run (scripts/test) runs the same list.
    assert "@tests/compiled_build_tests.txt" in (ROOT / "scripts" / "test").read_text()


def test_the_workflow_builds_compiled_wheels_from_the_sdist_and_publishes_only_a_tag() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    jobs = workflow["jobs"]
    uploaded = {
        step["with"]["name"]
        for step in jobs["sdist"]["steps"]
        if step.get("uses", "").startswith("actions/upload-artifact")
    }
    compiled = jobs["compiled"]
    assert compiled["needs"] == "sdist"
    downloaded = [
        step["with"]["name"]
        for step in compiled["steps"]
        if step.get("uses", "").startswith("actions/download-artifact")
    ]
    assert downloaded
    assert set(downloaded) <= uploaded
    (build,) = [s for s in compiled["steps"] if s.get("uses", "").startswith("pypa/cibuildwheel")]
    assert "sdist" in build["with"]["package-dir"]
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"sdist", "compiled"}
    assert publish["if"] == "startsWith(github.ref, 'refs/tags/v')"
    assert publish["permissions"] == {"id-token": "write"}


def test_the_sdist_holds_every_tracked_path_and_nothing_else() -> None:
    """Its include list names every top-level path git tracks (hatchling adds
    pyproject.toml itself), so a new one is not left out, and a stray one (a
    virtualenv beside the sources) not taken in."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout")
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    top = {path.split("/", 1)[0] for path in tracked}
    listed = set(_pyproject()["tool"]["hatch"]["build"]["targets"]["sdist"]["only-include"])
    assert top - listed == {"pyproject.toml", ".gitignore"}
    assert listed <= top
