"""The aiohttp middleware sends a multipart body again when every part is held in
memory, as ``retrysafe.Client`` does with ``files=`` bytes (trial91: a ``FormData`` with
a bytes file part was taken for a stream, and a 503 was final). A part read from a file
stays unsent again: what it would send depends on where the file was left. Over a real
loopback socket; the server notes each body it received.
"""

from __future__ import annotations

import asyncio
import io
import socket

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


def test_a_multipart_form_with_a_bytes_file_part_is_sent_again_the_same() -> None:
    server = _BusyOnceServer()
    form = aiohttp.FormData()
    form.add_field("file", b"the file's bytes", filename="a.txt")
    form.add_field("name", "value")
    with loopback_server(server) as url:
        attempts = asyncio.run(_put(url, form))
    assert attempts == 2
    first, second = server.bodies
    assert first == second
    assert b"the file's bytes" in first
    assert b"value" in first


def test_a_multipart_form_with_a_part_read_from_a_file_is_not_sent_again() -> None:
    server = _BusyOnceServer()
    form = aiohttp.FormData()
    form.add_field("file", io.BytesIO(b"read from a file"), filename="a.txt")
    with loopback_server(server) as url, pytest.raises(retrysafe.ApiError) as caught:
        asyncio.run(_put(url, form))
    assert caught.value.reason == "unsafe_to_repeat"
    assert len(server.bodies) == 1
