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
    stripe_endpoints,
    tail_endpoints,
    transport_endpoints,
)
from retrysafe.chaos.arrival import (
    DEFAULT_MAX_BODY_BYTES,
    MAX_BODY_BYTES_STATE,
    BodyTooLarge,
    body_too_large_response,
)
from retrysafe.chaos.params import InvalidParameter, invalid_parameter_response
from retrysafe.chaos.state import ChaosState

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]


def create_app(
    state: ChaosState | None = None, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> Starlette:
    """A Starlette app serving the chaos endpoints, remembering into ``state``.

    A request body larger than ``max_body_bytes`` (default 1 MiB) is answered 413 as
    soon as the limit is passed, without reading the rest, and the connection closed.

    Serve it with :class:`~retrysafe.chaos.ChaosServer`, or with uvicorn and
    ``http=ChaosH11Protocol`` for the socket-level faults (see
    :mod:`retrysafe.chaos.protocol`). The state is also at ``app.state.chaos``.
    """
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int):
        raise TypeError(f"max_body_bytes must be an int, got {max_body_bytes!r}")
    if max_body_bytes < 0:
        raise ValueError(f"max_body_bytes must be at least 0, got {max_body_bytes}")
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
        tail_endpoints,
        stripe_endpoints,
    ):
        routes.extend(module.routes(chaos_state))
    app = Starlette(
        routes=routes,
        exception_handlers={
            InvalidParameter: invalid_parameter_response,
            BodyTooLarge: body_too_large_response,
        },
    )
    app.state.chaos = chaos_state
    setattr(app.state, MAX_BODY_BYTES_STATE, max_body_bytes)
    return app
