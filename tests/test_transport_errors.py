"""A drop-in transport's refusals are httpx's exceptions too.

When load protection refuses a call before anything is sent, there is no response to
return and no httpx exception to re-raise: the transport raises retrysafe's error,
re-typed to be also an ``httpx.TransportError`` (``DeadlineExceeded``: an
``httpx.TimeoutException``), so code and SDKs that catch httpx's exceptions catch it.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.governor import BreakerSettings, Governor, GovernorSettings
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio

SECRET = "Bearer sk-live-do-not-share"
OPENS_AT_ONCE = GovernorSettings(breaker=BreakerSettings(consecutive_failures=1, open_for=30))


def _failing(request: httpx.Request) -> httpx.Response:
    return httpx.Response(502)


def _breaking(
    kind: type[retrysafe.RetryTransport] | type[retrysafe.AsyncRetryTransport] = (
        retrysafe.RetryTransport
    ),
    *,
    raise_errors: bool = False,
) -> Any:
    """A drop-in transport of ``kind`` over a server answering 502, one attempt a call,
    whose breaker for api.test opens on its first failing call."""
    clock = FakeClock()
    return kind(
        httpx.MockTransport(_failing),
        clock=clock,
        governor=Governor(OPENS_AT_ONCE, clock=clock),
        policy=RetryPolicy(attempts=1),
        raise_errors=raise_errors,
    )


def test_a_call_the_open_breaker_refuses_raises_circuit_open_as_an_httpx_transport_error() -> None:
    with httpx.Client(transport=_breaking()) as client:
        assert client.get("http://api.test/").status_code == 502  # (opens it)
        with pytest.raises(httpx.TransportError) as caught:
            client.get("http://api.test/orders", headers={"Authorization": SECRET})
    refusal = caught.value
    assert isinstance(refusal, retrysafe.CircuitOpen)
    assert (refusal.reason, refusal.attempts) == ("circuit_open", 0)
    assert refusal.request.url == "http://api.test/orders"  # (httpx's own field, set)
    assert repr(refusal).startswith("CircuitOpen(reason='circuit_open'")


async def test_the_async_transport_raises_it_alike() -> None:
    async with httpx.AsyncClient(transport=_breaking(retrysafe.AsyncRetryTransport)) as client:
        assert (await client.get("http://api.test/")).status_code == 502
        with pytest.raises(httpx.TransportError) as caught:
            await client.get("http://api.test/")
    assert isinstance(caught.value, retrysafe.CircuitOpen)


def test_a_call_a_cooldown_refuses_is_an_httpx_transport_error_too() -> None:
    """A 429 asking for more than the call's deadline starts a cooldown; the next call
    is refused before it is sent."""
    clock = FakeClock()
    replies = iter([httpx.Response(429, headers={"Retry-After": "60"})])
    transport = retrysafe.RetryTransport(
        httpx.MockTransport(lambda request: next(replies)),
        clock=clock,
        governor=Governor(clock=clock),
        policy=RetryPolicy(deadline=10),
    )
    with httpx.Client(transport=transport) as client:
        assert client.get("http://api.test/").status_code == 429
        with pytest.raises(httpx.TransportError) as caught:
            client.get("http://api.test/")
    assert isinstance(caught.value, retrysafe.CooldownActive)


def test_a_pickled_refusal_carries_its_request_without_secrets() -> None:
    with httpx.Client(transport=_breaking()) as client:
        client.get("http://api.test/")
        with pytest.raises(retrysafe.CircuitOpen) as caught:
            client.get("http://api.test/?api_key=q-secret", headers={"Authorization": SECRET})
    pickled = pickle.dumps(caught.value)
    assert b"sk-live" not in pickled
    assert b"q-secret" not in pickled
    back = pickle.loads(pickled)
    assert isinstance(back, httpx.TransportError)
    assert isinstance(back, retrysafe.CircuitOpen)
    assert back.request.headers["Authorization"] == "[REDACTED]"


def test_with_raise_errors_and_through_the_client_it_stays_retrysafes_own() -> None:
    """``raise_errors=True`` asks for retrysafe's errors, and ``retrysafe.Client`` raises
    them: neither is re-typed."""
    transport = _breaking(raise_errors=True)
    with httpx.Client(transport=transport) as client:
        assert client.get("http://api.test/").status_code == 502
        with pytest.raises(retrysafe.CircuitOpen) as caught:
            client.get("http://api.test/")
    assert not isinstance(caught.value, httpx.TransportError)
    with (
        retrysafe.Client(
            transport=httpx.MockTransport(_failing), governor=transport.governor
        ) as retrysafe_client,
        pytest.raises(retrysafe.CircuitOpen) as again,
    ):
        retrysafe_client.get("http://api.test/")
    assert not isinstance(again.value, httpx.TransportError)


def _opening_at_once_over(handler: Any) -> retrysafe.RetryTransport:
    """A drop-in transport over ``handler``, three attempts a call, whose breaker opens on
    its first failing call (so a retry is refused)."""
    clock = FakeClock()
    return retrysafe.RetryTransport(
        httpx.MockTransport(handler),
        clock=clock,
        governor=Governor(OPENS_AT_ONCE, clock=clock),
        policy=RetryPolicy(attempts=3),
    )


def _timing_out(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out reading", request=request)


def test_an_attempts_error_raised_after_a_refused_retry_says_no_retry_was_sent() -> None:
    """The drop-in transport re-raises the last attempt's own httpx exception. When load
    protection held the retry back, its message says so, for code that reads only
    ``str()`` (a log line, an SDK's wrapper): it read as a plain timeout (trial59)."""
    transport = _opening_at_once_over(_timing_out)
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.ReadTimeout) as caught:
        client.get("http://api.test/orders", headers={"Authorization": SECRET})
    message = str(caught.value)
    assert message.startswith("timed out reading; no retry was sent: the dependency's circuit")
    assert "breaker held it back" in message
    assert SECRET not in message
    if sys.version_info < (3, 11):
        return  # (exceptions take notes from Python 3.11 on: the message says it alone)
    notes = caught.value.__notes__
    assert len(notes) == 1
    assert notes[0].startswith("retrysafe: GET http://api.test/orders")
    assert "refused a retry (circuit breaker)" in notes[0]


def test_an_attempts_error_after_the_attempts_ran_out_keeps_its_own_message() -> None:
    transport = retrysafe.RetryTransport(
        httpx.MockTransport(_timing_out), clock=FakeClock(), policy=RetryPolicy(attempts=2)
    )
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.ReadTimeout) as caught:
        client.get("http://api.test/orders")
    assert str(caught.value) == "timed out reading"


def test_the_message_says_it_once_when_a_transport_raises_one_exception_for_many_calls() -> None:
    shared = httpx.ReadTimeout("timed out reading")

    def raising(request: httpx.Request) -> httpx.Response:
        raise shared

    transport = _opening_at_once_over(raising)
    with httpx.Client(transport=transport) as client:
        for _ in range(3):
            with pytest.raises(httpx.TransportError):
                client.get("http://api.test/orders")
    assert str(shared).count("no retry was sent") == 1
