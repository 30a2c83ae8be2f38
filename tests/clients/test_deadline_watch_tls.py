"""The requests shell's deadline holds over HTTPS as over plain HTTP.

requests' timeouts are per socket read, so a server trickling its head one byte at a
time never trips them; the watchdog ends the attempt by shutting its socket down. Over
TLS the socket it shuts is the plain one under the TLS object, and urllib3's HTTPS
pools must use retrysafe's watched connections: this holds both, against a real TLS
server on loopback with a certificate made for the test.
"""

from __future__ import annotations

import http.server
import shutil
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
