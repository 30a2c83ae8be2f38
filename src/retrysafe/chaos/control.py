"""The control plane under ``/_chaos/``: reset, the request log and ledgers, as JSON.

These are for tools outside the test process (a CLI, another language's tests); a test
running beside :class:`~retrysafe.chaos.ChaosServer` reads the state directly. Control
requests are never counted, logged or subject to faults.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from retrysafe.chaos.state import ChaosState

__all__ = ["routes"]


def routes(state: ChaosState) -> list[Route]:
    """The ``/_chaos/`` routes, bound to ``state``."""

    async def reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"reset": True})

    async def log(request: Request) -> Response:
        key = request.query_params.get("key")
        return JSONResponse([record.to_json() for record in state.log(key)])

    async def ledger(request: Request) -> Response:
        key = request.query_params.get("key", "")
        return JSONResponse(state.ledger(request.path_params["resource"], key))

    return [
        Route("/_chaos/reset", reset, methods=["POST"]),
        Route("/_chaos/log", log, methods=["GET"]),
        Route("/_chaos/ledger/{resource}", ledger, methods=["GET"]),
    ]
