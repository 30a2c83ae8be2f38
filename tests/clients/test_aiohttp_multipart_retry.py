"""The aiohttp middleware sends a body again when aiohttp sends it the same: bytes, a
multipart form of bytes (trial91: a ``FormData`` with a bytes file part was taken for a
stream, and a 503 was final), and a file that can seek, alone or as a form's part, which
aiohttp seeks back to where it found it before each send (trial105: a file body was sent
once, where urllib3 and ``retrysafe.Client`` send it again). Over a real loopback socket;
the server notes each body it received.
"""

from __future__ import annotations

import asyncio
import io
import pathlib
import socket
from collections.abc import Callable

import aiohttp
import pytest
from tests.local_http import loopback_server

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware, report_of

pytestmark = pytest.mark.timeout(30)


class _BusyOnceServer:
    """Answers its first request 503 and every later one 200, noting each body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, connection: socket.socket, request: bytes) -> None:
        head, _, body = request.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += connection.recv(65536)
        self.bodies.append(body)
        status = b"503 Service Unavailable" if len(self.bodies) == 1 else b"200 OK"
        connection.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n")


async def _put(url: str, form: aiohttp.FormData) -> int:
    policy = RetryPolicy(attempts=2, backoff_base=0.01)
    async with (
        aiohttp.ClientSession(middlewares=(RetryMiddleware(policy=policy),)) as session,
        session.put(f"{url}/upload", data=form) as response,
    ):
        return report_of(response).attempts


@pytest.mark.parametrize(
    "part",
    [lambda: b"the file's bytes", lambda: io.BytesIO(b"the file's bytes")],
    ids=["bytes", "read from a file"],
)
def test_a_multipart_form_with_a_file_part_is_sent_again_the_same(
    part: Callable[[], bytes | io.BytesIO],
) -> None:
    server = _BusyOnceServer()
    form = aiohttp.FormData()
    form.add_field("file", part(), filename="a.txt")
    form.add_field("name", "value")
    with loopback_server(server) as url:
        attempts = asyncio.run(_put(url, form))
    assert attempts == 2
    first, second = server.bodies
    assert first == second
    assert b"the file's bytes" in first
    assert b"value" in first


async def _send(url: str, method: str, body: object) -> int:
    policy = RetryPolicy(attempts=2, backoff_base=0.01)
    async with (
        aiohttp.ClientSession(middlewares=(RetryMiddleware(policy=policy),)) as session,
        session.request(method, f"{url}/upload", data=body) as response,
    ):
        return report_of(response).attempts


@pytest.mark.parametrize("method", ["PUT", "POST"])
def test_a_file_body_that_can_seek_is_sent_again_from_where_it_began(
    tmp_path: pathlib.Path, method: str
) -> None:
    """(A POST too: a 503 says the server did no work.) The file was read from its
    second line on: that is where each attempt starts."""
    path = tmp_path / "upload.csv"
    path.write_bytes(b"header\n" + b"a,b\n1,2\n" * 5000)
    server = _BusyOnceServer()
    with path.open("rb") as file, loopback_server(server) as url:
        file.readline()
        attempts = asyncio.run(_send(url, method, file))
    assert attempts == 2
    first, second = server.bodies
    assert first == second == b"a,b\n1,2\n" * 5000


def test_a_bytesio_body_is_sent_again() -> None:
    server = _BusyOnceServer()
    with loopback_server(server) as url:
        attempts = asyncio.run(_send(url, "PUT", io.BytesIO(b"row\n" * 20000)))
    assert attempts == 2
    assert server.bodies == [b"row\n" * 20000] * 2


class _Unseekable(io.BytesIO):
    """A file that says it cannot seek (a pipe's, a socket's)."""

    def seekable(self) -> bool:
        return False


def test_a_file_body_that_cannot_seek_is_sent_once() -> None:
    server = _BusyOnceServer()
    with loopback_server(server) as url, pytest.raises(retrysafe.ApiError) as caught:
        asyncio.run(_send(url, "PUT", _Unseekable(b"row\n" * 100)))
    assert (caught.value.reason, caught.value.spent_body) == ("unsafe_to_repeat", True)
    assert len(server.bodies) == 1
