"""The requests adapter and the aiohttp middleware keep an error answer's status, however
its body arrives (as the httpx shells do: ``tests/test_error_answer_body.py``).

With ``raise_on_status=False`` a final answer is returned as the response, its body read
by the caller after the call, with the caller's own timeouts, as without retrysafe. With
the default, the error carries the body, read inside the attempt; if it does not come,
the error is still the answer's (a ``ClientError`` for a 404, no body). Before, a 404
whose body trickled past the attempt's time was sent four times and ended as a timeout.
"""

from __future__ import annotations

import gzip
import pickle
import random

import aiohttp
import pytest
import requests
from tests.local_http import QuietHandler, serving

from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware
from retrysafe.aiohttp import errors as aiohttp_errors
from retrysafe.chaos import KeyedChaos
from retrysafe.decisions import ERROR_BODY_READ_AT_MOST
from retrysafe.errors import PICKLED_BODY_AT_MOST
from retrysafe.kept_body import was_cut
from retrysafe.requests import RetryAdapter, report_of
from retrysafe.requests import errors as requests_errors

pytestmark = pytest.mark.anyio

#: An attempt may take 0.3 s; each dripped body takes about 1 s.
POLICY = RetryPolicy(
    attempt_timeout=0.3, min_attempt_time=0.05, deadline=5, backoff_base=0.01, backoff_cap=0.02
)
DRIPPED = b"".join(b"%d" % n * 8 for n in range(10))


def _slow(chaos: KeyedChaos, status: int) -> str:
    return chaos.url("/drip", status=status, chunks=10, interval_ms=100, chunk_bytes=8)


def _gapped(chaos: KeyedChaos, status: int) -> str:
    """A body whose every gap (0.4 s) is longer than an attempt may take (0.3 s)."""
    return chaos.url("/drip", status=status, chunks=4, interval_ms=400, chunk_bytes=8)


GAPPED = b"".join(b"%d" % n * 8 for n in range(4))


def _sent(chaos: KeyedChaos) -> int:
    return sum(1 for record in chaos.log() if record.action == "drip")


def _session(*, raise_on_status: bool) -> requests.Session:
    session = requests.Session()
    session.mount("http://", RetryAdapter(policy=POLICY, raise_on_status=raise_on_status))
    return session


@pytest.mark.parametrize("stream", [False, True], ids=["read", "streamed"])
def test_requests_returns_a_slow_404_as_the_servers_answer(chaos: KeyedChaos, stream: bool) -> None:
    with _session(raise_on_status=False) as session:
        response = session.get(_slow(chaos, 404), stream=stream, timeout=5)
        assert response.status_code == 404
        assert response.content == DRIPPED  # (read with the caller's 5 s read timeout)
        report = report_of(response)
    assert report is not None
    assert report.error is not None
    assert report.error.status == 404
    assert _sent(chaos) == 1


def test_requests_raises_the_404_whose_body_did_not_come(chaos: KeyedChaos) -> None:
    with (
        _session(raise_on_status=True) as session,
        pytest.raises(requests_errors.ClientError) as raised,
    ):
        session.get(_slow(chaos, 404), timeout=5)
    assert (raised.value.status, raised.value.body) == (404, None)
    assert _sent(chaos) == 1


def test_requests_repeats_a_post_whose_503_broke_off_in_its_body(chaos: KeyedChaos) -> None:
    """A 503 says the server did no work; its body not arriving does not change that."""
    with (
        _session(raise_on_status=True) as session,
        pytest.raises(requests_errors.ServerError) as raised,
    ):
        session.post(_slow(chaos, 503), data=b"{}", timeout=5)
    assert (raised.value.status, raised.value.reason) == (503, "attempts_exhausted")
    assert _sent(chaos) == POLICY.attempts


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("status", [404, 503])
async def test_aiohttp_returns_the_answer_it_ends_on_unread(chaos: KeyedChaos, status: int) -> None:
    """A final 404, and the last 503 (those before it closed unread), are returned for the
    caller to read with its own timeouts (the 503's gaps outlast an attempt)."""
    middleware = RetryMiddleware(policy=POLICY, raise_on_status=False)
    url, body = (_slow(chaos, 404), DRIPPED) if status == 404 else (_gapped(chaos, 503), GAPPED)
    async with (
        aiohttp.ClientSession(middlewares=(middleware,)) as session,
        session.get(url) as response,
    ):
        assert response.status == status
        assert await response.read() == body
    assert _sent(chaos) == (1 if status == 404 else POLICY.attempts)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aiohttp_raises_the_404_whose_body_did_not_come(chaos: KeyedChaos) -> None:
    middleware = RetryMiddleware(policy=POLICY)
    async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
        with pytest.raises(aiohttp_errors.ClientError) as raised:
            await session.get(_slow(chaos, 404))
    assert (raised.value.status, raised.value.body) == (404, None)
    assert _sent(chaos) == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aiohttp_repeats_a_post_whose_503_broke_off_in_its_body(chaos: KeyedChaos) -> None:
    middleware = RetryMiddleware(policy=POLICY)
    async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
        with pytest.raises(aiohttp_errors.ServerError) as raised:
            await session.post(_slow(chaos, 503), data=b"{}")
    assert (raised.value.status, raised.value.reason) == (503, "attempts_exhausted")
    assert _sent(chaos) == POLICY.attempts


def test_requests_returns_the_last_retried_answer_unread(chaos: KeyedChaos) -> None:
    """A 503 sent again is closed unread, and the last one is returned, its body read by
    requests with the caller's timeout (trial96: the adapter raised ServerError)."""
    with _session(raise_on_status=False) as session:
        response = session.get(_gapped(chaos, 503), timeout=5)
        assert response.status_code == 503
        assert response.content == GAPPED
    assert _sent(chaos) == POLICY.attempts


def test_requests_error_names_the_response_whose_body_did_not_come(chaos: KeyedChaos) -> None:
    """``error.response`` is the answer's, as for any failing response (trial96: None)."""
    with (
        _session(raise_on_status=True) as session,
        pytest.raises(requests_errors.ClientError) as raised,
    ):
        session.get(_slow(chaos, 404), timeout=5)
    assert raised.value.response is not None
    assert raised.value.response.status_code == 404


#: A 2 MB error body, sent at once (the drip's four 500 kB chunks, no gaps).
BIG_BODY = {"chunks": 4, "interval_ms": 0, "chunk_bytes": 500_000}
DRIPPED_BIG = b"".join(b"%d" % n * 500_000 for n in range(4))


def test_requests_streamed_reads_no_more_of_a_huge_error_body_than_its_error_needs(
    chaos: KeyedChaos,
) -> None:
    """A streamed call the adapter raises on reads an error answer's body only to the
    first MiB, as ``Client.stream()`` does, and leaves the rest undownloaded (trial100:
    a 64 MB 404 grew memory by 128 MB where bare requests, streaming, grew it by 0)."""
    with (
        _session(raise_on_status=True) as session,
        pytest.raises(requests_errors.ClientError) as raised,
    ):
        session.get(chaos.url("/drip", status=404, **BIG_BODY), stream=True, timeout=5)
    error = raised.value
    assert (error.status, error.attempts) == (404, 1)
    assert isinstance(error.body, str)
    assert len(error.body) == 64 * 1024  # (what an error keeps of any body)
    assert isinstance(error.response, requests.Response)
    assert error.response.content == DRIPPED_BIG[:ERROR_BODY_READ_AT_MOST]
    assert was_cut(error.response)


def test_requests_reads_a_huge_error_body_whole_when_not_streamed(chaos: KeyedChaos) -> None:
    with (
        _session(raise_on_status=True) as session,
        pytest.raises(requests_errors.ClientError) as raised,
    ):
        session.get(chaos.url("/drip", status=404, **BIG_BODY), timeout=5)
    assert isinstance(raised.value.response, requests.Response)
    assert raised.value.response.content == DRIPPED_BIG  # (as requests reads one)


def test_requests_pickles_a_cut_error_body_without_a_secret_across_the_cut() -> None:
    """The cut requests response is scrubbed with a margin when pickled, as httpx's is:
    a token echoed across the first MiB's end leaves no part of itself."""
    token = "sk_live_" + "A1b2C3d4" * 4
    cut_at = ERROR_BODY_READ_AT_MOST - 12
    body = b"x" * cut_at + token.encode() + b"y" * 70_000

    class Echoes(QuietHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with (
        serving(Echoes) as url,
        _session(raise_on_status=True) as session,
        pytest.raises(requests_errors.ClientError) as raised,
    ):
        session.get(url, stream=True, timeout=5, headers={"Authorization": f"Bearer {token}"})
    shared = pickle.loads(pickle.dumps(raised.value))
    assert isinstance(shared.response, requests.Response)
    assert token[:8].encode() not in shared.response.content
    assert len(shared.response.content) <= ERROR_BODY_READ_AT_MOST


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aiohttp_streamed_reads_no_more_of_a_huge_error_body_than_its_error_needs(
    chaos: KeyedChaos,
) -> None:
    middleware = RetryMiddleware(policy=POLICY, stream=True)
    async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
        with pytest.raises(aiohttp_errors.ClientError) as raised:
            await session.get(chaos.url("/drip", status=404, **BIG_BODY))
    error = raised.value
    assert isinstance(error.body, str)
    assert len(error.body) == 64 * 1024
    assert isinstance(error.response, aiohttp.ClientResponse)
    assert await error.response.read() == DRIPPED_BIG[:ERROR_BODY_READ_AT_MOST]
    assert await error.response.content.read() == DRIPPED_BIG[:ERROR_BODY_READ_AT_MOST]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aiohttp_streamed_reads_a_small_error_body_whole(chaos: KeyedChaos) -> None:
    middleware = RetryMiddleware(policy=POLICY, stream=True)
    async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
        with pytest.raises(aiohttp_errors.ClientError) as raised:
            await session.get(chaos.url("/drip", status=404, chunks=2, interval_ms=0))
    assert isinstance(raised.value.response, aiohttp.ClientResponse)
    assert await raised.value.response.read() == b"00000000" + b"11111111"
    assert await raised.value.response.text() == "0000000011111111"


def _gzip_404(body: bytes) -> type[QuietHandler]:
    """A handler answering 404 with ``body`` gzipped (Content-Encoding: gzip)."""
    sent = gzip.compress(body)

    class Gzipped(QuietHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(sent)))
            self.end_headers()
            self.wfile.write(sent)

    return Gzipped


def _streamed_error_response(handler: type[QuietHandler]) -> requests.Response:
    """The response on the ClientError a streamed GET through the adapter raises."""
    with (
        serving(handler) as url,
        _session(raise_on_status=True) as session,
        pytest.raises(requests_errors.ClientError) as raised,
    ):
        session.get(url, stream=True, timeout=5)
    response = raised.value.response
    assert isinstance(response, requests.Response)
    return response


def test_requests_streamed_decodes_no_more_of_a_small_compressed_error_body_than_the_limit() -> (
    None
):
    """3 MB of digits gzip to a few kB, which come whole: decoded a piece at a time, only
    the first MiB is kept (marked cut), and ``response.raw`` still gives the bytes as
    they came, for a gateway that forwards them."""
    body = b"".join(b"%d" % (n % 10) * 1000 for n in range(3000))
    response = _streamed_error_response(_gzip_404(body))
    assert response.content == body[:ERROR_BODY_READ_AT_MOST]
    assert was_cut(response)
    assert gzip.decompress(response.raw.read()) == body


def test_requests_streamed_keeps_what_decodes_of_a_long_compressed_error_body() -> None:
    """A gzipped body longer than the limit as it comes is cut there, and what of that
    start decodes is the error's response's body (the cut end does not decode)."""
    body = random.Random(7).randbytes(3 * 1024 * 1024)  # (does not compress)
    response = _streamed_error_response(_gzip_404(body))
    assert 0 < len(response.content) <= ERROR_BODY_READ_AT_MOST
    assert body.startswith(response.content)
    assert was_cut(response)


def test_requests_pickled_error_carries_at_most_about_a_mib_of_its_response_body(
    chaos: KeyedChaos,
) -> None:
    """As httpx's errors do: the whole 2 MB body stays on the error in this process, and
    its pickled copy carries the first MiB."""
    with (
        _session(raise_on_status=True) as session,
        pytest.raises(requests_errors.ClientError) as raised,
    ):
        session.get(chaos.url("/drip", status=404, **BIG_BODY), timeout=5)
    assert isinstance(raised.value.response, requests.Response)
    assert raised.value.response.content == DRIPPED_BIG
    shared = pickle.loads(pickle.dumps(raised.value))
    assert shared.response.content == DRIPPED_BIG[:PICKLED_BODY_AT_MOST]
