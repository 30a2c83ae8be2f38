"""A hedged copy that waits for a way to send (an HTTP/2 stream, a pooled connection)
and is given one as its sibling's answer arrives.

At its limit of concurrent streams, an HTTP/2 connection makes a new request wait for
a stream to close. A copy hedged there waits for the first copy's stream: when that
copy's answer has been read, its stream closes and the copy gets it, before the
coordinator has judged that answer a win. It went out after the call had returned,
and the server did its work (trial82: five runs in five, sync and asyncio; a keyed POST
reached the server twice). Now a copy given its way while a sibling's answer is being
judged waits for that judgement, and sends nothing if the sibling won. It still goes
when the sibling's answer does not end the round (a 503).

The server is written on h2 here, a thread per connection: it allows ``max_streams``
streams, answers ``/slow`` after 0.3 s the first time (at once after), ``/fail`` with a
503 the first time, and anything else with 200, and logs every request it receives.
Wall-clock assertions are loose bounds.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import anyio
import httpx
import pytest

import retrysafe
from h2_test_server import H2TestServer
from retrysafe import RetryPolicy

h2_connection = pytest.importorskip("h2.connection")
h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")
h2_settings = pytest.importorskip("h2.settings")

pytestmark = pytest.mark.anyio

#: A copy goes after 50 ms; the first ``/slow`` takes 300 ms.
HEDGED = RetryPolicy(hedge_after=0.05, attempt_timeout=3.0, deadline=5.0)
H2_ONLY = {"http1": False, "http2": True}


class LoggingServer(H2TestServer):
    """The HTTP/2 server of this module (see its docstring)."""

    def __init__(self, max_streams: int) -> None:
        self.max_streams = max_streams
        self.received: list[str] = []
        super().__init__()

    def serve(self, sock: socket.socket) -> None:
        conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=False))
        conn.local_settings = h2_settings.Settings(
            client=False,
            initial_values={h2_settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams},
        )
        conn.initiate_connection()
        lock = threading.RLock()
        with contextlib.suppress(OSError):
            sock.sendall(conn.data_to_send())
            while data := sock.recv(65536):
                with lock:
                    for event in conn.receive_data(data):
                        if isinstance(event, h2_events.RequestReceived):
                            path = dict(event.headers)[b":path"].decode()
                            self.received.append(path)
                            self._answer(conn, lock, sock, event.stream_id, path)
                    sock.sendall(conn.data_to_send())

    def _answer(
        self, conn: object, lock: threading.RLock, sock: socket.socket, stream_id: int, path: str
    ) -> None:
        first = self.received.count(path) == 1
        status = "503" if path == "/fail" and first else "200"

        def send() -> None:
            with lock, contextlib.suppress(Exception):
                conn.send_headers(  # type: ignore[attr-defined]
                    stream_id, [(":status", status), ("content-length", "2")]
                )
                conn.send_data(stream_id, b"ok", end_stream=True)  # type: ignore[attr-defined]
                sock.sendall(conn.data_to_send())  # type: ignore[attr-defined]

        if path in ("/slow", "/fail") and first:
            threading.Timer(0.3, send).start()
        else:
            send()


@pytest.fixture
def one_stream() -> Iterator[LoggingServer]:
    server = LoggingServer(max_streams=1)
    yield server
    server.close()


def _judged(server: LoggingServer, response: httpx.Response, path: str) -> None:
    """The call won with its first copy; the copy that waited for the stream sent nothing."""
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.winner == 1
    time.sleep(0.3)  # (a copy sent late would have reached the server by now)
    assert server.received == ["/warm", path]
    assert server.connections == 1


def test_a_copy_waiting_for_a_stream_sends_nothing_when_its_sibling_wins_sync(
    one_stream: LoggingServer,
) -> None:
    with retrysafe.Client(policy=HEDGED, **H2_ONLY) as client:
        client.get(f"{one_stream.url}/warm", policy=RetryPolicy())
        started = time.monotonic()
        response = client.get(f"{one_stream.url}/slow")
        assert time.monotonic() - started < 2.0
        _judged(one_stream, response, "/slow")
        assert client.get(f"{one_stream.url}/after", policy=RetryPolicy()).text == "ok"


def test_a_keyed_post_waiting_for_a_stream_is_not_sent_again_after_its_sibling_won_sync(
    one_stream: LoggingServer,
) -> None:
    with retrysafe.Client(policy=HEDGED, **H2_ONLY) as client:
        client.get(f"{one_stream.url}/warm", policy=RetryPolicy())
        response = client.post(f"{one_stream.url}/slow", content=b"x", idempotency_key=True)
        _judged(one_stream, response, "/slow")


async def test_a_copy_waiting_for_a_stream_sends_nothing_when_its_sibling_wins_async(
    one_stream: LoggingServer,
) -> None:
    async with retrysafe.AsyncClient(policy=HEDGED, **H2_ONLY) as client:
        await client.get(f"{one_stream.url}/warm", policy=RetryPolicy())
        started = time.monotonic()
        response = await client.get(f"{one_stream.url}/slow")
        assert time.monotonic() - started < 2.0
        await anyio.sleep(0.3)
        _judged(one_stream, response, "/slow")
        answer = await client.get(f"{one_stream.url}/after", policy=RetryPolicy())
        assert answer.text == "ok"


def test_a_copy_waiting_for_a_stream_still_goes_when_its_sibling_fails_sync(
    one_stream: LoggingServer,
) -> None:
    """The sibling's answer is a 503: the round goes on, and the copy that waited for
    the stream is sent and wins."""
    with retrysafe.Client(policy=HEDGED, **H2_ONLY) as client:
        client.get(f"{one_stream.url}/warm", policy=RetryPolicy())
        response = client.get(f"{one_stream.url}/fail")
    report = retrysafe.report_of(response)
    assert report is not None
    assert response.status_code == 200
    assert [attempt.status for attempt in report.history] == [503, 200]
    assert one_stream.received == ["/warm", "/fail", "/fail"]


async def test_a_copy_waiting_for_a_stream_still_goes_when_its_sibling_fails_async(
    one_stream: LoggingServer,
) -> None:
    async with retrysafe.AsyncClient(policy=HEDGED, **H2_ONLY) as client:
        await client.get(f"{one_stream.url}/warm", policy=RetryPolicy())
        response = await client.get(f"{one_stream.url}/fail")
    report = retrysafe.report_of(response)
    assert report is not None
    assert response.status_code == 200
    assert [attempt.status for attempt in report.history] == [503, 200]
    assert one_stream.received == ["/warm", "/fail", "/fail"]
