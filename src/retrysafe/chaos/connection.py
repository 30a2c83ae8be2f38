"""Socket-level endings for a connection: a TCP reset or a clean close with no answer.

These are what a client sees when a server crashes or a proxy drops it. They act on an
asyncio transport, so both the chaos ASGI app (through :mod:`retrysafe.chaos.protocol`)
and the raw TCP fault servers use them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys

__all__ = ["close_quietly", "listening_socket", "reset"]

# SO_LINGER on with a zero timeout: close() discards unsent data and sends RST, not FIN.
# (struct linger is two ints on POSIX, two unsigned shorts on Windows.)
_LINGER_ZERO = struct.pack("HH" if sys.platform == "win32" else "ii", 1, 0)


def reset(transport: asyncio.WriteTransport) -> None:
    """Abort the connection with a TCP RST (the peer reads ``ECONNRESET``)."""
    if transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        # The peer may already be gone; a failed setsockopt only means a plain close.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
    transport.abort()


def close_quietly(transport: asyncio.BaseTransport) -> None:
    """Close the connection normally (FIN after any buffered data), answering nothing more."""
    if not transport.is_closing():
        transport.close()


def listening_socket(host: str, port: int = 0) -> socket.socket:
    """A TCP socket listening on ``(host, port)``; port ``0`` picks a free one.

    It is created with ``IPPROTO_TCP`` explicitly: asyncio turns Nagle's algorithm off
    only for sockets that say they are TCP, and with it on, a reply written in pieces
    waits for the client's delayed ACK (about 40 ms per request on Linux).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if hasattr(socket, "SO_REUSEADDR") and not hasattr(socket, "SO_EXCLUSIVEADDRUSE"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock
