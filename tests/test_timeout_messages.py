"""A timeout's message names the limit that ran out: httpx's read timeout, or the
attempt's time (trial63: a 2 s httpx timeout read "the attempt's time ran out
(retrysafe's RetryPolicy attempt_timeout / deadline)", and raising attempt_timeout, as it
said, changed nothing)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest
from tests.local_http import QuietHandler, serving

import retrysafe
from retrysafe import DeadlineExceeded, RetryPolicy
from retrysafe.chaos import KeyedChaos

ONE_ATTEMPT = RetryPolicy(attempts=1)


class Silent(QuietHandler):
    """Reads the request, then sends nothing for a second."""

    def do_GET(self) -> None:
        time.sleep(1.0)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def read_timeout_of(transport: httpx.BaseTransport, timeout: float) -> str:
    """The message of the ``ReadTimeout`` a silent server gives a client over ``transport``
    with httpx's ``timeout``."""
    with (
        serving(Silent) as url,
        httpx.Client(transport=transport, timeout=timeout) as client,
        pytest.raises(httpx.ReadTimeout) as caught,
    ):
        client.get(url)
    return str(caught.value)


def test_httpx_read_timeout_running_out_first_is_named_as_httpx_s() -> None:
    message = read_timeout_of(retrysafe.RetryTransport(policy=ONE_ATTEMPT), 0.3)
    assert message.startswith("the server sent nothing for the whole read timeout 0.3 s")
    assert "httpx's timeout=" in message
    assert "attempt_timeout" not in message


def test_the_attempts_time_running_out_first_is_named_as_retrysafe_s() -> None:
    transport = retrysafe.RetryTransport(policy=RetryPolicy(attempts=1, attempt_timeout=0.3))
    with (
        serving(Silent) as url,
        httpx.Client(transport=transport, timeout=5) as client,
        pytest.raises(httpx.TimeoutException) as caught,
    ):
        client.get(url)
    assert "RetryPolicy attempt_timeout / deadline" in str(caught.value)


def test_the_async_transport_names_httpx_s_read_timeout_alike() -> None:
    async def call(url: str) -> None:
        transport = retrysafe.AsyncRetryTransport(policy=ONE_ATTEMPT)
        async with httpx.AsyncClient(transport=transport, timeout=0.3) as client:
            await client.get(url)

    with serving(Silent) as url, pytest.raises(httpx.ReadTimeout) as caught:
        asyncio.run(call(url))
    assert str(caught.value).startswith("the server sent nothing for the whole read timeout")


def test_a_hedged_copys_read_timeout_is_named_as_httpx_s_too() -> None:
    """A hedged copy runs as an object of its own: the caller's timeouts are its call's
    (review62)."""
    policy = RetryPolicy(attempts=2, hedge_after=0.05, max_hedges=1)
    message = read_timeout_of(retrysafe.RetryTransport(policy=policy), 0.3)
    assert message.startswith("the server sent nothing for the whole read timeout")


def test_a_deadline_spent_on_attempts_that_all_timed_out_points_at_the_attempts_time(
    chaos: KeyedChaos,
) -> None:
    """A body that takes 1 s, attempts of 0.2 s: each attempt is cut, and a longer
    deadline would only buy more of them. The advice names the attempt's time (trial98:
    it said to raise the deadline)."""
    url = chaos.url("/drip", chunks=10, interval_ms=100, chunk_bytes=8)
    policy = RetryPolicy(attempt_timeout=0.2, deadline=0.7, min_attempt_time=0.05, backoff_base=0)
    with retrysafe.Client(policy=policy) as client, pytest.raises(DeadlineExceeded) as raised:
        client.get(url)
    error = raised.value
    assert error.attempts >= 2
    assert error.attempts_too_short
    message = str(error)
    assert "every attempt timed out, the longest after " in message
    assert " of the 0.2 s an attempt may take" in message
    assert "RetryPolicy(attempt_timeout=...)" in message
    assert "raise the deadline or make the call cheaper" not in message


@pytest.mark.parametrize("cut", ["policy", "scope"])
def test_a_deadline_that_cut_every_attempt_short_still_says_to_raise_it(
    chaos: KeyedChaos, cut: str
) -> None:
    """A 0.6 s deadline against a 1 s answer, attempts of the default 10 s: the deadline
    cut every attempt, and a longer one is the fix (review95: the first version of the
    advice above said to lengthen the attempt here too)."""
    url = chaos.url("/drip", chunks=10, interval_ms=100, chunk_bytes=8)
    policy = RetryPolicy(deadline=0.6 if cut == "policy" else 30, min_attempt_time=0.05)
    scope = retrysafe.deadline(0.6) if cut == "scope" else contextlib.nullcontext()
    with (
        scope,
        retrysafe.Client(policy=policy) as client,
        pytest.raises(DeadlineExceeded) as raised,
    ):
        client.get(url)
    assert not raised.value.attempts_too_short
    assert "raise the deadline or make the call cheaper" in str(raised.value)
