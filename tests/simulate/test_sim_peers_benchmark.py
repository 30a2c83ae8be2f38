"""``benchmarks/peers.py --quick``, as CI runs it: a real run against the chaos server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "peers.py"
PEERS = ("retrysafe", "tenacity", "stamina", "httpx-retries", "requests + urllib3")


@pytest.fixture(scope="module")
def table() -> dict[str, list[str]]:
    """The Markdown table the quick run prints, one row of cells per library."""
    finished = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in finished.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| library")
    ]
    return {row[0]: row[1:] for row in rows}


@pytest.mark.timeout(60)
def test_every_peer_is_measured(table: dict[str, list[str]]) -> None:
    assert tuple(table) == PEERS  # the dev extra installs every peer
    assert all(len(cells) == 5 for cells in table.values())


@pytest.mark.timeout(60)
def test_a_plain_urllib3_retry_sends_every_attempt_to_a_dead_server(
    table: dict[str, list[str]],
) -> None:
    assert table["requests + urllib3"][1] == "4.00"  # no budget, no breaker: 4 each


@pytest.mark.timeout(60)
def test_retrysafe_keeps_its_budget_and_does_not_wait_past_it(
    table: dict[str, list[str]],
) -> None:
    outage, hang, retry_after = table["retrysafe"][1], table["retrysafe"][3], table["retrysafe"][4]
    assert float(outage) < 4.0  # the retry budget and breaker held retries back
    assert float(hang.split(" s")[0]) < 1.0 + 0.5  # a 1 s budget, a loaded machine
    assert retry_after.startswith("gave up at once: RetryAfterTooLong")
