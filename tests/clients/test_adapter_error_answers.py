"""The requests adapter and the aiohttp middleware keep an error answer's status, however
its body arrives (as the httpx shells do: ``tests/test_error_answer_body.py``).

With ``raise_on_status=False`` a final answer is returned as the response, its body read
by the caller after the call, with the caller's own timeouts, as without retrysafe. With
the default, the error carries the body, read inside the attempt; if it does not come,
the error is still the answer's (a ``ClientError`` for a 404, no body). Before, a 404
whose body trickled past the attempt's time was sent four times and ended as a timeout.
"""

from __future__ import annotations

import aiohttp
import pytest
import requests

from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware
from retrysafe.aiohttp import errors as aiohttp_errors
from retrysafe.chaos import KeyedChaos
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
