"""Fixtures for running the documentation's examples, and the summary of what ran.

``redis_url`` starts a private redis-server (see tests/idempotency/store_servers.py) the
first time a page that mentions it asks, and keeps it for the session.
"""

from __future__ import annotations

import dataclasses
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


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker prints nothing: it sends its tally to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["docs_tally"] = dataclasses.asdict(TALLY)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many documentation examples ran, and which did not and why."""
    for line in TALLY.summary():
        terminalreporter.write_line(line)
