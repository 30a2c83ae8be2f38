"""The requests shell's watchdog shuts down only the socket of an attempt still using it."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from retrysafe.requests.deadline_watch import _BoundedHTTPPool, current_watch, watchdog


class _Ok(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_a_watch_running_out_after_its_connection_went_back_to_the_pool_leaves_it_alone(
    port: int,
) -> None:
    """An attempt that ends right at its time puts its connection back before it tells
    the watchdog it is done; if its watch runs out in between, the socket is another
    request's by then, and must not be shut under it."""
    pool = _BoundedHTTPPool("127.0.0.1", port)
    watch = watchdog.watch(time.monotonic() + 60)
    token = current_watch.set(watch)
    try:
        assert pool.urlopen("GET", "/").data == b"ok"  # (read whole: back in the pool)
    finally:
        current_watch.reset(token)
    (connection,) = [conn for conn in pool.pool.queue if conn is not None]  # type: ignore[union-attr]
    socket_before = connection.sock
    watch._expire()  # the watchdog, late: the attempt has not released its watch yet
    assert pool.urlopen("GET", "/").data == b"ok"
    # The same socket, still open: not shut down under the next request and remade.
    assert connection.sock is socket_before
    watchdog.release(watch)
