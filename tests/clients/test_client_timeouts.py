"""Timeouts through the requests adapter and the aiohttp middleware.

A call that ends on a timeout of any kind (connecting, a read, the attempt's own time)
raises an error that is also the client library's own timeout type, so a handler
written for requests or aiohttp catches it. requests' ``timeout=`` is kept as the
caller gave it: a streamed body is read with the caller's read timeout, and urllib3's
``Timeout(total=, read=)`` bounds each read by the shorter of the two. Over real
loopback sockets; bounds on elapsed time have wide margins.
"""

from __future__ import annotations

import asyncio
import pickle
import time

import aiohttp
import pytest
import requests
from urllib3.exceptions import ReadTimeoutError
from urllib3.util import Timeout as Urllib3Timeout

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware
from retrysafe.chaos import KeyedChaos
from retrysafe.requests import RetryAdapter, report_of
from test_client_sockets import full_backlog_url

__all__ = ["full_backlog_url"]

ONE_SHORT_ATTEMPT = RetryPolicy(attempts=1, attempt_timeout=0.4)


def session_with(adapter: RetryAdapter) -> requests.Session:
    session = requests.Session()
    session.mount("http://", adapter)
    return session


async def aiohttp_get(middleware: RetryMiddleware, url: str) -> None:
    async with (
        aiohttp.ClientSession(middlewares=(middleware,)) as session,
        session.get(url) as response,
    ):
        await response.read()


# -- a timed-out call raises the client's own timeout type -----------------------------------


def test_requests_a_call_ending_on_a_connect_timeout_raises_a_requests_timeout(
    full_backlog_url: str,
) -> None:
    with (
        session_with(RetryAdapter(policy=ONE_SHORT_ATTEMPT)) as session,
        pytest.raises(requests.Timeout) as caught,
    ):
        session.get(full_backlog_url)
    assert isinstance(caught.value, retrysafe.TransportError)
    assert caught.value.sent == "no"
    # (requests' own class for it, which `except requests.ConnectTimeout` catches)
    assert isinstance(caught.value, requests.ConnectTimeout)
    assert not isinstance(caught.value, requests.ReadTimeout)


def test_requests_a_call_ending_on_its_attempts_own_time_raises_a_requests_timeout(
    chaos: KeyedChaos,
) -> None:
    """Each chunk comes well within the read timeout: only the attempt's whole time (the
    watchdog) ends it, and that is a timeout too."""
    url = chaos.url("/drip", chunks=20, interval_ms=100)
    with (
        session_with(RetryAdapter(policy=ONE_SHORT_ATTEMPT)) as session,
        pytest.raises(requests.Timeout) as caught,
    ):
        session.get(url, timeout=5)
    assert isinstance(caught.value, retrysafe.TransportError)
    assert not isinstance(caught.value, retrysafe.DeadlineExceeded)
    # (the answer did not come in time: requests' read timeout, not its connect timeout)
    assert isinstance(caught.value, requests.ReadTimeout)
    assert not isinstance(caught.value, requests.ConnectTimeout)


def test_requests_a_call_ending_on_the_callers_read_timeout_raises_a_requests_read_timeout(
    chaos: KeyedChaos,
) -> None:
    """An ``except requests.ReadTimeout`` written for requests' own error catches it, and
    the error pickles as its own class."""
    with (
        session_with(RetryAdapter(policy=ONE_SHORT_ATTEMPT)) as session,
        pytest.raises(requests.ReadTimeout) as caught,
    ):
        session.get(chaos.url("/hang"), timeout=0.2)
    assert isinstance(caught.value, retrysafe.TransportError)
    assert caught.value.history[-1].outcome == "read_timeout"
    assert type(pickle.loads(pickle.dumps(caught.value))) is type(caught.value)


def test_aiohttp_a_call_ending_on_a_connect_timeout_raises_aiohttps_timeout(
    full_backlog_url: str,
) -> None:
    middleware = RetryMiddleware(policy=ONE_SHORT_ATTEMPT)
    with pytest.raises(aiohttp.ServerTimeoutError) as caught:
        asyncio.run(aiohttp_get(middleware, full_backlog_url))
    assert isinstance(caught.value, asyncio.TimeoutError)
    assert isinstance(caught.value, retrysafe.TransportError)
    assert caught.value.sent == "no"


def test_aiohttp_a_call_ending_on_its_attempts_own_time_raises_aiohttps_timeout(
    chaos: KeyedChaos,
) -> None:
    middleware = RetryMiddleware(policy=ONE_SHORT_ATTEMPT)
    with pytest.raises(aiohttp.ServerTimeoutError) as caught:
        asyncio.run(aiohttp_get(middleware, chaos.url("/hang")))
    assert isinstance(caught.value, asyncio.TimeoutError)
    assert isinstance(caught.value, retrysafe.TransportError)
    assert not isinstance(caught.value, retrysafe.DeadlineExceeded)


# -- a streamed body is read with the caller's read timeout ----------------------------------


def test_requests_a_streamed_body_that_stalls_past_the_callers_read_timeout_times_out(
    chaos: KeyedChaos,
) -> None:
    """After a retried 503, the stream's first event comes at once, the next 2 s later:
    the caller's read timeout (0.4 s) ends the wait, as it would without the adapter
    (requests raises its ConnectionError around urllib3's ReadTimeoutError there)."""
    url = chaos.url("/sse", events=2, interval_ms=2000, fail_times=1)
    policy = RetryPolicy(backoff_base=0.01, backoff_cap=0.05, attempt_timeout=5)
    with session_with(RetryAdapter(policy=policy)) as session:
        response = session.get(url, stream=True, timeout=(5, 0.4))
        assert report_of(response).attempts == 2  # type: ignore[union-attr]
        started = time.monotonic()
        with pytest.raises(requests.ConnectionError) as caught:
            for _ in response.iter_content(chunk_size=None):
                pass
        waited = time.monotonic() - started
        response.close()
    assert isinstance(caught.value.args[0], ReadTimeoutError)
    assert waited < 1.5  # (the 0.4 s read timeout, not the 2 s gap)


# -- urllib3's Timeout: each read bounded by the shorter of total and read --------------------


@pytest.mark.parametrize(
    "timeout",
    [Urllib3Timeout(total=0.4, read=8), Urllib3Timeout(total=8, read=0.4)],
    ids=["total shorter", "read shorter"],
)
def test_requests_urllib3s_timeout_bounds_a_read_by_the_shorter_of_total_and_read(
    chaos: KeyedChaos, timeout: Urllib3Timeout
) -> None:
    policy = RetryPolicy(attempts=1, attempt_timeout=10)
    started = time.monotonic()
    with session_with(RetryAdapter(policy=policy)) as session, pytest.raises(requests.Timeout):
        session.get(chaos.url("/hang"), timeout=timeout)
    assert time.monotonic() - started < 3.0  # (0.4 s, not the 8 s of the other)
