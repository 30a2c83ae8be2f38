"""The requests shell's deadline holds over HTTPS as over plain HTTP.

requests' timeouts are per socket read, so a server trickling its head one byte at a
time never trips them; the watchdog ends the attempt by shutting its socket down. Over
TLS the socket it shuts is the plain one under the TLS object, and urllib3's HTTPS
pools must use retrysafe's watched connections: this holds both, against a real TLS
server on loopback with a certificate made for the test.
"""

from __future__ import annotations

import contextlib
import http.server
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

import retrysafe
from retrysafe.requests import RetryAdapter

#: The head the server trickles (at /trickled): one byte per 50 ms, about 5 s in all.
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Padding: " + b"." * 40 + b"\r\n"
_BYTE_EVERY = 0.05


class _TrickledHead(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path != "/trickled":  # (at once: the certificate and TLS set-up work)
            self.wfile.write(_HEAD + b"Content-Length: 2\r\n\r\nok")
            return
        try:
            for byte in _HEAD:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(_BYTE_EVERY)
            self.wfile.write(b"Content-Length: 2\r\n\r\nok")
        except (OSError, ssl.SSLError):
            pass  # the client hung up: what the test wants

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, and its key."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: no certificate for the TLS server")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture
def tls_url(certificate: tuple[Path, Path]) -> Iterator[str]:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TrickledHead)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_a_trickled_head_over_tls_ends_at_the_deadline(
    tls_url: str, certificate: tuple[Path, Path]
) -> None:
    policy = retrysafe.RetryPolicy(deadline=1, attempt_timeout=10)
    with requests.Session() as session:
        session.mount("https://", RetryAdapter(policy=policy))
        started = time.monotonic()
        with pytest.raises(retrysafe.DeadlineExceeded) as caught:
            session.get(tls_url + "trickled", verify=str(certificate[0]), timeout=5)
        seconds = time.monotonic() - started
    assert seconds < 1.5
    assert caught.value.outcome == "attempt_timeout"


def test_a_tls_server_in_time_still_answers(certificate: tuple[Path, Path], tls_url: str) -> None:
    """The same server and certificate, answering at once: the call succeeds (the
    certificate and the TLS set-up are sound, so the test above fails only on time)."""
    policy = retrysafe.RetryPolicy(deadline=1, attempt_timeout=10)
    with requests.Session() as session:
        session.mount("https://", RetryAdapter(policy=policy))
        response = session.get(tls_url, verify=str(certificate[0]), timeout=5)
    assert response.status_code == 200
    assert response.text == "ok"


def _pipe(source: socket.socket | ssl.SSLSocket, sink: socket.socket | ssl.SSLSocket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def https_proxy_url(certificate: tuple[Path, Path]) -> Iterator[str]:
    """An HTTPS proxy (TLS to it, then CONNECT) on loopback: its URL."""
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))

    def tunnel(raw: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            client = context.wrap_socket(raw, server_side=True)
            head = b""
            while b"\r\n\r\n" not in head:
                head += client.recv(65536)
            host, port = head.split()[1].decode().rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
            _pipe(client, upstream)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                raw, _ = listener.accept()
                threading.Thread(target=tunnel, args=(raw,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_a_trickled_head_through_an_https_proxy_ends_at_the_deadline_and_the_watchdog_lives_on(
    tls_url: str, https_proxy_url: str
) -> None:
    """HTTPS through an HTTPS proxy is TLS inside TLS: urllib3's connection holds an
    SSLTransport, no socket. Shutting it down as a socket raised TypeError in the
    watchdog's thread, which ended: the call ran the whole trickle, and no attempt of the
    process was cut afterwards (review87)."""
    policy = retrysafe.RetryPolicy(deadline=1, attempt_timeout=10)
    with requests.Session() as session:
        session.mount("https://", RetryAdapter(policy=policy))
        for proxies in ({"https": https_proxy_url}, None):  # (then a direct call)
            started = time.monotonic()
            with pytest.raises(retrysafe.DeadlineExceeded):
                session.get(tls_url + "trickled", verify=False, proxies=proxies, timeout=5)
            assert time.monotonic() - started < 1.5
