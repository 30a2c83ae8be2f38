"""Shared test configuration.

Async tests (modules marked ``pytestmark = pytest.mark.anyio``) run on both
asyncio and trio; integration tests get an ``api`` for each client mode.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import retrysafe


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs once per event loop retrysafe supports."""
    return str(request.param)


class Api:
    """One way of calling through retrysafe: the sync Client, or AsyncClient on a loop.

    Integration tests take the ``api`` fixture and so run once per way, over
    real sockets, with the same assertions. ``seconds`` is how long the last
    call itself took (wall clock), without making and closing the client.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.seconds = 0.0

    def request(
        self,
        method: str,
        url: str,
        *,
        policy: retrysafe.RetryPolicy | None = None,
        client_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        options = dict(client_options or {})
        if policy is not None:
            options["policy"] = policy
        if self.mode == "sync":
            with retrysafe.Client(**options) as client:
                started = time.monotonic()
                try:
                    return client.request(method, url, **kwargs)
                finally:
                    self.seconds = time.monotonic() - started

        async def run() -> httpx.Response:
            async with retrysafe.AsyncClient(**options) as client:
                started = time.monotonic()
                try:
                    return await client.request(method, url, **kwargs)
                finally:
                    self.seconds = time.monotonic() - started

        return anyio.run(run, backend=self.mode)

    def __repr__(self) -> str:
        return f"Api({self.mode})"


@pytest.fixture(params=["sync", "asyncio", "trio"])
def api(request: pytest.FixtureRequest) -> Api:
    """retrysafe's client in each of its modes: sync, async on asyncio, async on trio."""
    return Api(str(request.param))


#: The docs examples' tallies of the pytest-xdist workers (``scripts/test`` runs two), each
#: as a dict (see tests/docs/conftest.py): the controller prints their sum.
_workers_docs_tallies: list[dict[str, Any]] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A pytest-xdist worker finished: keep the docs tally it sent, if it ran any page."""
    tally = getattr(node, "workeroutput", {}).get("docs_tally")
    if tally is not None:
        _workers_docs_tallies.append(tally)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Under pytest-xdist, say what the workers' docs examples ran, summed."""
    if not _workers_docs_tallies:
        return  # (run in this process, tests/docs/conftest.py says it)
    sys.path.insert(0, str(Path(__file__).resolve().parent / "docs"))
    from doc_examples import Tally

    total = Tally()
    for tally in _workers_docs_tallies:
        total.add(tally)
    for line in total.summary():
        terminalreporter.write_line(line)
