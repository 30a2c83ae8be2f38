"""The wheel's build hook: which modules the compiled build compiles on this Python, and
how their C code is compiled.

pyproject.toml lists the modules mypyc compiles (``retrysafe.compiled.COMPILED_MODULES``).
One of them, the async send loop, is a coroutine that awaits the transport's coroutines.
A coroutine compiled by mypyc passes an exception (a cancellation) on to the one it
awaits with the three-argument ``throw()``, which Python 3.12 deprecated: there, every
cancel crossing it would warn, and fail a program run with warnings as errors. So a
wheel built on Python 3.12 or later leaves it plain Python; on 3.10 and 3.11 it is
compiled, which takes about 1 to 2 µs off each async call (``docs/cost.md``).

The compiled modules' C code is compiled with ``-fvisibility=hidden``: its functions
are then the library's own, not symbols it exports (the modules find one another
through capsules, and Python finds each module's init function, which stays exported).
The library then loads faster, since the loader has its 1,190 symbols less to publish,
and the C compiler may call and inline those functions directly rather than through the
table a shared library's exported functions are called through (measured in
``docs/cost.md``). The flag is added to ``CFLAGS``, which the mypyc hook's build of the
extension (a child process) reads; GCC and clang, the compilers of the platforms the
compiled wheels are built for, take it.

Each compiled wheel is built by the Python it is for (``scripts/build-compiled``,
cibuildwheel), so the Python running this hook is the one that decides. It runs before
the mypyc hook (it comes first in pyproject.toml). When that hook is off (the plain
wheel, an editable install) nothing is compiled, so the flag changes nothing.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: The compiled modules left plain Python from 3.12 on (keep retrysafe.compiled in step).
PLAIN_FROM_PYTHON_3_12 = ("src/retrysafe/async_send_loop.py",)

#: Added to CFLAGS for the compiled modules' C code (see above).
HIDDEN_SYMBOLS = "-fvisibility=hidden"


class CompiledModulesForThisPython(BuildHookInterface):
    """Drops from the mypyc hook's list what must stay plain on the building Python."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        mypyc = self.build_config.hook_config.get("mypyc")
        if mypyc is None:
            return
        flags = os.environ.get("CFLAGS", "")
        if HIDDEN_SYMBOLS not in flags.split():
            os.environ["CFLAGS"] = f"{flags} {HIDDEN_SYMBOLS}".strip()
        if sys.version_info >= (3, 12):
            mypyc["include"] = [
                path for path in mypyc["include"] if path not in PLAIN_FROM_PYTHON_3_12
            ]
