"""A stdlib HTTP server on a free loopback port, for tests that need a server to answer
in a way the chaos server does not (a header of their own, a body as it is); a raw
socket one answering as a function writes (a head cut short, a body held); and an
HTTP/2 one in a process of its own (``tests/h2_delay_server.py``)."""

from __future__ import annotations

import contextlib
import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "AnswersOk",
    "QuietHandler",
    "answers_ok_but_holds_streams",
    "loopback_server",
    "serving",
    "serving_h2_apart",
]


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


@contextlib.contextmanager
def loopback_server(answer: Callable[[socket.socket, bytes], None]) -> Iterator[str]:
    """A loopback server calling ``answer`` with each connection and the request's head:
    its base URL, for the block."""
    listener = socket.create_server(("127.0.0.1", 0))

    def handle(connection: socket.socket) -> None:
        with contextlib.suppress(OSError), connection:
            head = b""
            while b"\r\n\r\n" not in head:
                received = connection.recv(65536)
                if not received:
                    return
                head += received
            answer(connection, head)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                threading.Thread(target=handle, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def answers_ok_but_holds_streams(connection: socket.socket, request: bytes) -> None:
    """``/held`` sends its head and then holds its body 5 s; anything else is answered."""
    if request.startswith(b"GET /held "):
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
        time.sleep(5)
        return
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
