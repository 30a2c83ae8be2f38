"""The chaos ASGI application: every endpoint, assembled around one :class:`ChaosState`."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from retrysafe.chaos import (
    content_endpoints,
    control,
    idempotency_endpoint,
    load_endpoints,
    redirect_endpoints,
    retry_after_endpoint,
    status_endpoints,
    stream_endpoints,
    transport_endpoints,
)
from retrysafe.chaos.params import InvalidParameter, invalid_parameter_response
from retrysafe.chaos.state import ChaosState

__all__ = ["create_app"]


def create_app(state: ChaosState | None = None) -> Starlette:
    """A Starlette app serving the chaos endpoints, remembering into ``state``.

    Serve it with :class:`~retrysafe.chaos.ChaosServer`, or with uvicorn and
    ``http=ChaosH11Protocol`` for the socket-level faults (see
    :mod:`retrysafe.chaos.protocol`). The state is also at ``app.state.chaos``.
    """
    chaos_state = ChaosState() if state is None else state
    routes: list[BaseRoute] = []
    for module in (
        control,
        status_endpoints,
        retry_after_endpoint,
        transport_endpoints,
        content_endpoints,
        load_endpoints,
        idempotency_endpoint,
        redirect_endpoints,
        stream_endpoints,
    ):
        routes.extend(module.routes(chaos_state))
    app = Starlette(
        routes=routes,
        exception_handlers={InvalidParameter: invalid_parameter_response},
    )
    app.state.chaos = chaos_state
    return app
