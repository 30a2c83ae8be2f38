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
import http.server
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


class _Trickling(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1: ``/hold`` answers after 0.15 s; anything else sends its headers at once
    and its ten-byte body a byte every 0.1 s the first time (at once after)."""

    protocol_version = "HTTP/1.1"
    received: list[str]

    def do_GET(self) -> None:
        self.received.append(self.path)
        if self.path == "/hold":
            time.sleep(0.15)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        first = self.received.count(self.path) == 1
        self.send_response(200)
        self.send_header("Content-Length", "10")
        self.end_headers()
        self.wfile.flush()
        for _ in range(10):
            if first:
                time.sleep(0.1)
            self.wfile.write(b"x")
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def trickling() -> Iterator[tuple[str, type[_Trickling]]]:
    handler = type("Handler", (_Trickling,), {"received": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


#: Two connections: another call holds one for 0.15 s while the first copy trickles.
TWO_CONNECTIONS = httpx.Limits(max_connections=2)


def test_a_copy_given_a_connection_another_call_frees_goes_while_its_sibling_trickles_sync(
    trickling: tuple[str, type[_Trickling]],
) -> None:
    """review78: the first copy's answer counted as awaiting judgement from its headers,
    so the hedged copy, given the connection another call freed, waited out that copy's
    1 s body. Only a body that has closed awaits judgement now: the copy goes, and wins."""
    url, handler = trickling
    with retrysafe.Client(policy=HEDGED, limits=TWO_CONNECTIONS) as client:
        holder = threading.Thread(target=client.get, args=(f"{url}/hold",))
        holder.start()
        time.sleep(0.02)
        started = time.monotonic()
        response = client.get(f"{url}/trickle")
        took = time.monotonic() - started
        holder.join()
    report = retrysafe.report_of(response)
    assert report is not None
    assert (response.content, report.winner) == (b"x" * 10, 2)
    assert took < 0.8  # (the first copy's body takes 1 s)
    assert handler.received.count("/trickle") == 2


async def test_a_copy_given_a_connection_another_call_frees_goes_while_its_sibling_trickles_async(
    trickling: tuple[str, type[_Trickling]],
) -> None:
    url, handler = trickling
    async with (
        retrysafe.AsyncClient(policy=HEDGED, limits=TWO_CONNECTIONS) as client,
        anyio.create_task_group() as group,
    ):
        group.start_soon(client.get, f"{url}/hold")
        await anyio.sleep(0.02)
        started = time.monotonic()
        response = await client.get(f"{url}/trickle")
        took = time.monotonic() - started
    report = retrysafe.report_of(response)
    assert report is not None
    assert (response.content, report.winner) == (b"x" * 10, 2)
    assert took < 0.8
    assert handler.received.count("/trickle") == 2


class GoingAwayServer(H2TestServer):
    """HTTP/2: on its first connection, ``/long`` is answered after 0.4 s, and any other
    request is refused by a GOAWAY naming ``/long``'s stream the last it processes (the
    connection closes after ``/long``'s answer); later connections answer at once."""

    def __init__(self) -> None:
        self.received: list[tuple[int, str]] = []
        super().__init__()

    def serve(self, sock: socket.socket) -> None:
        number = self.connections
        conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=False))
        conn.initiate_connection()
        lock = threading.RLock()

        def answer(stream_id: int, then_close: bool = False) -> None:
            with lock, contextlib.suppress(Exception):
                conn.send_headers(stream_id, [(":status", "200"), ("content-length", "2")])
                conn.send_data(stream_id, b"ok", end_stream=True)
                sock.sendall(conn.data_to_send())
                if then_close:
                    time.sleep(0.05)
                    sock.close()

        with contextlib.suppress(OSError):
            sock.sendall(conn.data_to_send())
            while data := sock.recv(65536):
                with lock:
                    for event in conn.receive_data(data):
                        if not isinstance(event, h2_events.RequestReceived):
                            continue
                        path = dict(event.headers)[b":path"].decode()
                        self.received.append((number, path))
                        if number > 1:
                            answer(event.stream_id)
                        elif path == "/long":
                            threading.Timer(0.4, answer, (event.stream_id, True)).start()
                        else:
                            conn.close_connection(last_stream_id=1)
                    sock.sendall(conn.data_to_send())


def test_a_copy_refused_above_a_goaway_is_not_held_by_its_own_closed_stream_sync() -> None:
    """review78, against a first version that took a copy's answer as in hand whenever
    its HTTP/2 stream closed: httpcore closes the stream of a request refused above a
    GOAWAY before it sends the request again, and the copy then waited for its own
    answer to be judged, until its 2 s attempt ran out, and went out late."""
    server = GoingAwayServer()
    policy = RetryPolicy(hedge_after=5.0, attempt_timeout=2.0, deadline=10.0)
    one = httpx.Limits(max_connections=1)
    try:
        with retrysafe.Client(policy=policy, limits=one, **H2_ONLY) as client:
            holder = threading.Thread(target=client.get, args=(f"{server.url}/long",))
            holder.start()
            time.sleep(0.1)
            started = time.monotonic()
            response = client.get(f"{server.url}/go")
            took = time.monotonic() - started
            holder.join()
    finally:
        server.close()
    assert response.status_code == 200
    assert took < 1.0
    assert [path for _, path in server.received].count("/go") == 2  # (refused, then sent)
