"""Every package retrysafe's code and benchmarks import is one pyproject.toml declares.

A user installs the package with an extra (``retrysafe[redis]``) or the benchmarks with
``.[bench]``, and then runs what the README says: an import the extra does not bring
fails on their machine, not on this one, where ``.[dev]`` installs everything.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The benchmarks' own modules, imported from beside them (and the test servers they share).
LOCAL = {"retrysafe", "overhead", "hedging", "store_servers", "fleet_servers"}
#: Imported only where it runs already: the pytest plugin (retrysafe.testing), which pytest
#: loads.
HOSTS = {"pytest"}


def _project() -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # (tomli is tomllib before 3.11)
        import tomli as tomllib

    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _names(requirements: list[str]) -> set[str]:
    """The distribution names of ``requirements`` (``psycopg[binary]>=3.1`` -> ``psycopg``),
    normalised as pip does."""
    names = set()
    for requirement in requirements:
        found = re.match(r"[A-Za-z0-9._-]+", requirement)
        assert found is not None, requirement
        names.add(_normal(found.group(0)))
    return names


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported(path: Path) -> set[str]:
    """The top-level modules ``path`` imports, anywhere in it (lazy imports included)."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.partition(".")[0])
    return modules


def _packages_distributions() -> dict[str, list[str]]:
    """``importlib.metadata.packages_distributions()``; on Python 3.10, which reads only
    a distribution's ``top_level.txt`` (which wheels built by hatch, opentelemetry's, do not
    hold), with the top-level names its files show too, as 3.11's does."""
    providers = dict(importlib.metadata.packages_distributions())
    if sys.version_info < (3, 11):
        for distribution in importlib.metadata.distributions():
            name = distribution.metadata["Name"]
            for file in distribution.files or ():
                parts = file.parts
                if len(parts) > 1 and parts[0] != ".." and not parts[0].endswith(".dist-info"):
                    top = parts[0]
                elif len(parts) == 1 and parts[0].endswith(".py"):
                    top = parts[0].removesuffix(".py")
                else:
                    continue
                if name not in providers.setdefault(top, []):
                    providers[top].append(name)
    return providers


def _third_party(modules: set[str]) -> dict[str, set[str]]:
    """Each module of ``modules`` that is neither the standard library's nor local, with
    the distributions installed here that provide it."""
    providers = _packages_distributions()
    return {
        module: {_normal(name) for name in providers.get(module, [module])}
        for module in modules - LOCAL - set(sys.stdlib_module_names)
        if module not in ("mypy_extensions", "typing_extensions")  # (type checking only)
    }


BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda path: path.name)
def test_the_bench_extra_brings_what_each_benchmark_imports(path: Path) -> None:
    project = _project()
    declared = _names(project["dependencies"]) | _names(project["optional-dependencies"]["bench"])
    missing = {
        module: providers
        for module, providers in _third_party(_imported(path)).items()
        if not providers & declared
    }
    assert not missing, f"{path.name} imports {missing}, which .[bench] does not install"


def test_every_package_the_library_imports_is_a_dependency_or_an_extra() -> None:
    project = _project()
    extras = project["optional-dependencies"]
    declared = _names(project["dependencies"]) | {
        name
        for extra, requirements in extras.items()
        if extra != "dev"
        for name in _names(requirements)
    }
    imported: set[str] = set()
    for path in (ROOT / "src" / "retrysafe").rglob("*.py"):
        imported |= _imported(path)
    imported -= HOSTS
    missing = {
        module: providers
        for module, providers in _third_party(imported).items()
        if not providers & declared
    }
    assert not missing, f"src/retrysafe imports {missing}, which no extra but dev declares"
