"""A large upload over HTTP/2 to a server that reads it slowly, granting a large
flow-control window (as many servers do): the upload must stop at its attempt's end.

Writes on a shared HTTP/2 connection are not cut by one attempt (a write may carry
every request's frames), and httpcore sends a body a frame at a time, each write
restarting its own timeout: a sync 8 MiB upload ran 5.5 s past its attempt's 1 s
(trial79). Each frame now goes only while the attempt has time.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest

import retrysafe
from h2_test_server import H2TestServer
from retrysafe import RetryPolicy

h2_connection = pytest.importorskip("h2.connection")
h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")
h2_settings = pytest.importorskip("h2.settings")

pytestmark = pytest.mark.anyio

H2_ONLY = {"http1": False, "http2": True}
UPLOAD = RetryPolicy(attempts=1, attempt_timeout=1.0, deadline=2.0)
BODY = b"x" * (8 << 20)
LARGEST_WINDOW = 2**31 - 1
#: What a loaded machine may add to the attempt's end.
SLACK = 0.8


class SlowReader(H2TestServer):
    """An HTTP/2 server that grants the largest flow-control windows and reads 64 KiB
    every 50 ms (about 1.3 MB/s); it never answers."""

    def serve(self, sock: socket.socket) -> None:
        conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=False))
        window = h2_settings.SettingCodes.INITIAL_WINDOW_SIZE
        conn.local_settings = h2_settings.Settings(
            client=False, initial_values={window: LARGEST_WINDOW}
        )
        conn.initiate_connection()
        conn.increment_flow_control_window(LARGEST_WINDOW - 65535)
        with contextlib.suppress(OSError, Exception):
            sock.sendall(conn.data_to_send())
            while True:
                time.sleep(0.05)
                data = sock.recv(65536)
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2_events.DataReceived):
                        conn.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                sock.sendall(conn.data_to_send())


@pytest.fixture
def slow_reader() -> Iterator[SlowReader]:
    server = SlowReader()
    yield server
    server.close()


def test_a_sync_upload_stops_at_its_attempts_end(slow_reader: SlowReader) -> None:
    started = time.monotonic()
    with (
        retrysafe.Client(policy=UPLOAD, **H2_ONLY) as client,
        pytest.raises(retrysafe.TransportError) as raised,
    ):
        client.post(f"{slow_reader.url}/upload", content=BODY)
    assert time.monotonic() - started < UPLOAD.attempt_timeout + SLACK  # (it took 5.4 s)
    assert raised.value.processed == "maybe"  # (its headers and part of it went out)


async def test_an_async_upload_stops_at_its_attempts_end(slow_reader: SlowReader) -> None:
    started = time.monotonic()
    async with retrysafe.AsyncClient(policy=UPLOAD, **H2_ONLY) as client:
        with pytest.raises(retrysafe.TransportError) as raised:
            await client.post(f"{slow_reader.url}/upload", content=BODY)
    assert time.monotonic() - started < UPLOAD.attempt_timeout + SLACK
    assert raised.value.processed == "maybe"
