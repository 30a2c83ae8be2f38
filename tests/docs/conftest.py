"""Fixtures for running the documentation's examples, and the summary of what ran.

``redis_url`` starts a private redis-server (see tests/idempotency/store_servers.py) the
first time a page that mentions it asks, and keeps it for the session.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from doc_examples import TALLY

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "idempotency"))

from store_servers import ServerNotInstalled, redis_server


@pytest.fixture(scope="session")
def docs_redis_url() -> Iterator[str]:
    """A private redis-server for the pages that use ``redis_url``."""
    try:
        with redis_server() as url:
            yield url
    except ServerNotInstalled as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many documentation examples ran, and which did not and why."""
    if TALLY.pages == 0 and not TALLY.pages_skipped:
        return
    write = terminalreporter.write_line
    write(
        f"docs examples: {TALLY.examples_run} ran on {TALLY.pages} pages; "
        f"{len(TALLY.not_run)} marked not run; {len(TALLY.pages_skipped)} pages skipped"
    )
    for line in TALLY.not_run + TALLY.pages_skipped:
        write(f"  {line}")
