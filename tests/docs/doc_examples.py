"""Finding the runnable examples of a documentation page, and running them.

The convention every page under ``docs/`` follows (docs/contributing-docs.md says it for
writers):

- every fenced block opened with three backticks and ``python`` is an example; the
  examples of one page run in order, in one namespace per page;
- the globals ``chaos_url`` (a chaos server's base URL, no trailing slash) and
  ``redis_url`` (a private redis-server, started only for a page whose code mentions it)
  are predefined;
- a block whose first line is ``# not run: <reason>`` is not run, and is reported;
- a page may declare modules it needs in its front matter, ``requires: [mod.name]``;
  while one of them cannot be imported, the page is skipped with a reason naming it.

Other fences (``text``, ``console``, ``sh``, ``toml``...) are never run.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from typing import Any

__all__ = [
    "DOCS",
    "TALLY",
    "Example",
    "Page",
    "Tally",
    "missing_modules",
    "pages",
    "parse_page",
    "run_page",
]

DOCS = Path(__file__).resolve().parents[2] / "docs"

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})\s*(?P<info>[^\n]*)$")
_NOT_RUN = re.compile(r"^#\s*not run:\s*(?P<reason>\S.*)$")


@dataclasses.dataclass(frozen=True)
class Example:
    """One python block: its code, where it starts, and why it is not run (if it is not)."""

    page: str
    line: int
    code: str
    not_run: str | None = None


@dataclasses.dataclass(frozen=True)
class Page:
    """A page's examples and the modules its front matter says they need."""

    name: str
    examples: tuple[Example, ...]
    requires: tuple[str, ...] = ()

    @property
    def needs_redis(self) -> bool:
        """Whether some example that runs mentions ``redis_url``."""
        return any("redis_url" in example.code for example in self.examples if not example.not_run)


def _front_matter(lines: list[str]) -> tuple[dict[str, str], int]:
    """The ``key: value`` lines of a leading ``---`` block, and the line after it."""
    if not lines or lines[0].strip() != "---":
        return {}, 0
    fields: dict[str, str] = {}
    for number, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return fields, number + 1
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    raise ValueError("front matter opened with --- is never closed")


def _module_list(value: str, page: str) -> tuple[str, ...]:
    """``[a.b, c]`` or ``a.b`` as a tuple of module names."""
    text = value.strip()
    if text.startswith("["):
        if not text.endswith("]"):
            raise ValueError(f"{page}: requires must be a list like [retrysafe.requests]")
        text = text[1:-1]
    names = tuple(name.strip().strip("'\"") for name in text.split(",") if name.strip())
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            raise ValueError(f"{page}: requires names a module, got {name!r}")
    return names


def parse_page(path: Path, name: str | None = None) -> Page:
    """Read ``path``'s python examples, in order, and its ``requires`` front matter.

    ``name`` is how the page is reported; by default its path under ``docs/``.
    """
    if name is None:
        name = path.relative_to(DOCS).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    fields, start = _front_matter(lines)
    requires = _module_list(fields["requires"], name) if "requires" in fields else ()
    examples: list[Example] = []
    number = start
    while number < len(lines):
        opened = _FENCE_OPEN.match(lines[number])
        if opened is None:
            number += 1
            continue
        indent, ticks = opened["indent"], opened["ticks"]
        language = opened["info"].split()[0].lstrip(".{").lower() if opened["info"] else ""
        body: list[str] = []
        number += 1
        while number < len(lines) and lines[number].strip() != ticks:
            line = lines[number]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            number += 1
        if number >= len(lines):
            raise ValueError(f"{name}: a fence opened at line {number} is never closed")
        number += 1
        if language not in ("python", "py"):
            continue
        code = "\n".join(body) + "\n"
        first = next((line.strip() for line in body if line.strip()), "")
        skipped = _NOT_RUN.match(first)
        examples.append(
            Example(
                page=name,
                line=number - len(body),
                code=code,
                not_run=skipped["reason"] if skipped else None,
            )
        )
    return Page(name=name, examples=tuple(examples), requires=requires)


def pages() -> list[Page]:
    """Every page under ``docs/``, in path order."""
    return [parse_page(path) for path in sorted(DOCS.rglob("*.md"))]


def missing_modules(page: Page) -> list[str]:
    """The modules ``page`` requires that cannot be imported here."""
    missing = []
    for module in page.requires:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            missing.append(module)
    return missing


def run_page(page: Page, namespace: dict[str, object], path: Path | None = None) -> int:
    """Run ``page``'s examples in order in ``namespace``; returns how many ran.

    Each block is compiled under the page's file (``path``, by default the page under
    ``docs/``) and its real line numbers, so a failing example's traceback points at
    the Markdown line to fix.
    """
    ran = 0
    for example in page.examples:
        if example.not_run is not None:
            continue
        padded = "\n" * (example.line - 1) + example.code
        source = path if path is not None else DOCS / page.name
        exec(compile(padded, str(source), "exec"), namespace)
        ran += 1
    return ran


@dataclasses.dataclass
class Tally:
    """What the docs tests ran this session, for the summary they print."""

    pages: int = 0
    examples_run: int = 0
    not_run: list[str] = dataclasses.field(default_factory=list)
    pages_skipped: list[str] = dataclasses.field(default_factory=list)

    def add(self, other: dict[str, Any]) -> None:
        """Count in another process's tally (a pytest-xdist worker's, as a plain dict)."""
        self.pages += other["pages"]
        self.examples_run += other["examples_run"]
        self.not_run += other["not_run"]
        self.pages_skipped += other["pages_skipped"]

    def summary(self) -> list[str]:
        """The lines printed at the end of the session (none if no page was tried)."""
        if self.pages == 0 and not self.pages_skipped:
            return []
        head = (
            f"docs examples: {self.examples_run} ran on {self.pages} pages; "
            f"{len(self.not_run)} marked not run; {len(self.pages_skipped)} pages skipped"
        )
        return [head] + [f"  {line}" for line in sorted(self.not_run + self.pages_skipped)]


#: Filled in by the tests, printed by tests/docs/conftest.py at the end of the session (or,
#: under pytest-xdist, sent to the controller, which prints the sum: tests/conftest.py).
TALLY = Tally()
