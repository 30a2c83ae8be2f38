"""docs/telemetry.md runs as written: its python blocks, in order, in one namespace,
against a chaos server (what the docs site's own check will do for every page)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from retrysafe.chaos import ChaosServer

PAGE = Path(__file__).parents[2] / "docs" / "telemetry.md"


def test_the_telemetry_page_runs(capsys: Any) -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) >= 7
    # A server of its own: the page's /fail keys must start fresh, whoever ran it before.
    with ChaosServer() as server:
        namespace: dict[str, Any] = {"chaos_url": server.url.rstrip("/")}
        for number, block in enumerate(blocks):
            if block.startswith("# not run:"):
                continue
            exec(compile(block, f"{PAGE.name} block {number}", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "retrysafe GET None 200" in printed
    assert (
        'retrysafe_retries_total{dependency="search",outcome="service_unavailable"} 1.0' in printed
    )
    assert "200 3" in printed
