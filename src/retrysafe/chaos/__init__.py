"""A chaos HTTP server that fails on demand, for testing retry behaviour on real sockets.

:class:`ChaosServer` serves the chaos app (:func:`create_app`) with uvicorn and a set of
raw TCP faults from a background thread. Every endpoint takes a ``key`` query parameter
(or a ``{key}`` path segment) that scopes its state, answers with ``X-Attempt`` and logs
each request; see the endpoint modules for what each one does.

Needs the ``chaos`` extra: ``pip install 'retrysafe[chaos]'``.
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "retrysafe.chaos needs starlette and uvicorn: pip install 'retrysafe[chaos]'"
    ) from exc

from retrysafe.chaos.app import create_app
from retrysafe.chaos.faults import FAULT_NAMES
from retrysafe.chaos.keyed import KeyedChaos
from retrysafe.chaos.protocol import ChaosH11Protocol
from retrysafe.chaos.server import ChaosServer
from retrysafe.chaos.state import ChaosRecord, ChaosState

__all__ = [
    "FAULT_NAMES",
    "ChaosH11Protocol",
    "ChaosRecord",
    "ChaosServer",
    "ChaosState",
    "KeyedChaos",
    "create_app",
]
