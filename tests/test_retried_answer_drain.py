"""A retried answer's body, drained between attempts: read if small, so its connection
serves the retry and the answer can still be handed over if the retry is refused.

A body whose Content-Length says it is at most 64 KiB (``DRAINED_AT_MOST``) was always
drained; these are the others: a body of unknown length (chunked, as many error pages),
counted as it comes and closed unread past the limit; a body a rule already read (not
read again); an answer that has no body whatever its Content-Length says (a HEAD's).
On trio a body of unknown length is closed unread (see ``kept_body.adrain_or_close``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import gzip
import time
import warnings
from typing import ClassVar

import anyio
import httpx
import pytest
from tests.local_http import QuietHandler, serving

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.kept_body import DRAINED_AT_MOST

pytestmark = pytest.mark.anyio

#: Quick attempts and backoff: each test's time is its Retry-After, if any.
POLICY = RetryPolicy(
    attempt_timeout=0.3, min_attempt_time=0.05, deadline=5, backoff_base=0.01, backoff_cap=0.02
)
#: The 503 waits at least its Retry-After (1 s) before its retry; the 429 to another call,
#: sent meanwhile, pauses the dependency for 100 s, past the deadline: the retry is refused.
_REFUSED = dataclasses.replace(POLICY, retry_after_jitter=0.01)


def _limit_for_100_seconds(handler: QuietHandler) -> None:
    """Answer 429 asking for 100 s (the ``/limited`` of the handlers below): past any
    test's deadline, so the dependency's cooldown refuses the retry waiting on it."""
    handler.send_response(429)
    handler.send_header("Retry-After", "100")
    handler.send_header("Content-Length", "0")
    handler.end_headers()


class _BusyChunked(QuietHandler):
    """Answers ``/busy?size=N`` with a 503 whose N-byte body is chunked (no Content-Length,
    as many error pages are), after ``Retry-After: 1`` at ``/busy?size=N&wait=1``; and
    ``/limited`` with a 429 asking for 100 s. Notes each request's client port."""

    ports: ClassVar[list[int]] = []

    def do_GET(self) -> None:
        self.ports.append(self.client_address[1])
        if self.path.startswith("/limited"):
            _limit_for_100_seconds(self)
            return
        query = dict(part.split("=") for part in self.path.split("?", 1)[1].split("&"))
        body = b"b" * int(query["size"])
        self.send_response(503)
        if "wait" in query:
            self.send_header("Retry-After", query["wait"])
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for start in range(0, len(body), 16 * 1024):
            piece = body[start : start + 16 * 1024]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")


@pytest.mark.parametrize(
    ("size", "connections"),
    [(300, 1), (DRAINED_AT_MOST, 1), (DRAINED_AT_MOST + 1, POLICY.attempts)],
    ids=["small", "the-limit", "past-the-limit"],
)
def test_a_retried_chunked_answer_is_drained_when_small_as_one_with_a_length(
    size: int, connections: int
) -> None:
    """A retried answer with no Content-Length (chunked) is drained while it stays within
    DRAINED_AT_MOST bytes, so its connection serves the retry; a longer one is closed
    unread, each retry on a new connection. (Before, none was drained: one connection per
    attempt whatever the size.) The answer the call ends on is the caller's, whole."""
    _BusyChunked.ports = []
    with (
        serving(_BusyChunked) as url,
        httpx.Client(transport=retrysafe.RetryTransport(policy=POLICY)) as client,
    ):
        response = client.get(f"{url}/busy?size={size}")
    assert response.status_code == 503
    assert len(response.content) == size
    assert len(_BusyChunked.ports) == POLICY.attempts
    assert len(set(_BusyChunked.ports)) == connections


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(
    ("size", "connections"),
    [(300, 1), (DRAINED_AT_MOST + 1, POLICY.attempts)],
    ids=["small", "past-the-limit"],
)
async def test_an_async_retried_chunked_answer_is_drained_when_small(
    size: int, connections: int
) -> None:
    _BusyChunked.ports = []
    transport = retrysafe.AsyncRetryTransport(policy=POLICY)
    with serving(_BusyChunked) as url:
        async with httpx.AsyncClient(transport=transport) as client:
            response = await client.get(f"{url}/busy?size={size}")
    assert response.status_code == 503
    assert len(response.content) == size
    assert len(set(_BusyChunked.ports)) == connections


def test_a_call_refused_after_a_retried_chunked_answer_hands_that_answer_over() -> None:
    """As with a Content-Length (tests/test_error_answer_body.py): the chunked 503,
    drained, is handed over readable when another call's 429 pauses the dependency past
    the deadline. (Before, it was closed unread and the call raised the refusal,
    ``CooldownActive``.)"""
    _BusyChunked.ports = []
    with (
        serving(_BusyChunked) as url,
        httpx.Client(transport=retrysafe.RetryTransport(policy=_REFUSED)) as client,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        pending = pool.submit(client.get, f"{url}/busy?size=300&wait=1")
        time.sleep(0.3)  # (its first answer is in, and it waits 1 s)
        assert client.get(f"{url}/limited").status_code == 429
        response = pending.result(timeout=10)
    assert response.status_code == 503
    assert response.content == b"b" * 300
    report = retrysafe.report_of(response)
    assert report is not None
    assert type(report.error).__name__ == "CooldownActive"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_async_call_refused_after_a_retried_chunked_answer_hands_that_answer_over() -> (
    None
):
    _BusyChunked.ports = []
    answers: list[httpx.Response] = []
    transport = retrysafe.AsyncRetryTransport(policy=_REFUSED)
    with serving(_BusyChunked) as url:
        async with httpx.AsyncClient(transport=transport) as client:

            async def call_busy() -> None:
                answers.append(await client.get(f"{url}/busy?size=300&wait=1"))

            async with anyio.create_task_group() as group:
                group.start_soon(call_busy)
                await anyio.sleep(0.3)  # (its first answer is in, and it waits 1 s)
                assert (await client.get(f"{url}/limited")).status_code == 429
    assert answers[0].content == b"b" * 300
    report = retrysafe.report_of(answers[0])
    assert report is not None
    assert type(report.error).__name__ == "CooldownActive"


@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("size", [300, DRAINED_AT_MOST + 1], ids=["small", "past-the-limit"])
async def test_on_trio_a_retried_chunked_answer_is_closed_unread_without_a_warning(
    size: int,
) -> None:
    """On trio a body of unknown length is not drained: cut past the limit, its read
    left httpx's and httpcore's async generators to the collector, and trio warned of
    each (review101: 4 ResourceWarnings per retried attempt)."""
    _BusyChunked.ports = []
    transport = retrysafe.AsyncRetryTransport(policy=POLICY)
    gc.collect()  # (what earlier tests left is not this one's)
    with warnings.catch_warnings(record=True) as caught, serving(_BusyChunked) as url:
        warnings.simplefilter("always")
        async with httpx.AsyncClient(transport=transport) as client:
            response = await client.get(f"{url}/busy?size={size}")
        gc.collect()
    assert response.status_code == 503
    assert len(set(_BusyChunked.ports)) == POLICY.attempts
    unclosed = [str(w.message) for w in caught if "Async generator" in str(w.message)]
    assert unclosed == []


class _BusyGzipped(QuietHandler):
    """``/busy`` answers a gzipped 503 (``Retry-After: 1``), chunked or, at ``/busy?cl``,
    with a Content-Length; ``/limited`` a 429 asking for 100 s."""

    SENT: ClassVar[bytes] = gzip.compress(b'{"error": "busy, try later"}' * 10)

    def do_GET(self) -> None:
        if self.path.startswith("/limited"):
            _limit_for_100_seconds(self)
            return
        self.send_response(503)
        self.send_header("Retry-After", "1")
        self.send_header("Content-Encoding", "gzip")
        if self.path.endswith("?cl"):
            self.send_header("Content-Length", str(len(self.SENT)))
            self.end_headers()
            self.wfile.write(self.SENT)
        else:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(self.SENT), self.SENT))


def _reads_the_body(response: httpx.Response) -> None:
    """A rule that reads every answer's body and says nothing."""
    response.read()


@pytest.mark.parametrize("length", ["chunked", "cl"])
def test_a_retried_answer_a_rule_read_is_handed_over_with_its_raw_bytes(length: str) -> None:
    """A body a rule read (its raw bytes kept for a caller that streams) is not drained
    again before the retry: a second read wrapped it anew and kept nothing, so the 503
    handed over when the retry was refused gave no bytes from ``iter_raw()``
    (review101, M1; with a Content-Length it was so before the chunked drain too)."""
    policy = dataclasses.replace(_REFUSED, rules=(_reads_the_body,))
    path = "/busy?cl" if length == "cl" else "/busy"

    def call_busy(client: httpx.Client, url: str) -> bytes:
        with client.stream("GET", url + path) as response:
            assert response.status_code == 503
            return b"".join(response.iter_raw())

    with (
        serving(_BusyGzipped) as url,
        httpx.Client(transport=retrysafe.RetryTransport(policy=policy)) as client,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        pending = pool.submit(call_busy, client, url)
        time.sleep(0.3)  # (its first answer is in, and it waits 1 s)
        assert client.get(url + "/limited").status_code == 429
        assert pending.result(timeout=10) == _BusyGzipped.SENT


class _BusyHead(QuietHandler):
    """Answers HEAD with a 503 announcing a 1 MB body (none follows, as for any HEAD)."""

    ports: ClassVar[list[int]] = []

    def do_HEAD(self) -> None:
        self.ports.append(self.client_address[1])
        self.send_response(503)
        self.send_header("Content-Length", "1000000")
        self.end_headers()


def test_a_retried_answer_to_a_head_keeps_its_connection_whatever_its_length_says() -> None:
    """A HEAD's answer has no body: its Content-Length (review101: 1 MB) made the drain
    close it unread, and each retry opened a connection."""
    _BusyHead.ports = []
    with (
        serving(_BusyHead) as url,
        httpx.Client(transport=retrysafe.RetryTransport(policy=POLICY)) as client,
    ):
        assert client.head(url).status_code == 503
    assert len(_BusyHead.ports) == POLICY.attempts
    assert len(set(_BusyHead.ports)) == 1
