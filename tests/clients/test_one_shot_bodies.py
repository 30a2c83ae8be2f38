"""A request body that cannot be sent twice goes once, through requests and aiohttp too.

docs/retries.md: a body that cannot be sent twice (a generator, an iterator) goes once;
an attempt that failed after sending it is not made again, and the error says the body
is why (``spent_body``). Resending it would send what is left of it: nothing, or a
truncated body the server would take as the whole request. Over real sockets against
the chaos server, whose log holds what each request carried.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

import aiohttp
import pytest
import requests

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware
from retrysafe.chaos import KeyedChaos
from retrysafe.requests import RetryAdapter

FAST = RetryPolicy(backoff_base=0.01, backoff_cap=0.05, retry_after_jitter=0.01)
PARTS = [b"first part;", b"second part;", b"third part"]
WHOLE_SHA256 = hashlib.sha256(b"".join(PARTS)).hexdigest()


def _generator() -> Iterator[bytes]:
    yield from PARTS


def _iterator() -> Iterator[bytes]:
    return iter(list(PARTS))


ONE_SHOT_BODIES: list[Callable[[], Iterable[bytes]]] = [_generator, _iterator]


def _session() -> requests.Session:
    session = requests.Session()
    session.mount("http://", RetryAdapter(policy=FAST))
    return session


@pytest.mark.parametrize("body", ONE_SHOT_BODIES, ids=["generator", "iterator"])
@pytest.mark.parametrize("steps", [[503, 200], ["reset", 200]], ids=["503", "reset"])
def test_requests_a_one_shot_body_is_not_sent_again_after_an_attempt_that_sent_it(
    chaos: KeyedChaos, body: Callable[[], Iterable[bytes]], steps: list[int | str]
) -> None:
    """A PUT may be repeated, but not with its body gone: the call fails on the first
    attempt's outcome, saying the spent body is why, and the server saw the body once,
    whole."""
    with _session() as session, pytest.raises(retrysafe.ApiError) as caught:
        session.put(chaos.url("/sequence/{key}", steps=steps), data=body())
    assert caught.value.spent_body is True
    assert caught.value.reason == "unsafe_to_repeat"
    assert caught.value.attempts == 1
    assert caught.value.retryable is True  # (your own retry, with the body again, is safe)
    records = chaos.log()
    assert len(records) == 1
    if steps[0] == 503:  # (a reset may come before the server read the body)
        assert records[0].body_sha256 == WHOLE_SHA256


def test_requests_a_bytes_body_is_sent_again_whole(chaos: KeyedChaos) -> None:
    """The counterpart: bytes can be sent again, so the 503 is retried, body and all."""
    with _session() as session:
        response = session.put(chaos.url("/fail/{key}", times=1), data=b"".join(PARTS))
    assert response.status_code == 200
    assert [record.body_sha256 for record in chaos.log()] == [WHOLE_SHA256] * 2


async def _parts() -> AsyncIterator[bytes]:
    for part in PARTS:
        yield part


@pytest.mark.parametrize("steps", [[503, 200], ["reset", 200]], ids=["503", "reset"])
def test_aiohttp_a_streamed_body_is_not_sent_again_after_an_attempt_that_sent_it(
    chaos: KeyedChaos, steps: list[int | str]
) -> None:
    middleware = RetryMiddleware(policy=FAST)

    async def run() -> BaseException:
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            url = chaos.url("/sequence/{key}", steps=steps)
            with pytest.raises(retrysafe.ApiError) as caught:
                async with session.put(url, data=_parts()) as response:
                    await response.read()
            return caught.value

    error = asyncio.run(run())
    assert isinstance(error, retrysafe.ApiError)
    assert error.spent_body is True
    assert error.reason == "unsafe_to_repeat"
    assert error.attempts == 1
    records = chaos.log()
    assert len(records) == 1
    if steps[0] == 503:
        assert records[0].body_sha256 == WHOLE_SHA256


def test_aiohttp_a_bytes_body_is_sent_again_whole(chaos: KeyedChaos) -> None:
    middleware = RetryMiddleware(policy=FAST)

    async def run() -> int:
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as session,
            session.put(chaos.url("/fail/{key}", times=1), data=b"".join(PARTS)) as response,
        ):
            return response.status

    assert asyncio.run(run()) == 200
    assert [record.body_sha256 for record in chaos.log()] == [WHOLE_SHA256] * 2
