"""docs/fleet.md's examples run, in order, in one namespace, against real servers.

As the docs suite runs every page: ``chaos_url`` (no trailing slash) and ``redis_url``
predefined.
"""

from __future__ import annotations

import re
from pathlib import Path

from retrysafe.chaos import ChaosServer

PAGE = Path(__file__).resolve().parents[2] / "docs" / "fleet.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_fleet_pages_examples_run(chaos_server: ChaosServer, redis_url: str) -> None:
    blocks = _BLOCK.findall(PAGE.read_text())
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"chaos_url": chaos_server.url, "redis_url": redis_url}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{PAGE.name} block {number}", "exec"), namespace)
