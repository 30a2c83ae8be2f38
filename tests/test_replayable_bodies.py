"""Which request bodies a retry may send again, over real sockets (sync Client,
AsyncClient on asyncio and on trio).

A body is sent again only if the same bytes can be sent: bytes, and now a
multipart form (``files=``) whose files are bytes or can be rewound, since httpx
seeks each file back to its start as it sends it (such a PUT, or a keyed POST, was
never retried). A generator, or a file that cannot be rewound, is spent once sent:
the request is not repeated, and the error says that its body is why (it said the
server "may already have acted", with ``processed="no"``, and told a caller whose
request had a key to add one).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import requests

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.chaos import KeyedChaos
from retrysafe.request_facts import replayable_body
from retrysafe.rewound_file import RewoundFile

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(backoff_base=0.01, backoff_cap=0.05, retry_after_jitter=0.01)
EMPTY_BODY_SHA256 = hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize(
    "files",
    [
        {"report": ("report.csv", b"a,b\n1,2\n", "text/csv")},
        {"report": ("report.csv", io.BytesIO(b"a,b\n1,2\n" * 5000), "text/csv")},
    ],
    ids=["bytes", "rewindable file"],
)
def test_a_multipart_form_is_sent_again_whole(api: Any, chaos: KeyedChaos, files: Any) -> None:
    response = api.request(
        "PUT",
        chaos.url("/fail/{key}", times=1),
        policy=FAST,
        files=files,
        data={"note": "monthly"},
    )
    assert response.status_code == 200
    records = chaos.log()
    assert [record.action for record in records] == ["status:503", "status:200"]
    # the same bytes both times, and not an empty body the second
    assert len({record.body_sha256 for record in records}) == 1
    assert records[0].body_sha256 != EMPTY_BODY_SHA256


class _Pipe(io.RawIOBase):
    """A file that can be read once and never rewound (a pipe, a socket's file)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: Any) -> int:
        size = min(len(buffer), len(self._data))
        buffer[:size] = self._data[:size]
        self._data = self._data[size:]
        return size


def test_a_multipart_form_with_a_file_that_cannot_be_rewound_is_not_sent_again(
    api: Any, chaos: KeyedChaos
) -> None:
    with pytest.raises(retrysafe.ServerError) as caught:
        api.request(
            "PUT",
            chaos.url("/fail/{key}", times=1),
            policy=FAST,
            files={"report": ("report.csv", _Pipe(b"a,b\n1,2\n"), "text/csv")},
        )
    assert caught.value.reason == "unsafe_to_repeat"
    assert "body was a stream" in str(caught.value)
    assert len(chaos.log()) == 1


def _sent_the_same_bytes_twice(chaos: KeyedChaos) -> None:
    records = chaos.log()
    assert [record.action for record in records] == ["status:503", "status:200"]
    assert len({record.body_sha256 for record in records}) == 1
    assert records[0].body_sha256 != EMPTY_BODY_SHA256


@pytest.mark.parametrize("method", ["PUT", "POST"])
def test_a_file_body_that_can_seek_is_sent_again_from_where_it_began(
    chaos: KeyedChaos, tmp_path: Any, method: str
) -> None:
    """``content=`` an open file: httpx reads it to its end, so a retry read nothing more.
    It was taken as spent once sent, and a 503 ended the call (trial105). Now it is
    sought back to where it was found before each attempt. (A POST too: a 503 says the
    server did no work.)"""
    path = tmp_path / "upload.csv"
    path.write_bytes(b"a,b\n1,2\n" * 5000)
    with path.open("rb") as file, retrysafe.Client(policy=FAST) as client:
        response = client.request(method, chaos.url("/fail/{key}", times=1), content=file)
    assert response.status_code == 200
    assert retrysafe.report_of(response).attempts == 2  # type: ignore[union-attr]
    _sent_the_same_bytes_twice(chaos)
    assert chaos.log()[0].body_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_rewound_file_is_a_body_sent_again_wherever_that_is_asked() -> None:
    """The engine asks ``replayable_body`` itself when no shell told it: a file read
    through a RewoundFile is sent again there too, as the drive says."""
    assert replayable_body(RewoundFile(io.BytesIO(b"row\n"), 0))


def test_a_bytesio_body_is_sent_again_through_the_drop_in_transport(chaos: KeyedChaos) -> None:
    with httpx.Client(transport=retrysafe.RetryTransport(policy=FAST)) as client:
        response = client.put(
            chaos.url("/fail/{key}", times=1), content=io.BytesIO(b"row\n" * 20000)
        )
    assert response.status_code == 200
    _sent_the_same_bytes_twice(chaos)


def test_a_file_body_that_cannot_seek_is_still_not_sent_again(chaos: KeyedChaos) -> None:
    with retrysafe.Client(policy=FAST) as client, pytest.raises(retrysafe.ServerError) as caught:
        client.put(chaos.url("/fail/{key}", times=1), content=_Pipe(b"row\n" * 100))
    assert (caught.value.reason, caught.value.spent_body) == ("unsafe_to_repeat", True)
    assert len(chaos.log()) == 1


def test_the_requests_adapter_sends_a_file_body_again_from_where_it_began(
    chaos: KeyedChaos,
) -> None:
    """requests notes a file body's position as it prepares it and seeks back to it on a
    redirect; the adapter does the same before a retry. (A pipe stays spent.)"""
    from retrysafe.requests import RetryAdapter

    with requests.Session() as session:
        session.mount("http://", RetryAdapter(policy=FAST))
        response = session.put(chaos.url("/fail/{key}", times=1), data=io.BytesIO(b"row\n" * 20000))
        assert response.status_code == 200
        _sent_the_same_bytes_twice(chaos)
        with pytest.raises(retrysafe.ServerError) as caught:
            session.put(chaos.url("/fail/{key}-pipe", times=1), data=_Pipe(b"row\n" * 100))
    assert caught.value.reason == "unsafe_to_repeat"


def test_a_keyed_generator_body_is_not_sent_again_and_the_error_says_why(
    chaos: KeyedChaos,
) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"amount": '
        yield b"100}"

    with retrysafe.Client(policy=FAST) as client, pytest.raises(retrysafe.ServerError) as caught:
        client.post(chaos.url("/fail/{key}", times=1), content=body(), idempotency_key="pay-1")
    error = caught.value
    assert (error.reason, error.processed, error.idempotency_key, error.spent_body) == (
        "unsafe_to_repeat",
        "no",
        "pay-1",
        True,
    )
    # Only the spent body stopped it: the caller's retry, with the body again, may help.
    assert error.retryable
    message = str(error)
    assert "body was a stream" in message
    assert "may already have acted" not in message
    assert "idempotency key" not in message
    assert len(chaos.log()) == 1


async def test_an_async_generator_body_is_not_sent_again_and_the_error_says_why(
    chaos: KeyedChaos,
) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"line 1\n"

    async with retrysafe.AsyncClient(policy=FAST) as client:
        with pytest.raises(retrysafe.ServerError) as caught:
            await client.put(chaos.url("/fail/{key}", times=1), content=body())
    assert caught.value.reason == "unsafe_to_repeat"
    assert "body was a stream" in str(caught.value)


def test_a_stream_the_server_may_have_acted_on_names_both_reasons(chaos: KeyedChaos) -> None:
    """A PUT (idempotent: its bytes would go again) with a generator body, reset after
    the server read it: the body and the maybe-processed request both kept it from
    being repeated, and the advice names both."""

    def body() -> Iterator[bytes]:
        yield b"row\n"

    url = chaos.url("/sequence/{key}", steps=["reset", 200])
    with retrysafe.Client(policy=FAST) as client, pytest.raises(retrysafe.TransportError) as caught:
        client.put(url, content=body())
    error = caught.value
    assert (error.reason, error.processed, error.spent_body) == ("unsafe_to_repeat", "maybe", True)
    assert error.retryable  # (a PUT: sent again whole, acting twice is acting once)
    assert "may already have acted on it and its body was a stream" in str(error)
    assert len(chaos.log()) == 1


def test_an_unkeyed_post_stream_the_server_may_have_acted_on_is_not_retryable(
    chaos: KeyedChaos,
) -> None:
    """A POST with a generator body, reset after the server read it, and no key: even
    with the body again, a repeat could act twice, so the error is not retryable."""

    def body() -> Iterator[bytes]:
        yield b"row\n"

    url = chaos.url("/sequence/{key}", steps=["reset", 200])
    with retrysafe.Client(policy=FAST) as client, pytest.raises(retrysafe.TransportError) as caught:
        client.post(url, content=body())
    assert (caught.value.processed, caught.value.spent_body) == ("maybe", True)
    assert not caught.value.retryable


def test_a_post_without_key_that_may_have_been_acted_on_keeps_its_advice(
    chaos: KeyedChaos,
) -> None:
    """A bytes body, a 502 (the server may have acted): the advice is the key's."""
    with retrysafe.Client(policy=FAST) as client, pytest.raises(retrysafe.ServerError) as caught:
        client.post(chaos.url("/fail/{key}", times=1, status=502), json={"amount": 100})
    assert caught.value.processed == "maybe"
    assert not caught.value.spent_body
    assert not caught.value.retryable
    assert "may already have acted" in str(caught.value)
    assert "idempotency key" in str(caught.value)
