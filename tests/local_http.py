"""A stdlib HTTP server on a free loopback port, for tests that need a server to answer
in a way the chaos server does not (a header of their own, a body as it is)."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator

__all__ = ["AnswersOk", "QuietHandler", "serving"]


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A handler speaking HTTP/1.1 (keep-alive, as most servers) that logs nothing."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass


class AnswersOk(QuietHandler):
    """Answers every GET with a 200 and the body ``ok``, after ``delay`` seconds (a
    subclass sets it)."""

    delay = 0.0

    def do_GET(self) -> None:
        if self.delay:
            time.sleep(self.delay)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


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
