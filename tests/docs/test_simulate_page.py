"""Each example on docs/simulate.md runs on its own, as a reader who copies one block runs it.

The page test (test_docs_examples.py) runs a page's blocks in order in one namespace, so a
block that used a name only an earlier block defined passed there and failed when copied:
the ``run_outage(..., governor=GOVERNOR)`` example (GOVERNOR came from the settings-module
block) and the hedging example (``retrysafe`` imported by an earlier block).
"""

from __future__ import annotations

import dataclasses

import pytest
from doc_examples import DOCS, Example, parse_page, run_page

PAGE = parse_page(DOCS / "simulate.md")
RUNNABLE = [example for example in PAGE.examples if example.not_run is None]


def test_every_example_on_the_page_runs_including_outage_and_hedging() -> None:
    assert len(RUNNABLE) == len(PAGE.examples) == 6
    assert any("run_outage(" in example.code for example in RUNNABLE)
    assert any("hedge_after=" in example.code for example in RUNNABLE)


@pytest.mark.parametrize("example", RUNNABLE, ids=[f"line {e.line}" for e in RUNNABLE])
def test_each_example_runs_alone(example: Example) -> None:
    alone = dataclasses.replace(PAGE, examples=(example,))
    assert run_page(alone, {"__name__": "__docs__"}) == 1
