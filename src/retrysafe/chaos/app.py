"""The chaos ASGI application: every endpoint, assembled around one :class:`ChaosState`."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

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

__all__ = ["DEFAULT_MAX_BODY_BYTES", "PARAMETERS", "create_app"]

#: What ``/sse`` and the OpenAI-style endpoint both take (see stream_endpoints).
_STREAM_PARAMETERS = frozenset(
    {
        "events",
        "interval_ms",
        "fail_times",
        "fail_status",
        "break_after",
        "break_with",
        "break_times",
    }
)

#: The query parameters each endpoint takes, besides ``key`` (which every one does); None:
#: any (``/echo`` sends back whatever it got, ``/validate`` checks the names ``require``
#: lists). A near miss of one of them is a test author's slip (``time=3`` for ``times=3``,
#: ``Times``, ``retry-after``; see _near_miss): answered 400 naming what the endpoint
#: takes, before anything is counted, rather than ignored while the endpoint answers with
#: its default. Any other name is left alone: the chaos server stands in for an API, and a
#: client may add its own (an ``api_key``, a ``version``) to every call.
PARAMETERS: dict[str, frozenset[str] | None] = {
    "/_chaos/reset": frozenset(),
    "/_chaos/log": frozenset(),
    "/_chaos/ledger/{resource}": frozenset(),
    "/status/{code}": frozenset({"retry_after", "seed"}),
    "/fail/{key}": frozenset({"times", "status", "retry_after"}),
    "/sequence/{key}": frozenset({"steps", "retry_after"}),
    "/flaky": frozenset({"rate", "status", "seed"}),
    "/retry-after": frozenset({"mode", "seconds", "status"}),
    "/delay": frozenset({"ms"}),
    "/hang": frozenset(),
    "/drip": frozenset({"chunks", "interval_ms", "chunk_bytes", "status", "type"}),
    "/truncate": frozenset({"promised", "sent"}),
    "/quota": frozenset({"header", "remaining"}),
    "/auth": frozenset({"header"}),
    "/validate": None,
    "/refused-site": frozenset(),
    "/ok-error": frozenset(),
    "/echo": None,
    "/malformed": frozenset({"kind", "status"}),
    "/rate-limit/{bucket}": frozenset({"rps", "burst"}),
    "/outage/{key}": frozenset({"down_ms", "retry_after"}),
    "/capacity/{pool}": frozenset({"concurrency", "service_ms"}),
    "/idempotent/{resource}": frozenset({"fail_times", "fail_after_commit"}),
    "/redirect-chain/{key}": frozenset(
        {"hops", "hop", "delay_ms", "redirect", "fail_times", "fail_status"}
    ),
    "/sse": frozenset({"format", *_STREAM_PARAMETERS}),
    "/openai/{key}/v1/chat/completions": _STREAM_PARAMETERS,
    "/stripe/{key}/{fail_times}/{fail_status}/v1/customers": frozenset(),
    "/tail/{key}": frozenset({"slow_fraction", "slow_ms", "fast_ms", "seed"}),
}


def _near_miss(name: str, names: frozenset[str]) -> str | None:
    """The name in ``names`` that ``name`` looks like a slip for, or None: the same but for
    letter case or a dash for an underscore (``Times``, ``retry-after``), or one letter
    off a name of five letters or more (``time``, ``tims`` for ``times``). Shorter names
    are too near the words a client sends of its own (``keys``, ``model``, ``shop``)."""
    folded = name.lower().replace("-", "_")
    if folded in names:
        return folded
    for candidate in sorted(names):
        if len(candidate) >= 5 and _one_edit_apart(folded, candidate):
            return candidate
    return None


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether ``a`` becomes ``b`` by one letter inserted, deleted or replaced."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _taking_only(route: Route, taken: frozenset[str]) -> Route:
    """``route`` answering 400 to a near miss of a parameter it takes (see PARAMETERS)."""
    endpoint = route.endpoint
    known = taken | {"key"}
    named = ", ".join(sorted(known))

    async def checked(request: Request) -> Response:
        for name in request.query_params:
            if name in known:
                continue
            meant = _near_miss(name, known)
            if meant is not None:
                raise InvalidParameter(
                    name,
                    f"{route.path} takes no parameter {name!r}: {meant!r}? (it takes {named})",
                )
        response: Response = await endpoint(request)
        return response

    return Route(route.path, checked, methods=route.methods, name=route.name)


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
        for route in module.routes(chaos_state):
            assert isinstance(route, Route)
            taken = PARAMETERS[route.path]  # (a new endpoint declares its parameters)
            routes.append(route if taken is None else _taking_only(route, taken))
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
