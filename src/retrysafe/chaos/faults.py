"""Raw TCP faults, for failures that happen before or beneath HTTP.

An ASGI app only runs once a request has been parsed, so it cannot refuse a connection,
reset one on accept or answer with a garbled status line. Each fault here listens on its
own loopback port and does one thing to every connection:

- ``refused``: nothing listens (a port bound, then closed): the connect is refused.
- ``reset_on_accept``: accepts, then resets at once (a client may see the reset while
  still connecting, or on its first read or write).
- ``reset_after_request``: reads the request head, then resets.
- ``close_without_response``: reads the whole request, then closes cleanly, answering nothing.
- ``reset_mid_body``: answers 200 with ``Content-Length: 1000``, sends 100 bytes, resets.
- ``accept_never_read``: accepts and then neither reads nor answers, until the server stops.
- ``garbage_status_line``: reads the request, answers a status line that is not HTTP, closes.
"""

from __future__ import annotations

import asyncio
import re
import socket

from retrysafe.chaos.connection import close_quietly, listening_socket, reset

__all__ = ["FAULT_NAMES", "LISTENING_FAULTS", "FaultServers", "closed_port"]

#: Faults served by a listening port (``refused`` is the absence of one).
LISTENING_FAULTS = (
    "reset_on_accept",
    "reset_after_request",
    "close_without_response",
    "reset_mid_body",
    "accept_never_read",
    "garbage_status_line",
)
#: Every fault :meth:`ChaosServer.fault_url` knows.
FAULT_NAMES = ("refused", *LISTENING_FAULTS)

_HEAD_END = b"\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)[ \t]*$", re.IGNORECASE | re.MULTILINE)
_CHUNKED = re.compile(rb"^transfer-encoding:.*chunked", re.IGNORECASE | re.MULTILINE)
_MID_BODY_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000\r\n\r\n"
)
_MID_BODY_SENT = b"x" * 100
# Long enough for the client to read the head and the first bytes before the reset.
_MID_BODY_RESET_DELAY = 0.05
_GARBAGE = b"HTTP/1.1 two hundred OK-ish\r\nthis is not a header\r\n\r\n"


def closed_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on (bound and released just now)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
    return port


def _request_complete(buffer: bytes) -> bool:
    """Whether ``buffer`` holds a whole request: the head and any body it announces."""
    head, found, body = buffer.partition(_HEAD_END)
    if not found:
        return False
    if _CHUNKED.search(head):
        return body.endswith(b"0\r\n\r\n")
    length = _CONTENT_LENGTH.search(head)
    return length is None or len(body) >= int(length.group(1))


class _FaultProtocol(asyncio.Protocol):
    """One connection to a fault port; ``kind`` is one of :data:`LISTENING_FAULTS`."""

    def __init__(self, kind: str, open_transports: set[asyncio.Transport]) -> None:
        self.kind = kind
        self.open_transports = open_transports
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.acted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.open_transports.add(transport)
        if self.kind == "reset_on_accept":
            reset(transport)
        elif self.kind == "accept_never_read":
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        if self.transport is None or self.acted:
            return
        self.buffer += data
        if self.kind in ("reset_after_request", "reset_mid_body"):
            if _HEAD_END not in self.buffer:
                return
        elif not _request_complete(self.buffer):
            return
        self.acted = True
        self._act(self.transport)

    def _act(self, transport: asyncio.Transport) -> None:
        if self.kind == "reset_after_request":
            reset(transport)
        elif self.kind == "close_without_response":
            close_quietly(transport)
        elif self.kind == "reset_mid_body":
            transport.write(_MID_BODY_HEAD + _MID_BODY_SENT)
            asyncio.get_running_loop().call_later(_MID_BODY_RESET_DELAY, reset, transport)
        elif self.kind == "garbage_status_line":
            transport.write(_GARBAGE)
            close_quietly(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.open_transports.discard(self.transport)


class FaultServers:
    """The listening fault ports, served on the running event loop.

    Bind with :meth:`bind` (any thread; errors surface there), serve with :meth:`serve`
    on the loop, and :meth:`close` to stop listening and end every open connection.
    """

    def __init__(self, host: str) -> None:
        self.host = host
        self.sockets: dict[str, socket.socket] = {}
        self.ports: dict[str, int] = {}
        self._servers: list[asyncio.Server] = []
        self._open_transports: set[asyncio.Transport] = set()

    def bind(self) -> None:
        """Bind one listening socket per fault on a free port of ``host``."""
        for kind in LISTENING_FAULTS:
            sock = listening_socket(self.host)
            self.sockets[kind] = sock
            self.ports[kind] = sock.getsockname()[1]

    async def serve(self) -> None:
        """Start accepting on every bound socket (returns once accepting)."""
        loop = asyncio.get_running_loop()
        for kind, sock in self.sockets.items():

            def factory(kind: str = kind) -> asyncio.Protocol:
                return _FaultProtocol(kind, self._open_transports)

            self._servers.append(await loop.create_server(factory, sock=sock))

    async def close(self) -> None:
        """Stop listening and close every connection still open (held ones included)."""
        for server in self._servers:
            server.close()
        for transport in list(self._open_transports):
            transport.abort()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    def close_unserved(self) -> None:
        """Release sockets that were bound but never served (after a failed start)."""
        if not self._servers:
            for sock in self.sockets.values():
                sock.close()
