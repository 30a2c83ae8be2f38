"""uvicorn's h11 protocol, extended so the chaos app can reach its own connection.

ASGI gives an application messages, never the socket, yet a chaos server must be able to
reset a connection or drop it without a reply. :class:`ChaosH11Protocol` is uvicorn's
``H11Protocol`` with two additions in every request's ``scope["extensions"]``:

- ``"retrysafe.chaos.transport"``: the connection's asyncio transport;
- ``"retrysafe.chaos.stopping"``: an :class:`asyncio.Event` set when the server begins
  shutting down, so endpoints that hang or trickle end at once instead of holding the
  shutdown up.

Use it with ``uvicorn.Config(app, http=ChaosH11Protocol)`` (or
``uvicorn --http retrysafe.chaos.protocol:ChaosH11Protocol``); :class:`ChaosServer`
does this for you. Under any other server the extensions are absent and the app answers
socket-level faults with 501.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

__all__ = [
    "STOPPING_EXTENSION",
    "TRANSPORT_EXTENSION",
    "ChaosH11Protocol",
    "stopping_event",
    "transport_of",
]

TRANSPORT_EXTENSION = "retrysafe.chaos.transport"
STOPPING_EXTENSION = "retrysafe.chaos.stopping"


class ChaosH11Protocol(H11Protocol):
    """uvicorn's h11 protocol that hands each request its transport and a stopping event."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.stopping = asyncio.Event()
        application = self.app

        async def app_with_connection(scope: Scope, receive: Receive, send: Send) -> None:
            extensions: MutableMapping[str, Any] = scope.setdefault("extensions", {})
            extensions[TRANSPORT_EXTENSION] = self.transport
            extensions[STOPPING_EXTENSION] = self.stopping
            await application(scope, receive, send)

        self.app = app_with_connection

    def shutdown(self) -> None:
        """Tell this connection's running request that the server is stopping, then close."""
        self.stopping.set()
        super().shutdown()


def transport_of(scope: Scope) -> asyncio.Transport | None:
    """The request's connection transport, when served by :class:`ChaosH11Protocol`."""
    transport = scope.get("extensions", {}).get(TRANSPORT_EXTENSION)
    return transport if isinstance(transport, asyncio.Transport) else None


def stopping_event(scope: Scope) -> asyncio.Event | None:
    """The event set when the server stops, when served by :class:`ChaosH11Protocol`."""
    event = scope.get("extensions", {}).get(STOPPING_EXTENSION)
    return event if isinstance(event, asyncio.Event) else None
