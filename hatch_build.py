"""The wheel's build hook: which modules the compiled build compiles on this Python.

pyproject.toml lists the modules mypyc compiles (``retrysafe.compiled.COMPILED_MODULES``).
One of them, the async send loop, is a coroutine that awaits the transport's coroutines.
A coroutine compiled by mypyc passes an exception (a cancellation) on to the one it
awaits with the three-argument ``throw()``, which Python 3.12 deprecated: there, every
cancel crossing it would warn, and fail a program run with warnings as errors. So a
wheel built on Python 3.12 or later leaves it plain Python; on 3.10 and 3.11 it is
compiled, which takes about 1 to 2 µs off each async call (``docs/cost.md``).

Each compiled wheel is built by the Python it is for (``scripts/build-compiled``,
cibuildwheel), so the Python running this hook is the one that decides. It runs before
the mypyc hook (it comes first in pyproject.toml) and changes nothing when that hook is
off (the plain wheel, an editable install).
"""

from __future__ import annotations

import sys
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: The compiled modules left plain Python from 3.12 on (keep retrysafe.compiled in step).
PLAIN_FROM_PYTHON_3_12 = ("src/retrysafe/async_send_loop.py",)


class CompiledModulesForThisPython(BuildHookInterface):
    """Drops from the mypyc hook's list what must stay plain on the building Python."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        mypyc = self.build_config.hook_config.get("mypyc")
        if mypyc is None or sys.version_info < (3, 12):
            return
        mypyc["include"] = [path for path in mypyc["include"] if path not in PLAIN_FROM_PYTHON_3_12]
