"""Streaming through retrysafe: retried until the headers are classified, then the body is
the caller's, unbuffered, and no attempt timeout runs while the caller reads it.

The server is the chaos ``/sse`` endpoint and its OpenAI-style twin: the first event at
once, one more every ``interval_ms``. Each body lasts longer than the attempt timeout, so a
shell that buffered the body inside the attempt would time out (and send it again).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.chaos import KeyedChaos

pytestmark = pytest.mark.anyio

EVENTS = 7
INTERVAL_MS = 200
#: How long the whole body takes to arrive, at least: (EVENTS - 1) * INTERVAL_MS.
BODY_SECONDS = (EVENTS - 1) * INTERVAL_MS / 1000
#: An attempt timeout well under the body's duration and well over its gaps.
STREAMING = RetryPolicy(
    attempt_timeout=0.6, min_attempt_time=0.1, deadline=5, backoff_base=0.01, backoff_cap=0.05
)
FAST = RetryPolicy(backoff_base=0.01, backoff_cap=0.05, retry_after_jitter=0.01)


def _sse_url(chaos: KeyedChaos, **params: Any) -> str:
    return chaos.url("/sse", **{"events": EVENTS, "interval_ms": INTERVAL_MS, **params})


def _count_events(text: str) -> int:
    return sum(1 for event in text.split("\n\n") if event.startswith("id: "))


class Timeline:
    """When each piece of a body arrived, in seconds from the start of the call."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.arrivals: list[float] = []
        self.text = ""

    def add(self, text: str) -> None:
        self.arrivals.append(time.monotonic() - self.started)
        self.text += text

    @property
    def first(self) -> float:
        return self.arrivals[0]

    @property
    def last(self) -> float:
        return self.arrivals[-1]


# -- Client.stream and AsyncClient.stream ----------------------------------------------------


def test_client_stream_hands_over_the_body_as_it_arrives(chaos: KeyedChaos) -> None:
    """Sync stream: the first event well before the body ends, all events, no timeout, sent once."""
    with retrysafe.Client(policy=STREAMING) as client:
        timeline = Timeline()
        with client.stream("GET", _sse_url(chaos)) as response:
            assert response.status_code == 200
            assert not response.is_stream_consumed
            for text in response.iter_text():
                timeline.add(text)

    assert timeline.first < 0.5
    assert timeline.last >= BODY_SECONDS - 0.05
    assert _count_events(timeline.text) == EVENTS
    assert len(chaos.log()) == 1


async def test_async_client_stream_hands_over_the_body_as_it_arrives(chaos: KeyedChaos) -> None:
    """Async stream: the first event well before the body ends, all events, sent once."""
    async with retrysafe.AsyncClient(policy=STREAMING) as client:
        timeline = Timeline()
        async with client.stream("GET", _sse_url(chaos)) as response:
            assert response.status_code == 200
            assert not response.is_stream_consumed
            async for text in response.aiter_text():
                timeline.add(text)

    assert timeline.first < 0.5
    assert timeline.last >= BODY_SECONDS - 0.05
    assert _count_events(timeline.text) == EVENTS
    assert len(chaos.log()) == 1


def test_a_streamed_body_outlives_the_attempt_timeout(chaos: KeyedChaos) -> None:
    """Drop-in RetryTransport: a 0.6 s attempt timeout does not cover a 1.2 s body being read."""
    transport = retrysafe.RetryTransport(policy=STREAMING)
    with (
        httpx.Client(transport=transport) as client,
        client.stream("GET", _sse_url(chaos)) as response,
    ):
        body = response.read()

    assert response.status_code == 200
    assert _count_events(body.decode()) == EVENTS
    assert [record.action for record in chaos.log()] == ["sse"]


# A body streamed after its call started late in its deadline: each read gets httpx's own
# read timeout (5 s), not what the deadline had left when the attempt began (0.6 s here).
LATE_GAP_MS = 800
LATE_EVENTS = 3


def _late_clients() -> list[Any]:
    return [
        pytest.param(lambda: retrysafe.Client(), id="Client"),
        pytest.param(lambda: httpx.Client(transport=retrysafe.RetryTransport()), id="transport"),
    ]


@pytest.mark.parametrize("make_client", _late_clients())
def test_a_body_streamed_late_in_its_deadline_is_read_with_httpxs_read_timeout(
    chaos: KeyedChaos, make_client: Any
) -> None:
    url = chaos.url("/sse", events=LATE_EVENTS, interval_ms=LATE_GAP_MS)
    with make_client() as client, retrysafe.deadline(1.0):
        time.sleep(0.4)  # the attempt gets what is left: about 0.6 s
        with client.stream("GET", url) as response:
            body = response.read()
    assert response.status_code == 200
    assert _count_events(body.decode()) == LATE_EVENTS  # gaps of 0.8 s, past the scope too
    request_timeouts = response.request.extensions["timeout"]
    assert request_timeouts["read"] == 5.0  # (the caller's, restored as the body was handed over)


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_a_hedging_calls_streamed_body_is_read_with_httpxs_read_timeout(
    chaos: KeyedChaos, method: str
) -> None:
    """Under a hedging policy, a request with no copy to race (a POST without a key, never
    sent twice at once; or the last attempt) is sent alone as a copy of the call's: its
    body's reads got the attempt's bounds, and gaps longer than the attempt raised
    ``ReadTimeout`` (an openai stream under a hedging policy)."""
    policy = RetryPolicy(attempt_timeout=0.3, min_attempt_time=0.05, deadline=5, hedge_after=0.15)
    url = chaos.url("/drip", chunks=3, interval_ms=400, chunk_bytes=4)
    with httpx.Client(transport=retrysafe.RetryTransport(policy=policy)) as client:
        response = client.request(method, url, content=b"{}" if method == "POST" else None)
    assert response.status_code == 200
    assert response.content == b"000011112222"


def test_a_requests_body_streamed_late_in_its_deadline_is_read_with_the_callers_timeout(
    chaos: KeyedChaos,
) -> None:
    import requests

    from retrysafe.requests import RetryAdapter

    url = chaos.url("/sse", events=LATE_EVENTS, interval_ms=LATE_GAP_MS)
    with requests.Session() as session, retrysafe.deadline(1.0):
        session.mount("http://", RetryAdapter())
        time.sleep(0.4)  # the attempt gets what is left: about 0.6 s
        with session.get(url, stream=True, timeout=5) as response:
            body = b"".join(response.iter_content(chunk_size=None))
    assert response.status_code == 200
    assert _count_events(body.decode()) == LATE_EVENTS


def _late_async_clients() -> list[Any]:
    return [
        pytest.param(lambda: retrysafe.AsyncClient(), id="Client"),
        pytest.param(
            lambda: httpx.AsyncClient(transport=retrysafe.AsyncRetryTransport()), id="transport"
        ),
    ]


@pytest.mark.parametrize("make_client", _late_async_clients())
async def test_an_async_body_streamed_late_in_its_deadline_is_read_with_httpxs_read_timeout(
    chaos: KeyedChaos, make_client: Any
) -> None:
    import anyio

    url = chaos.url("/sse", events=LATE_EVENTS, interval_ms=LATE_GAP_MS)
    async with make_client() as client:
        with retrysafe.deadline(1.0):
            await anyio.sleep(0.4)  # the attempt gets what is left: about 0.6 s
            async with client.stream("GET", url) as response:
                body = await response.aread()
    assert response.status_code == 200
    assert _count_events(body.decode()) == LATE_EVENTS


def test_client_stream_takes_the_per_call_options(chaos: KeyedChaos) -> None:
    """``stream()`` takes ``policy``, ``idempotency_key`` and ``dependency`` like ``request()``."""
    with (
        retrysafe.Client() as client,
        client.stream(
            "POST",
            _sse_url(chaos, events=2, interval_ms=10),
            policy=FAST,
            idempotency_key="stream-key-1",
            dependency="sse",
        ) as response,
    ):
        body = response.read()

    assert _count_events(body.decode()) == 2
    assert [record.idempotency_key for record in chaos.log()] == ["stream-key-1"]


async def test_async_client_stream_takes_the_per_call_options(chaos: KeyedChaos) -> None:
    """``AsyncClient.stream()`` takes ``policy``, ``idempotency_key`` and ``dependency`` too."""
    async with (
        retrysafe.AsyncClient() as client,
        client.stream(
            "POST",
            _sse_url(chaos, events=2, interval_ms=10),
            policy=FAST,
            idempotency_key="stream-key-2",
            dependency="sse",
        ) as response,
    ):
        body = await response.aread()

    assert _count_events(body.decode()) == 2
    assert [record.idempotency_key for record in chaos.log()] == ["stream-key-2"]


def test_the_per_call_policy_of_a_stream_is_obeyed(chaos: KeyedChaos) -> None:
    """``stream(..., policy=RetryPolicy(attempts=1))``: a 503 is final, sent once."""
    with (
        retrysafe.Client(policy=FAST) as client,
        pytest.raises(retrysafe.ServerError),
        client.stream(
            "GET", _sse_url(chaos, fail_times=1), policy=RetryPolicy(attempts=1)
        ) as response,
    ):
        response.read()

    assert len(chaos.log()) == 1


def test_a_stream_is_retried_before_the_body_is_handed_over(chaos: KeyedChaos) -> None:
    """A 503 on the first attempt is retried; the caller only ever sees the 200's body."""
    with (
        retrysafe.Client(policy=FAST) as client,
        client.stream("GET", _sse_url(chaos, events=3, interval_ms=20, fail_times=1)) as response,
    ):
        assert response.status_code == 200
        body = response.read()

    assert _count_events(body.decode()) == 3
    assert [record.action for record in chaos.log()] == ["status:503", "sse"]
    assert response.extensions["retrysafe"].attempts == 2


async def test_an_async_stream_is_retried_before_the_body_is_handed_over(
    chaos: KeyedChaos,
) -> None:
    """Async: a 503 on the first attempt is retried; the caller only sees the 200's body."""
    async with (
        retrysafe.AsyncClient(policy=FAST) as client,
        client.stream("GET", _sse_url(chaos, events=3, interval_ms=20, fail_times=1)) as response,
    ):
        assert response.status_code == 200
        body = await response.aread()

    assert _count_events(body.decode()) == 3
    assert [record.action for record in chaos.log()] == ["status:503", "sse"]
    assert response.extensions["retrysafe"].attempts == 2


def test_send_with_stream_true_hands_over_an_unread_body(chaos: KeyedChaos) -> None:
    """``client.send(request, stream=True)`` returns before the body has arrived."""
    with retrysafe.Client(policy=STREAMING) as client:
        request = client.build_request("GET", _sse_url(chaos))
        started = time.monotonic()
        response = client.send(request, stream=True)
        try:
            opened = time.monotonic() - started
            assert not response.is_stream_consumed
            body = response.read()
        finally:
            response.close()

    assert opened < 0.5
    assert _count_events(body.decode()) == EVENTS


# -- the openai SDK over RetryTransport -------------------------------------------------------


OPENAI_QUERY = {"events": EVENTS, "interval_ms": INTERVAL_MS}
MESSAGES = [{"role": "user", "content": "hi"}]
EXPECTED_TOKENS = [f"tok{n}" for n in range(1, EVENTS + 1)]


def _openai_stream(chaos: KeyedChaos, http_client: httpx.Client) -> tuple[float, list[str]]:
    """Seconds to the first token, and every token, streamed through ``http_client``."""
    openai = pytest.importorskip("openai")
    sdk = openai.OpenAI(
        base_url=chaos.openai_base_url(),
        api_key="sk-test",
        max_retries=0,
        http_client=http_client,
        default_query=OPENAI_QUERY,
    )
    with sdk:
        started = time.monotonic()
        first: float | None = None
        tokens: list[str] = []
        stream = sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        for chunk in stream:
            content = chunk.choices[0].delta.content if chunk.choices else None
            if content:
                if first is None:
                    first = time.monotonic() - started
                tokens.append(content)
    assert first is not None, "no token arrived"
    return first, tokens


def test_openai_sdk_first_token_through_retry_transport_is_as_fast_as_bare_httpx(
    chaos: KeyedChaos,
) -> None:
    """openai ``stream=True`` over RetryTransport: first token within 0.3 s of bare httpx."""
    bare_first, bare_tokens = _openai_stream(chaos, httpx.Client())
    first, tokens = _openai_stream(chaos, httpx.Client(transport=retrysafe.RetryTransport()))

    assert bare_tokens == EXPECTED_TOKENS
    assert tokens == EXPECTED_TOKENS
    assert first < bare_first + 0.3
    assert len(chaos.log()) == 2  # one request each: nothing was sent twice


def test_openai_sdk_stream_outlives_the_attempt_timeout(chaos: KeyedChaos) -> None:
    """A 1.2 s token stream through a 0.6 s attempt timeout: every token, no APITimeoutError."""
    transport = retrysafe.RetryTransport(policy=STREAMING)
    first, tokens = _openai_stream(chaos, httpx.Client(transport=transport))

    assert tokens == EXPECTED_TOKENS
    assert first < 0.5
    assert len(chaos.log()) == 1


def test_async_openai_sdk_streams_through_async_retry_transport(chaos: KeyedChaos) -> None:
    """AsyncOpenAI over AsyncRetryTransport: the first token early, every token, sent once."""
    openai = pytest.importorskip("openai")

    async def tokens_streamed() -> AsyncIterator[tuple[float, str]]:
        transport = retrysafe.AsyncRetryTransport(policy=STREAMING)
        sdk = openai.AsyncOpenAI(
            base_url=chaos.openai_base_url(),
            api_key="sk-test",
            max_retries=0,
            http_client=httpx.AsyncClient(transport=transport),
            default_query=OPENAI_QUERY,
        )
        async with sdk:
            started = time.monotonic()
            stream = await sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            async for chunk in stream:
                content = chunk.choices[0].delta.content if chunk.choices else None
                if content:
                    yield time.monotonic() - started, content

    async def collect() -> list[tuple[float, str]]:
        return [item async for item in tokens_streamed()]

    # The SDK's async client runs on asyncio.
    received = asyncio.run(collect())

    assert [token for _, token in received] == EXPECTED_TOKENS
    assert received[0][0] < 0.5
    assert len(chaos.log()) == 1
