"""The compiled build is exactly what it says, and the plain build is never shadowed by it.

scripts/test runs the suite once on plain Python (the editable install) and then a
part of it on the compiled wheel with ``RETRYSAFE_EXPECT_COMPILED=1`` set: each run
checks here that it runs the build it means to.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import retrysafe
from retrysafe.compiled import COMPILED_MODULES, is_compiled

EXPECT_COMPILED = os.environ.get("RETRYSAFE_EXPECT_COMPILED") == "1"
ROOT = Path(__file__).resolve().parent.parent


def _is_extension(module_name: str) -> bool:
    module = importlib.import_module(module_name)
    return not (module.__file__ or "").endswith(".py")


def test_the_mypyc_hook_compiles_exactly_the_listed_modules() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # (tomli is tomllib before 3.11)
        import tomli as tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hook = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    listed = [
        path.removeprefix("src/").removesuffix(".py").replace("/", ".") for path in hook["include"]
    ]
    if sys.version_info >= (3, 12):  # (hatch_build.py leaves it plain there)
        # A release tests each wheel from a copy of tests/ and pyproject.toml only
        # (cibuildwheel's test-sources), without hatch_build.py: there the compiled run's
        # own test checks the module came out plain (trial75: every 3.12+ wheel failed).
        hook_source = ROOT / "hatch_build.py"
        if hook_source.exists():
            assert "src/retrysafe/async_send_loop.py" in hook_source.read_text()
        listed.remove("retrysafe.async_send_loop")
    assert listed == list(COMPILED_MODULES)
    assert hook["enable-by-default"] is False  # an editable install stays plain Python


@pytest.mark.skipif(not EXPECT_COMPILED, reason="the plain-Python run")
def test_the_compiled_run_runs_every_listed_module_compiled() -> None:
    assert is_compiled()
    assert [name for name in COMPILED_MODULES if not _is_extension(name)] == []
    # What users call with their own arguments stays plain Python (its own messages).
    for name in (
        "retrysafe.client",
        "retrysafe.async_client",
        "retrysafe.transport",
        "retrysafe.shell_settings",
        "retrysafe.call_options",
        "retrysafe.dependency_namers",
        "retrysafe.governor.governor",
    ):
        assert not _is_extension(name), name
    # A compiled coroutine throws into the one it awaits with the 3-argument throw()
    # Python 3.12 deprecated: from 3.12 on, the async send loop stays plain Python.
    assert _is_extension("retrysafe.async_send_loop") is (sys.version_info < (3, 12))
    # The async network streams are coroutines every async read runs through: plain on
    # every Python (the sync ones, beside them, are compiled).
    assert not _is_extension("retrysafe.async_bounded_backend")
    assert not _is_extension("retrysafe.async_whole_writes")
    assert _is_extension("retrysafe.bounded_backend")


@pytest.mark.skipif(EXPECT_COMPILED, reason="the compiled run")
def test_the_plain_run_is_not_shadowed_by_a_compiled_module() -> None:
    # mypyc builds in place: a compiled module left in src/ would run instead of its
    # source, and every edit to that source would be silently ignored.
    assert not is_compiled()
    assert [name for name in COMPILED_MODULES if _is_extension(name)] == []
    assert sorted(str(p) for p in Path(retrysafe.__file__).parent.glob("**/*.so")) == []


@pytest.mark.skipif(not EXPECT_COMPILED, reason="the plain-Python run")
@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils) to list symbols")
def test_the_compiled_library_exports_only_its_init_function() -> None:
    """hatch_build.py compiles the C code with hidden symbols: the library that holds the
    compiled modules' code publishes only the function Python calls to load it (before:
    all 1,190 of its functions, which the loader published one by one)."""
    (library,) = [
        module.__file__
        for name, module in sys.modules.items()
        if name.endswith("__mypyc") and module.__file__ is not None
    ]
    listing = (
        ["nm", "-gU", library]
        if sys.platform == "darwin"
        else ["nm", "-D", "--defined-only", library]
    )
    names = [
        line.split()[-1]
        for line in subprocess.run(
            listing, capture_output=True, text=True, check=True
        ).stdout.splitlines()
        if line.strip()
    ]
    assert names, "nm listed nothing"
    assert [name for name in names if not name.lstrip("_").startswith("PyInit_")] == []
