"""What a request tells retrysafe by itself: its dependency's default name, its key,
whether its body can be sent again."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from retrysafe.request_facts import default_dependency, idempotency_key_of, replayable_body


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://api.test/v1/things?page=2", "https://api.test:443"),
        ("http://api.test/", "http://api.test:80"),
        ("http://api.test:8080/x", "http://api.test:8080"),
        ("HTTPS://API.Test/x", "https://api.test:443"),
        # an IPv6 address keeps its brackets: the name is an origin as a URL writes it
        ("http://[::1]:8080/x", "http://[::1]:8080"),
        ("https://[2001:db8::1]/x", "https://[2001:db8::1]:443"),
    ],
)
def test_the_default_dependency_is_the_origin(url: str, name: str) -> None:
    assert default_dependency(httpx.URL(url)) == name
    assert default_dependency(httpx.URL(url)) == name  # (and again, from the cache)


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({}, None),
        ({"Idempotency-Key": "k-1"}, "k-1"),
        ({"idempotency-key": "k-2"}, "k-2"),
        ({"Idempotency-Key": ""}, None),
        ({"Idempotency-Key": "   "}, None),
    ],
)
def test_the_idempotency_key_is_the_header_unless_blank(
    headers: dict[str, str], key: str | None
) -> None:
    assert idempotency_key_of(httpx.Request("POST", "https://api.test/", headers=headers)) == key


def test_the_default_dependency_names_each_port_of_a_host_apart() -> None:
    """Origins differ by port: one name per (scheme, host, port), however often asked."""
    names = [
        default_dependency(httpx.URL(url))
        for url in (
            "http://ports.test/a",
            "http://ports.test:8080/a",
            "http://ports.test:9090/a",
            "https://ports.test/a",
            "http://ports.test:8080/b",
            "http://ports.test/b",
        )
    ]
    assert names == [
        "http://ports.test:80",
        "http://ports.test:8080",
        "http://ports.test:9090",
        "https://ports.test:443",
        "http://ports.test:8080",
        "http://ports.test:80",
    ]


def test_a_host_called_on_more_ports_than_are_kept_still_names_each_one() -> None:
    """The names kept per host are bounded; a port past the bound is worked out again
    each time, never mistaken for one kept."""
    for _ in range(2):
        for port in range(9000, 9020):
            assert default_dependency(httpx.URL(f"http://many.test:{port}/")) == (
                f"http://many.test:{port}"
            )


class _Pipe(io.RawIOBase):
    """A file read once, never rewound (a pipe, a socket's file)."""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: Any) -> int:
        return 0


class _ReadOnly:
    """A file-like object with read() alone: whether it can be rewound cannot be told."""

    def read(self, size: int = -1) -> bytes:
        return b""


class _BrokenSeekable(_ReadOnly):
    def seekable(self) -> bool:
        raise OSError("closed")


def _body(**body: Any) -> object:
    return httpx.Request("POST", "https://api.test/", **body).stream


def _generated() -> Iterator[bytes]:
    yield b"chunk"


@pytest.mark.parametrize(
    ("body", "replayable"),
    [
        ({"content": b"raw"}, True),
        ({"json": {"a": 1}}, True),
        ({"data": {"a": "1"}}, True),
        ({}, True),
        ({"content": _generated()}, False),
        ({"files": {"f": ("a.csv", b"a,b")}}, True),
        ({"files": {"f": ("a.txt", "text")}}, True),
        ({"files": {"f": ("a.csv", io.BytesIO(b"a,b"))}, "data": {"note": "x"}}, True),
        ({"files": {"f": ("a.csv", _Pipe())}}, False),
        ({"files": {"ok": ("a.csv", b"a,b"), "f": ("b.csv", _Pipe())}}, False),
        ({"files": {"f": ("a.csv", _ReadOnly())}}, False),
        ({"files": {"f": ("a.csv", _BrokenSeekable())}}, False),
    ],
    ids=[
        "bytes",
        "json",
        "form",
        "empty",
        "generator",
        "multipart bytes",
        "multipart text",
        "multipart rewindable file",
        "multipart pipe",
        "multipart bytes and a pipe",
        "multipart file without seekable",
        "multipart file whose seekable fails",
    ],
)
def test_a_body_is_replayable_only_if_the_same_bytes_can_be_sent_again(
    body: dict[str, Any], replayable: bool
) -> None:
    assert replayable_body(_body(**body)) is replayable
