"""The compiled build: whether this installation runs it, and the one marker it needs.

retrysafe is plain Python, and every module works as written. The compiled build
compiles the modules every call runs through (:data:`COMPILED_MODULES`) with
mypyc, which their strict typing allows. On a mock transport that cuts what a
call adds over bare httpx by 25 to 40 %; over a socket it gains little
(``docs/cost.md`` has the figures and how to build it). What users make with
their own arguments (the clients, the transports, ``Governor``, ``CallOptions``,
the settings) stays plain Python, so a wrong argument still gets retrysafe's own
message rather than a compiled function's type error.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

__all__ = ["COMPILED_MODULES", "is_compiled", "mypyc_attr"]

#: The modules the compiled build compiles on this Python: the files pyproject.toml's
#: mypyc hook lists, less those hatch_build.py leaves plain here (a test holds them
#: together).
COMPILED_MODULES: tuple[str, ...] = (
    "retrysafe.send_loop",
    "retrysafe.async_send_loop",
    "retrysafe.drive",
    "retrysafe.first_attempt",
    "retrysafe.clock_read",
    "retrysafe.attempt_plan",
    "retrysafe.engine",
    "retrysafe.hedged_call",
    "retrysafe.attempt_watchdog",
    "retrysafe.hints",
    "retrysafe.request_facts",
    "retrysafe.attempt_deadline",
    "retrysafe.bounded_backend",
    "retrysafe.governor.guard",
    "retrysafe.governor.breaker",
    "retrysafe.governor.budget",
)
if sys.version_info >= (3, 12):
    # A coroutine compiled by mypyc passes a cancellation on with the three-argument
    # throw() Python 3.12 deprecated: from 3.12 on, the wheel's build hook
    # (hatch_build.py) leaves the async send loop plain Python.
    COMPILED_MODULES = tuple(
        name for name in COMPILED_MODULES if name != "retrysafe.async_send_loop"
    )

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*_args: Any, **_flags: Any) -> Any:
        """mypyc's class marker, read by the compiler; at run time it changes nothing."""
        return lambda cls: cls


def is_compiled() -> bool:
    """Whether the modules every call runs through are compiled here (the compiled
    build), rather than plain Python."""
    import retrysafe.drive  # noqa: F401 - (loaded with the package anyway)

    module = sys.modules["retrysafe.drive"]
    return not (module.__file__ or "").endswith(".py")
