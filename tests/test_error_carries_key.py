"""An ambiguous failure carries the idempotency key, so it can be resent under the same key."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe.testing import FakeClock


def always_timing_out() -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("the reply was lost", request=request)

    return httpx.MockTransport(handler)


def test_an_ambiguous_keyed_failure_carries_the_key_it_was_sent_with() -> None:
    client = retrysafe.Client(
        transport=always_timing_out(),
        clock=FakeClock(),
        governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
    )
    with pytest.raises(retrysafe.TransportError) as caught:
        client.post("http://api.test/payments", json={"amount": 1}, idempotency_key=True)
    error = caught.value
    assert error.processed == "maybe"
    assert error.attempts == 4  # keyed: safe to repeat
    assert error.idempotency_key is not None
    assert f"resend it under the same idempotency key ({error.idempotency_key})" in str(error)
    resend = client.build_request(
        "POST", "http://api.test/payments", headers={"Idempotency-Key": error.idempotency_key}
    )
    assert resend.headers["Idempotency-Key"] == error.idempotency_key


def test_an_unkeyed_failure_has_no_key_to_offer() -> None:
    client = retrysafe.Client(transport=always_timing_out(), clock=FakeClock())
    with pytest.raises(retrysafe.TransportError) as caught:
        client.get("http://api.test/things")
    assert caught.value.idempotency_key is None
    assert "idempotency key (" not in str(caught.value)


def timing_out_at_the_deadline(clock: FakeClock, deadline: float) -> httpx.MockTransport:
    """Each attempt takes the call's whole deadline, then its reply is lost."""

    def handler(request: httpx.Request) -> httpx.Response:
        clock.advance(deadline)
        raise httpx.ReadTimeout("the reply was lost", request=request)

    return httpx.MockTransport(handler)


def cut_by_the_deadline(method: str, **options: Any) -> retrysafe.DeadlineExceeded:
    """The error of one call to http://api.test/payments whose only attempt, sent, is cut
    off by the call's 1 s deadline."""
    clock = FakeClock()
    client = retrysafe.Client(
        transport=timing_out_at_the_deadline(clock, 1.0),
        clock=clock,
        policy=retrysafe.RetryPolicy(deadline=1.0),
    )
    with pytest.raises(retrysafe.DeadlineExceeded) as caught:
        client.request(method, "http://api.test/payments", **options)
    return caught.value


@pytest.mark.parametrize("keyed", [False, True])
def test_a_write_cut_by_the_deadline_warns_that_the_server_may_have_acted(keyed: bool) -> None:
    error = cut_by_the_deadline("POST", json={"amount": 1}, idempotency_key=keyed)
    assert (error.processed, error.retryable, error.attempts) == ("maybe", keyed, 1)
    # "raise the deadline" alone would invite sending the write again blind
    assert "the server may have processed it: check before sending a write again" in str(error)
    assert ("resend it under the same idempotency key" in str(error)) is keyed


def test_a_deadline_with_no_attempt_sent_says_nothing_of_the_server() -> None:
    clock = FakeClock()
    client = retrysafe.Client(transport=always_timing_out(), clock=clock)
    with (
        pytest.raises(retrysafe.DeadlineExceeded) as caught,
        retrysafe.deadline(0.1, clock=clock),  # (below min_attempt_time: none starts)
    ):
        client.post("http://api.test/payments", json={"amount": 1})
    assert caught.value.attempts == 0
    assert "the server" not in str(caught.value)


def test_a_read_cut_by_the_deadline_does_not_talk_of_writes() -> None:
    # Whether the server acted on a GET does not matter before it is sent again: the
    # message leaves out the warning a write gets.
    error = cut_by_the_deadline("GET")
    assert error.processed == "maybe"
    assert "processed" not in str(error)
    assert "write" not in str(error)
    assert str(error).startswith("GET http://api.test/payments failed: ")


@pytest.mark.parametrize("keyed", [False, True])
def test_a_keyed_write_out_of_attempts_on_5xx_says_the_key_gets_its_result(keyed: bool) -> None:
    # A gateway's 502 may come after the server acted (a lost reply): the advice names the
    # key that fetches the result instead of only "try again later".
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(502)),
        clock=FakeClock(),
        governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
    )
    with pytest.raises(retrysafe.ServerError) as caught:
        client.post("http://api.test/payments", json={"amount": 1}, idempotency_key=keyed)
    error = caught.value
    said = f"resend it under the same idempotency key ({error.idempotency_key})"
    assert (said in str(error)) is keyed  # (unkeyed, it was never repeated: unsafe_to_repeat)


def test_a_keyed_read_out_of_attempts_needs_no_key_advice() -> None:
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(503)),
        clock=FakeClock(),
        governor=retrysafe.Governor(retrysafe.GovernorSettings.off()),
    )
    with pytest.raises(retrysafe.ServerError) as caught:
        client.get("http://api.test/things", idempotency_key="k-1")
    assert "idempotency key" not in str(caught.value)


@pytest.mark.parametrize("keyed", [False, True])
def test_a_keyed_write_whose_body_broke_off_names_the_key_to_resend_it_under(
    keyed: bool, chaos: Any
) -> None:
    """Found in a user trial: a keyed POST whose answers were cut mid-body ended as
    ``BadResponse`` with no word of the key, so ``retrysafe request --idempotency-key auto``
    lost the key it had made. A body cut off comes after the server took the request."""
    url = chaos.url("/sequence/{key}", steps=["truncate"])
    policy = retrysafe.RetryPolicy(attempts=2, backoff_base=0.01)
    with (
        retrysafe.Client(policy=policy) as client,
        pytest.raises(retrysafe.BadResponse) as caught,
    ):
        client.post(url, content=b"x", idempotency_key=keyed)
    error = caught.value
    assert error.processed == "maybe"
    if keyed:
        assert (error.reason, error.attempts) == ("attempts_exhausted", 2)
        assert "the server may have processed it: check before sending a write again" in str(error)
        assert f"resend it under the same idempotency key ({error.idempotency_key})" in str(error)
    else:  # (not repeated; its own advice says how a key makes retries safe)
        assert (error.reason, error.attempts) == ("unsafe_to_repeat", 1)
        assert "send it with an idempotency key" in str(error)
