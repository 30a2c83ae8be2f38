"""A streamed call's body that retrysafe read for its verdict streams again, raw, as bare
httpx's would: a failure a rule read, handed back by the drop-in transports, or a success
a rule read. The requests adapter leaves ``response.raw`` readable the same way. (A
failure no rule reads is handed back unread: its status and headers judge it.)

Over a real socket, against a server whose bodies are gzip-encoded, so the raw bytes
(``iter_raw``) and the decoded ones (``iter_bytes``, ``text``) differ.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import retrysafe
from local_http import QuietHandler, serving
from retrysafe import RetryPolicy, Verdict

pytestmark = pytest.mark.anyio

BODY = b'{"error": "busy, try later"}' * 20
RAW = gzip.compress(BODY, mtime=0)
ONCE = RetryPolicy(attempts=1)
QUICK = {"attempts": 2, "backoff_base": 0.01, "backoff_cap": 0.01}


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        status = 503 if self.path.startswith("/busy") else 200
        self.send_response(status)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(RAW)))
        self.end_headers()
        self.wfile.write(RAW)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving(_Handler) as url:
        yield url


def _reads_body(response: httpx.Response) -> Verdict | None:
    """A rule that reads the body (so a streamed success is read before it is handed over)."""
    return Verdict.success() if b"busy" in response.content else None


def _peeks(response: httpx.Response) -> Verdict | None:
    """A rule that reads the body and leaves the verdict to the table: a failure is then
    read before it is judged and handed back."""
    assert response.content
    return None


#: One attempt, its failure read by a rule.
ONCE_READ = RetryPolicy(attempts=1, rules=(_peeks,))


def test_bare_httpx_streams_the_raw_bytes(server: str) -> None:
    """What the tests below hold retrysafe to."""
    with httpx.Client() as client, client.stream("GET", f"{server}/busy") as response:
        assert b"".join(response.iter_raw()) == RAW


def test_a_failure_handed_back_unread_streams_raw_as_bare_httpxs(server: str) -> None:
    transport = retrysafe.RetryTransport(policy=ONCE)
    with httpx.Client(transport=transport) as client:
        with client.stream("GET", f"{server}/busy") as response:
            assert response.status_code == 503
            assert response.num_bytes_downloaded == 0  # (not read: the status judged it)
            assert b"".join(response.iter_raw()) == RAW
        assert response.is_closed
        assert retrysafe.report_of(response).error is not None


def test_a_failure_handed_back_by_the_drop_in_transport_streams_raw(server: str) -> None:
    transport = retrysafe.RetryTransport(policy=ONCE_READ)
    with httpx.Client(transport=transport) as client:
        with client.stream("GET", f"{server}/busy") as response:
            assert response.status_code == 503
            assert b"".join(response.iter_raw()) == RAW
            assert response.read() == BODY
        # Closed at the end of the block, and timed, as httpx's own streamed responses are.
        assert response.is_closed
        assert response.elapsed.total_seconds() > 0
        assert retrysafe.report_of(response).error is not None


def test_a_failure_streams_decoded_too(server: str) -> None:
    transport = retrysafe.RetryTransport(policy=ONCE)
    with (
        httpx.Client(transport=transport) as client,
        client.stream("GET", f"{server}/busy") as response,
    ):
        assert b"".join(response.iter_bytes()) == BODY


def test_a_failure_of_a_call_that_does_not_stream_reads_as_before(server: str) -> None:
    transport = retrysafe.RetryTransport(policy=ONCE)
    with httpx.Client(transport=transport) as client:
        response = client.get(f"{server}/busy")
    assert response.status_code == 503
    assert response.content == BODY
    assert response.text.startswith('{"error": "busy')


def test_a_success_a_rule_read_streams_raw(server: str) -> None:
    policy = RetryPolicy(rules=(_reads_body,))
    with (
        retrysafe.Client(policy=policy) as client,
        client.stream("GET", f"{server}/ok") as response,
    ):
        assert response.status_code == 200
        assert b"".join(response.iter_raw()) == RAW
        assert response.read() == BODY


def test_a_success_a_rule_read_through_the_drop_in_transport_is_timed(server: str) -> None:
    """httpx reads the body a rule already read without closing it again, so the call's
    ``elapsed`` is set as the body is read in the attempt."""
    transport = retrysafe.RetryTransport(policy=RetryPolicy(rules=(_reads_body,)))
    with httpx.Client(transport=transport) as client:
        response = client.get(f"{server}/ok")
    assert response.content == BODY
    assert response.elapsed.total_seconds() > 0


def test_a_hedging_call_hands_back_a_failure_that_streams_raw(server: str) -> None:
    transport = retrysafe.RetryTransport(policy=RetryPolicy(hedge_after=5.0, **QUICK))
    with (
        httpx.Client(transport=transport) as client,
        client.stream("GET", f"{server}/busy") as response,
    ):
        assert response.status_code == 503
        assert b"".join(response.iter_raw()) == RAW


@pytest.mark.parametrize("hedge_after", [None, 5.0])
async def test_async_a_failure_handed_back_streams_raw(
    server: str, hedge_after: float | None
) -> None:
    policy = RetryPolicy(hedge_after=hedge_after, rules=(_peeks,), **QUICK)
    transport = retrysafe.AsyncRetryTransport(policy=policy)
    async with (
        httpx.AsyncClient(transport=transport) as client,
        client.stream("GET", f"{server}/busy") as response,
    ):
        assert response.status_code == 503
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        assert raw == RAW
        assert await response.aread() == BODY
    assert response.is_closed


async def test_async_a_success_a_rule_read_streams_raw(server: str) -> None:
    policy = RetryPolicy(rules=(_reads_body,))
    async with (
        retrysafe.AsyncClient(policy=policy) as client,
        client.stream("GET", f"{server}/ok") as response,
    ):
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        assert raw == RAW


# -- what is kept: the raw bytes only when they are not the decoded body -------------------


def test_an_encoded_body_keeps_its_raw_bytes_apart() -> None:
    from retrysafe.kept_body import RawKeepingStream, read_keeping_raw, unread

    response = httpx.Response(
        503, headers={"Content-Encoding": "gzip"}, stream=httpx.ByteStream(RAW)
    )
    read_keeping_raw(response)
    assert isinstance(response.stream, RawKeepingStream)
    assert response.stream.chunks == [RAW]
    unread(response)
    assert b"".join(response.iter_raw()) == RAW
    assert response.read() == BODY


def test_an_unencoded_body_is_not_held_twice() -> None:
    # Its raw bytes are its decoded ones: iter_raw() gives the decoded body back, and no
    # second copy of a large failing body is held.
    from retrysafe.kept_body import RawKeepingStream, read_keeping_raw, unread

    response = httpx.Response(503, stream=httpx.ByteStream(BODY))
    read_keeping_raw(response)
    assert isinstance(response.stream, RawKeepingStream)
    assert response.stream.chunks == []
    unread(response)
    assert b"".join(response.iter_raw()) == BODY
    assert response.read() == BODY


@pytest.mark.parametrize("encoding", ["gzip", "GZIP", " gzip "])
def test_an_encoded_body_is_kept_raw_however_the_header_is_written(encoding: str) -> None:
    # httpx decodes the body whatever the header's case and spaces: its raw bytes differ
    # from the decoded ones, and only a copy kept as it came gives them back.
    from retrysafe.kept_body import RawKeepingStream, read_keeping_raw, unread

    response = httpx.Response(
        503, headers={"Content-Encoding": encoding}, stream=httpx.ByteStream(RAW)
    )
    read_keeping_raw(response)
    assert isinstance(response.stream, RawKeepingStream)
    assert response.stream.chunks == [RAW]
    unread(response)
    assert b"".join(response.iter_raw()) == RAW
    assert response.read() == BODY


@pytest.mark.parametrize("encoding", ["identity", "Identity", " identity ", ""])
def test_an_identity_encoded_body_is_not_held_twice(encoding: str) -> None:
    # "identity" (or an empty header) is no encoding: the raw bytes are the decoded ones.
    from retrysafe.kept_body import RawKeepingStream, read_keeping_raw, unread

    response = httpx.Response(
        503, headers={"Content-Encoding": encoding}, stream=httpx.ByteStream(BODY)
    )
    read_keeping_raw(response)
    assert isinstance(response.stream, RawKeepingStream)
    assert response.stream.chunks == []
    unread(response)
    assert b"".join(response.iter_raw()) == BODY


async def test_an_encoded_body_read_asynchronously_keeps_its_raw_bytes_apart() -> None:
    from retrysafe.kept_body import RawKeepingStream, aread_keeping_raw, unread

    class _Chunks(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            yield RAW[:10]
            yield RAW[10:]

    response = httpx.Response(503, headers={"Content-Encoding": "gzip"}, stream=_Chunks())
    await aread_keeping_raw(response)
    assert isinstance(response.stream, RawKeepingStream)
    assert response.stream.chunks == [RAW[:10], RAW[10:]]
    unread(response)
    assert (response.is_stream_consumed, response.is_closed) == (False, False)
    assert b"".join(response.iter_raw()) == RAW
    assert response.read() == BODY


# -- the requests adapter: response.raw as bare requests leaves it -------------------------


def _requests_session(adapter: Any) -> Any:
    import requests

    session = requests.Session()
    session.mount("http://", adapter)
    return session


def test_bare_requests_streams_the_raw_bytes(server: str) -> None:
    """What the tests below hold the adapter to."""
    import requests

    with requests.get(f"{server}/busy", stream=True) as response:
        assert response.raw.read() == RAW


def test_a_requests_failure_handed_back_streams_raw(server: str) -> None:
    from retrysafe.requests import RetryAdapter

    adapter = RetryAdapter(policy=ONCE_READ, raise_on_status=False)
    with _requests_session(adapter) as session:
        with session.get(f"{server}/busy", stream=True) as response:
            assert response.status_code == 503
            assert response.raw.read() == RAW  # a gateway copies these on, still gzip
            assert response.content == BODY
        with session.get(f"{server}/busy", stream=True) as response:
            assert response.raw.read(decode_content=True) == BODY
        with session.get(f"{server}/busy", stream=True) as response:
            assert b"".join(response.iter_content(64)) == BODY
        # The body was read to its end: its connection went back to the pool each time.
        pool = next(iter(adapter.poolmanager.pools._container.values()))
        assert pool.num_connections == 1


def test_a_requests_success_a_rule_read_streams_raw(server: str) -> None:
    from retrysafe.requests import RetryAdapter

    adapter = RetryAdapter(policy=RetryPolicy(rules=(_reads_body,)))
    with (
        _requests_session(adapter) as session,
        session.get(f"{server}/ok", stream=True) as response,
    ):
        assert response.status_code == 200
        assert response.raw.read() == RAW
        assert response.text.startswith('{"error": "busy')


def test_a_requests_error_carries_a_response_that_streams_raw(server: str) -> None:
    import requests

    from retrysafe.requests import RetryAdapter

    with (
        _requests_session(RetryAdapter(policy=ONCE)) as session,
        pytest.raises(requests.HTTPError) as raised,
    ):
        session.get(f"{server}/busy", stream=True)
    assert raised.value.response is not None
    assert raised.value.response.raw.read() == RAW
    assert raised.value.response.content == BODY


def test_a_requests_call_that_does_not_stream_reads_as_before(server: str) -> None:
    from retrysafe.requests import RetryAdapter

    adapter = RetryAdapter(policy=ONCE, raise_on_status=False)
    with _requests_session(adapter) as session:
        response = session.get(f"{server}/busy")
    assert response.content == BODY
    assert response.raw.read() == b""  # spent, as bare requests leaves it
