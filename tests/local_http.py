"""A stdlib HTTP server on a free loopback port, for tests that need a server to answer
in a way the chaos server does not (a header of their own, a body as it is); and an
HTTP/2 one in a process of its own (``tests/h2_delay_server.py``)."""

from __future__ import annotations

import contextlib
import http.server
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["AnswersOk", "QuietHandler", "serving", "serving_h2_apart"]


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


class _ManyAtOnce(http.server.ThreadingHTTPServer):
    # (socketserver's listen backlog is 5: dozens of connections at once would wait in
    # SYN retries and time out connecting; and a handler still sleeping is not waited for)
    request_queue_size = 128
    daemon_threads = True


@contextlib.contextmanager
def serving(
    handler: type[http.server.BaseHTTPRequestHandler], *, many_at_once: bool = False
) -> Iterator[str]:
    """``handler`` answering on a threaded server for the block: its base URL.
    ``many_at_once``: for dozens of connections made at once."""
    server_type = _ManyAtOnce if many_at_once else http.server.ThreadingHTTPServer
    server = server_type(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def serving_h2_apart(max_streams: int) -> Iterator[str]:
    """The base URL of ``tests/h2_delay_server.py`` (HTTP/2 without TLS, ``max_streams``
    concurrent streams per connection), run in a process of its own so that the test's
    clients do not slow it; stopped on leaving."""
    script = Path(__file__).with_name("h2_delay_server.py")
    server = subprocess.Popen(
        [sys.executable, str(script), str(max_streams)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        port = server.stdout.readline().strip()
        assert port.isdigit(), f"the server did not start: {port!r}"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stdin.close()  # (its signal to stop)
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
