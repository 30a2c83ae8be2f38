"""A stdlib HTTP server on a free loopback port, for tests that need a server to answer
in a way the chaos server does not (a header of their own, a body as it is)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator

__all__ = ["QuietHandler", "serving"]


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A handler speaking HTTP/1.1 (keep-alive, as most servers) that logs nothing."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` answering on a threaded server for the block: its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
