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
- ``trickle_headers``: reads the request, then sends a valid ``200`` response head one
  byte every 50 ms (``?interval_ms=N`` in the request's URL changes the pace), then the
  short body :data:`TRICKLE_BODY` at once, and closes. Each byte comes well within any
  per-read timeout, so only a deadline on the whole response can end it early.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from urllib.parse import parse_qs, urlsplit

from retrysafe.chaos.connection import close_quietly, listening_socket, reset

__all__ = [
    "FAULT_NAMES",
    "LISTENING_FAULTS",
    "TRICKLE_BODY",
    "TRICKLE_HEAD",
    "TRICKLE_INTERVAL",
    "FaultServers",
    "closed_port",
    "trickle_interval",
]

#: Faults served by a listening port (``refused`` is the absence of one).
LISTENING_FAULTS = (
    "reset_on_accept",
    "reset_after_request",
    "close_without_response",
    "reset_mid_body",
    "accept_never_read",
    "garbage_status_line",
    "trickle_headers",
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

#: The body ``trickle_headers`` sends, all at once, after its trickled head.
TRICKLE_BODY = b"trickled"
#: The head ``trickle_headers`` sends one byte at a time: 100 bytes, 5 s at the default pace.
TRICKLE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"
    b"content-length: %d\r\nconnection: close\r\nx-trickle: slow\r\n\r\n" % len(TRICKLE_BODY)
)
#: Seconds between two bytes of the trickled head, unless the request asks otherwise.
TRICKLE_INTERVAL = 0.05
# A typo must not tie a test up for hours: at most a second per byte.
_MAX_TRICKLE_INTERVAL = 1.0
_REQUEST_TARGET = re.compile(rb"^[A-Z]+ (\S+) HTTP/1\.[01]\r\n")
_BAD_INTERVAL_BODY = b"interval_ms: expected an integer from 0 to 1000\n"
_BAD_INTERVAL = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
    b"connection: close\r\n\r\n%s" % (len(_BAD_INTERVAL_BODY), _BAD_INTERVAL_BODY)
)


def closed_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on (bound and released just now)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
    return port


def trickle_interval(request: bytes) -> float | None:
    """Seconds between trickled bytes asked for by ``?interval_ms=`` in the request line.

    :data:`TRICKLE_INTERVAL` when the request does not say; ``None`` when it says
    something that is not a whole number of milliseconds from 0 to 1000.
    """
    target = _REQUEST_TARGET.match(request)
    if target is None:
        return TRICKLE_INTERVAL
    query = parse_qs(urlsplit(target.group(1).decode("latin-1")).query)
    raw = query.get("interval_ms", [""])[-1].strip()
    if not raw:
        return TRICKLE_INTERVAL
    # ASCII digits only (str.isdigit() also says yes to "²", which int() refuses), and
    # few of them, so int() never sees thousands of digits.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4):
        return None
    if int(raw) > _MAX_TRICKLE_INTERVAL * 1000:
        return None
    return int(raw) / 1000


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
        self.task: asyncio.Task[None] | None = None

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
        elif self.kind == "trickle_headers":
            interval = trickle_interval(self.buffer)
            if interval is None:
                transport.write(_BAD_INTERVAL)
                close_quietly(transport)
                return
            self.task = asyncio.get_running_loop().create_task(_trickle(transport, interval))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.transport is not None:
            self.open_transports.discard(self.transport)


async def _trickle(transport: asyncio.Transport, interval: float) -> None:
    """Send :data:`TRICKLE_HEAD` a byte per ``interval``, then the body, then close."""
    with contextlib.suppress(asyncio.CancelledError):
        for index in range(len(TRICKLE_HEAD)):
            if transport.is_closing():
                return
            transport.write(TRICKLE_HEAD[index : index + 1])
            await asyncio.sleep(interval)
        if not transport.is_closing():
            transport.write(TRICKLE_BODY)
            close_quietly(transport)


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
