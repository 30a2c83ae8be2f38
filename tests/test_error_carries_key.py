"""An ambiguous failure carries the idempotency key, so it can be resent under the same key."""

from __future__ import annotations

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
