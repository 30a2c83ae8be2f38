"""Raw TCP faults, observed with plain sockets and with httpx."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from retrysafe.chaos import FAULT_NAMES, KeyedChaos
from retrysafe.chaos.faults import TRICKLE_BODY, TRICKLE_HEAD, TRICKLE_INTERVAL, trickle_interval

REQUEST = b"GET / HTTP/1.1\r\nHost: chaos\r\n\r\n"


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def _read_until_reset(sock: socket.socket) -> tuple[bytes, bool]:
    """Everything received, and whether the connection ended in a reset (not a close)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        return received, True
    return received, False


def _connect(chaos: KeyedChaos, name: str) -> socket.socket:
    return socket.create_connection(_address(chaos.fault_url(name)), timeout=2)


def test_refused_port_refuses_the_connection(chaos: KeyedChaos, client: httpx.Client) -> None:
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(_address(chaos.fault_url("refused")), timeout=2)
    with pytest.raises(httpx.ConnectError):
        client.get(chaos.closed_port_url())


def test_reset_on_accept_resets_before_any_request(chaos: KeyedChaos) -> None:
    # The reset can beat connect() itself, so it may surface there or on the first read.
    def connect_and_read() -> bytes:
        with _connect(chaos, "reset_on_accept") as sock:
            return sock.recv(1024)

    with pytest.raises(ConnectionResetError):
        connect_and_read()


def test_reset_after_request_reads_the_head_then_resets(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    with _connect(chaos, "reset_after_request") as sock:
        sock.sendall(REQUEST)
        with pytest.raises(ConnectionResetError):
            sock.recv(1024)


def test_close_without_response_closes_cleanly_with_no_bytes(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    with _connect(chaos, "close_without_response") as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: chaos\r\nContent-Length: 5\r\n\r\nhello")
        assert sock.recv(1024) == b""


def test_reset_mid_body_sends_part_of_the_body_then_resets(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    with _connect(chaos, "reset_mid_body") as sock:
        sock.sendall(REQUEST)
        received, was_reset = _read_until_reset(sock)

    head, _, body = received.partition(b"\r\n\r\n")
    assert was_reset
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"content-length: 1000" in head
    assert 0 < len(body) < 1000


def test_reset_mid_body_sends_100_of_the_1000_promised_bytes(chaos: KeyedChaos) -> None:
    with _connect(chaos, "reset_mid_body") as sock:
        sock.sendall(REQUEST)
        received, was_reset = _read_until_reset(sock)

    assert was_reset
    assert received.partition(b"\r\n\r\n")[2] == b"x" * 100


def test_close_without_response_waits_for_the_whole_body_before_closing(
    chaos: KeyedChaos,
) -> None:
    with _connect(chaos, "close_without_response") as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: chaos\r\nContent-Length: 5\r\n\r\n")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1024)
        sock.settimeout(2)
        sock.sendall(b"hello")
        assert sock.recv(1024) == b""


def test_reset_mid_body_is_a_read_error_after_headers_for_httpx(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    with client.stream("GET", chaos.fault_url("reset_mid_body")) as response:
        assert response.status_code == 200
        with pytest.raises(httpx.ReadError):
            response.read()


def test_accept_never_read_accepts_and_stays_silent(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    with _connect(chaos, "accept_never_read") as sock:
        sock.sendall(REQUEST)
        sock.settimeout(0.2)
        with pytest.raises(TimeoutError):
            sock.recv(1024)


def test_garbage_status_line_is_a_protocol_error(chaos: KeyedChaos, client: httpx.Client) -> None:
    with _connect(chaos, "garbage_status_line") as sock:
        sock.sendall(REQUEST)
        assert not sock.recv(1024).startswith(b"HTTP/1.1 2")
    with pytest.raises(httpx.RemoteProtocolError):
        client.get(chaos.fault_url("garbage_status_line"))


def test_every_fault_has_a_distinct_port(chaos: KeyedChaos, client: httpx.Client) -> None:
    ports = {_address(chaos.fault_url(name))[1] for name in FAULT_NAMES if name != "refused"}

    assert len(ports) == len(FAULT_NAMES) - 1


def test_unknown_fault_names_are_rejected(chaos: KeyedChaos, client: httpx.Client) -> None:
    with pytest.raises(ValueError, match="reset_on_accept"):
        chaos.fault_url("explode")


def test_trickle_headers_sends_the_head_one_byte_at_a_time(chaos: KeyedChaos) -> None:
    """The default pace is one head byte every 50 ms: each read gets one byte, in time."""
    with _connect(chaos, "trickle_headers") as sock:
        sock.sendall(REQUEST)
        sock.settimeout(0.5)
        started = time.monotonic()
        pieces = [sock.recv(1024) for _ in range(6)]
        took = time.monotonic() - started

    assert b"".join(pieces) == TRICKLE_HEAD[:6]
    assert all(len(piece) == 1 for piece in pieces)
    assert 0.2 <= took < 1.0


def test_trickle_headers_ends_with_a_valid_response(chaos: KeyedChaos) -> None:
    """At a fast pace (``?interval_ms=1``) httpx reads a complete 200 and the short body."""
    url = chaos.fault_url("trickle_headers") + "?interval_ms=1"
    with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
        response = client.get(url)

    assert response.status_code == 200
    assert response.headers["x-trickle"] == "slow"
    assert response.content == TRICKLE_BODY


def test_trickle_headers_refuses_a_bad_interval(chaos: KeyedChaos, client: httpx.Client) -> None:
    """A pace that is not a number of milliseconds up to 1000 is answered 400 at once."""
    response = client.get(chaos.fault_url("trickle_headers") + "?interval_ms=soon")

    assert response.status_code == 400
    assert b"interval_ms" in response.content


def test_trickle_headers_head_takes_seconds_at_the_default_pace() -> None:
    """100 bytes at 50 ms: the head alone outlasts any short deadline several times over."""
    assert len(TRICKLE_HEAD) * TRICKLE_INTERVAL >= 4.0
    assert trickle_interval(b"GET /?interval_ms=7 HTTP/1.1\r\nHost: x\r\n\r\n") == 0.007
    assert trickle_interval(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") == TRICKLE_INTERVAL
    assert trickle_interval(b"GET /?interval_ms=5000 HTTP/1.1\r\n\r\n") is None


def test_trickle_headers_accepts_an_interval_up_to_one_second_and_refuses_more() -> None:
    """``interval_ms`` is a whole number from 0 to 1000: both ends are accepted."""
    request = b"GET /?interval_ms=%s HTTP/1.1\r\nHost: x\r\n\r\n"

    assert trickle_interval(request % b"1000") == 1.0
    assert trickle_interval(request % b"0") == 0.0
    assert trickle_interval(request % b"1001") is None
