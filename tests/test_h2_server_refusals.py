"""An HTTP/2 server that refuses a request, or garbles its answer: was it processed?

A stream reset with REFUSED_STREAM, or a GOAWAY whose last stream is 0, says the server
did not process the request (RFC 9113, 8.7): even a POST without a key may go again.
retrysafe read both as "maybe processed", and gave the POST up (trial79).

httpcore raises every h2 protocol error on a connection as a ``LocalProtocolError``,
which retrysafe read as "the request could not be sent as built": a POST the server had
received and answered with a header block h2 cannot decode (a broken proxy) was
reported ``processed="no"`` (trial79), and a caller trusting that would send the charge
again. Once the request's HEADERS went out, such an error is the remote protocol error
it may be: ``processed="maybe"``. A request h2 refuses before sending stays an invalid
request, never sent.
"""

from __future__ import annotations

import contextlib
import math
import socket
import struct
import time
from collections.abc import Iterator

import httpx
import pytest

import retrysafe
from h2_test_server import H2TestServer
from retrysafe import RetryPolicy

h2_connection = pytest.importorskip("h2.connection")
h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")
h2_errors = pytest.importorskip("h2.errors")

pytestmark = pytest.mark.anyio

H2_ONLY = {"http1": False, "http2": True}
QUICK = RetryPolicy(attempts=3, attempt_timeout=2.0, deadline=3.0, backoff_base=0.01)
#: A dynamic table size update whose integer never ends: no HPACK decoder can read it.
UNDECODABLE_BLOCK = b"\x3f\xff\xff\xff\xff\xff"


class GarblingServer(H2TestServer):
    """An HTTP/2 server answering by path, once a request has come whole: ``/orders``
    with a HEADERS frame holding an undecodable block; ``/refused`` with a reset
    (REFUSED_STREAM) the first time, then 200; ``/goaway`` with a GOAWAY whose last
    stream is 0 on the first connection, then 200. It counts the requests it got, by
    path."""

    def __init__(self) -> None:
        self.received: dict[str, int] = {}
        super().__init__()

    def serve(self, sock: socket.socket) -> None:
        conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=False))
        conn.initiate_connection()
        paths: dict[int, str] = {}
        with contextlib.suppress(OSError, Exception):
            sock.sendall(conn.data_to_send())
            while data := sock.recv(65536):
                garbled: list[int] = []
                for event in conn.receive_data(data):
                    if isinstance(event, h2_events.RequestReceived):
                        paths[event.stream_id] = dict(event.headers)[b":path"].decode()
                    elif isinstance(event, h2_events.StreamEnded):
                        path = paths[event.stream_id]
                        times = self.received[path] = self.received.get(path, 0) + 1
                        if path == "/orders":
                            garbled.append(event.stream_id)
                        elif path == "/refused" and times == 1:
                            conn.reset_stream(event.stream_id, h2_errors.ErrorCodes.REFUSED_STREAM)
                        elif path == "/goaway" and times == 1:
                            conn.close_connection(error_code=0, last_stream_id=0)
                        else:
                            conn.send_headers(
                                event.stream_id, [(":status", "200"), ("content-length", "2")]
                            )
                            conn.send_data(event.stream_id, b"ok", end_stream=True)
                sock.sendall(conn.data_to_send())
                for stream_id in garbled:  # (HEADERS, END_HEADERS, the bad block)
                    length = struct.pack(">I", len(UNDECODABLE_BLOCK))[1:]
                    frame = length + b"\x01\x04" + struct.pack(">I", stream_id)
                    sock.sendall(frame + UNDECODABLE_BLOCK)


@pytest.fixture
def garbling() -> Iterator[GarblingServer]:
    server = GarblingServer()
    yield server
    server.close()


def _assert_maybe_processed_once(error: retrysafe.TransportError, server: GarblingServer) -> None:
    assert error.processed == "maybe"
    assert error.reason == "unsafe_to_repeat"
    assert error.outcome == "remote_protocol_error"
    assert server.received == {"/orders": 1}  # (sent once, and not again)


#: No limit on the attempt: its sending is noted all the same (review76).
UNBOUNDED = RetryPolicy(attempts=3, attempt_timeout=math.inf, deadline=math.inf)


@pytest.mark.parametrize("policy", [QUICK, UNBOUNDED], ids=["timed", "unbounded"])
def test_a_post_answered_with_a_garbled_header_block_may_have_been_processed_sync(
    garbling: GarblingServer, policy: RetryPolicy
) -> None:
    with (
        retrysafe.Client(policy=policy, **H2_ONLY) as client,
        pytest.raises(retrysafe.TransportError) as raised,
    ):
        client.post(f"{garbling.url}/orders", json={"item": 1})
    _assert_maybe_processed_once(raised.value, garbling)


async def test_a_post_answered_with_a_garbled_header_block_may_have_been_processed_async(
    garbling: GarblingServer,
) -> None:
    async with retrysafe.AsyncClient(policy=QUICK, **H2_ONLY) as client:
        with pytest.raises(retrysafe.TransportError) as raised:
            await client.post(f"{garbling.url}/orders", json={"item": 1})
    _assert_maybe_processed_once(raised.value, garbling)


def test_a_garbled_answer_is_told_apart_on_a_coarse_clock(
    garbling: GarblingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the clock ticks every 15.6 ms, the request's HEADERS go out in the tick its
    attempt started: its sending is told by being noted, not by a later time (review77:
    the two times were compared, and equal, the POST read as never received)."""
    real = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: math.floor(real() / 0.015625) * 0.015625)
    with (
        retrysafe.Client(policy=QUICK, **H2_ONLY) as client,
        pytest.raises(retrysafe.TransportError) as raised,
    ):
        client.post(f"{garbling.url}/orders", json={"item": 1})
    _assert_maybe_processed_once(raised.value, garbling)


def test_the_drop_in_transport_raises_httpxs_remote_protocol_error_over_the_local_one(
    garbling: GarblingServer,
) -> None:
    transport = retrysafe.RetryTransport(httpx.HTTPTransport(http1=False, http2=True))
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(httpx.RemoteProtocolError) as raised,
    ):
        client.post(f"{garbling.url}/orders", json={"item": 1})
    assert isinstance(raised.value.__cause__, httpx.LocalProtocolError)  # (httpcore's)
    assert garbling.received == {"/orders": 1}


def test_a_request_h2_refuses_to_send_is_still_never_sent(garbling: GarblingServer) -> None:
    """``TE`` may only say ``trailers`` over HTTP/2: h2 refuses the HEADERS before any
    byte of them goes out. It may have fed the headers before it to its compression
    table, which the server's then no longer matches: the next request goes on a new
    connection (review76: on the same one, the server could not decode it)."""
    with retrysafe.Client(policy=QUICK, **H2_ONLY) as client:
        with pytest.raises(retrysafe.TransportError) as raised:
            client.post(f"{garbling.url}/orders", json={"item": 1}, headers={"TE": "gzip"})
        assert client.get(f"{garbling.url}/other").status_code == 200
    assert raised.value.processed == "no"
    assert raised.value.outcome == "invalid_request"
    assert raised.value.attempts == 1
    assert garbling.received == {"/other": 1}
    assert garbling.connections == 2


class _Passing(httpx.BaseTransport):
    """A transport of the user's around httpx's own: retrysafe cannot watch its sends."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport(http1=False, http2=True)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def test_a_request_h2_refuses_on_a_transport_retrysafe_cannot_watch_stays_unsent(
    garbling: GarblingServer,
) -> None:
    """There its attempts count as sent from their start, and nothing tells a refusal
    from a garbled answer: h2's error stays the invalid request it mostly is (review76:
    it became a remote error, retried, and counted against the breaker)."""
    with (
        retrysafe.Client(transport=_Passing(), policy=QUICK) as client,
        pytest.raises(retrysafe.TransportError) as raised,
    ):
        client.get(f"{garbling.url}/other", headers={"TE": "gzip"})
    assert (raised.value.outcome, raised.value.processed) == ("invalid_request", "no")
    assert raised.value.attempts == 1


@pytest.mark.parametrize("path", ["/refused", "/goaway"])
def test_a_post_the_server_refused_unprocessed_is_sent_again_sync(
    garbling: GarblingServer, path: str
) -> None:
    with retrysafe.Client(policy=QUICK, **H2_ONLY) as client:
        response = client.post(f"{garbling.url}{path}", json={"item": 1})
    assert response.status_code == 200
    history = retrysafe.report_of(response).history
    assert [record.outcome for record in history] == ["refused_stream", "success"]
    assert garbling.received == {path: 2}


@pytest.mark.parametrize("path", ["/refused", "/goaway"])
async def test_a_post_the_server_refused_unprocessed_is_sent_again_async(
    garbling: GarblingServer, path: str
) -> None:
    async with retrysafe.AsyncClient(policy=QUICK, **H2_ONLY) as client:
        response = await client.post(f"{garbling.url}{path}", json={"item": 1})
    assert response.status_code == 200
    history = retrysafe.report_of(response).history
    assert [record.outcome for record in history] == ["refused_stream", "success"]
    assert garbling.received == {path: 2}
