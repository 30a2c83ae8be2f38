"""How a named operation (``operation=``) meets the call's other options: it keeps its
own key, and the journal keeps why a run failed.

The network here is httpx.MockTransport; tests/e2e/test_journal.py covers the journal
over real sockets, and a run after an ambiguous one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.idempotency import Journal

FAST = RetryPolicy(attempts=3, backoff_base=0.0, backoff_cap=0.0, retry_after_jitter=0.0)
PAYMENT = {"amount": 4900, "currency": "eur"}


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal(tmp_path / "operations.sqlite3") as opened:
        yield opened


@pytest.mark.parametrize("key", [True, "order-7-pay"])
def test_an_operation_refuses_a_key_of_the_callers(journal: Journal, key: bool | str) -> None:
    """The operation's key is the journal's (the one a later run resumes with): a key
    given beside it is refused before anything is sent or journaled, never dropped."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201)

    with (
        retrysafe.Client(transport=httpx.MockTransport(handler), journal=journal) as client,
        pytest.raises(ValueError, match="do not pass idempotency_key"),
    ):
        client.post("https://api.test/pay", json=PAYMENT, operation="pay-1", idempotency_key=key)
    assert sent == []
    assert journal.get("pay-1") is None


def test_an_operation_that_failed_keeps_why_in_the_journal(journal: Journal) -> None:
    """The journal records how the call ended: its state, attempts, last status and the
    reason the error gave, for whoever reconciles it later."""

    def refusing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"error": "amount must be positive"})

    with (
        retrysafe.Client(
            transport=httpx.MockTransport(refusing), journal=journal, policy=FAST
        ) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.post("https://api.test/payouts", json=PAYMENT, operation="payout-9")
    operation = journal.get("payout-9")
    assert operation is not None
    assert (operation.state, operation.attempts, operation.last_status, operation.reason) == (
        "failed",
        1,
        422,
        caught.value.reason,
    )
    assert operation.reason == "unprocessable_content"
