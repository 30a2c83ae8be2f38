"""The fake Stripe API, read over plain HTTP: what the stripe SDK relies on it to do.

``POST /stripe/{key}/{fail_times}/{fail_status}/v1/customers`` fails its first
``fail_times`` requests with a Stripe error object, then creates customers from the
form-encoded body; a repeated ``Idempotency-Key`` gets the stored reply back, and the
same key with another body is refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from retrysafe.chaos import KeyedChaos


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def _customers(chaos: KeyedChaos, fail_times: int = 0, fail_status: int = 503) -> str:
    return f"{chaos.base_url}/stripe/{chaos.key}/{fail_times}/{fail_status}/v1/customers"


def test_the_first_requests_fail_with_a_stripe_error_object(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = _customers(chaos, fail_times=2, fail_status=502)
    form = {"email": "ada@example.com"}

    replies = [client.post(url, data=form) for _ in range(3)]

    assert [reply.status_code for reply in replies] == [502, 502, 200]
    for attempt, reply in enumerate(replies[:2], start=1):
        error = reply.json()["error"]
        assert error["type"] == "api_error"
        assert f"attempt {attempt}" in error["message"]
    assert [r.action for r in chaos.log()] == ["status:502", "status:502", "status:200"]


def test_a_customer_is_created_from_the_form_encoded_body(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.post(_customers(chaos), data={"email": "ada@example.com", "name": "Ada"})

    assert response.status_code == 200
    customer = response.json()
    assert customer["id"].startswith("cus_")
    assert customer["object"] == "customer"
    assert (customer["email"], customer["name"]) == ("ada@example.com", "Ada")
    assert "idempotent-replayed" not in response.headers
    assert [(r.action, r.detail) for r in chaos.log()] == [("status:200", "created")]


def test_a_repeated_idempotency_key_replays_the_stored_customer(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = _customers(chaos)
    headers = {"Idempotency-Key": "cus-ada-1"}

    first = client.post(url, data={"email": "ada@example.com", "name": "Ada"}, headers=headers)
    repeat = client.post(url, data={"email": "ada@example.com", "name": "Ada"}, headers=headers)

    assert first.status_code == repeat.status_code == 200
    assert repeat.headers["idempotent-replayed"] == "true"
    assert repeat.json() == first.json()
    assert [(r.action, r.detail) for r in chaos.log()] == [
        ("status:200", "created"),
        ("status:200", "replayed"),
    ]


def test_a_key_sent_again_with_another_body_is_refused_as_stripe_refuses_it(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = _customers(chaos)
    headers = {"Idempotency-Key": "cus-ada-2"}

    first = client.post(url, data={"email": "ada@example.com"}, headers=headers)
    other = client.post(url, data={"email": "grace@example.com"}, headers=headers)
    again = client.post(url, data={"email": "ada@example.com"}, headers=headers)

    assert other.status_code == 400
    assert other.json()["error"]["type"] == "idempotency_error"
    assert "idempotent-replayed" not in other.headers
    # The key still replays its own request's customer: the refusal changed nothing.
    assert again.json() == first.json()
    assert [r.detail for r in chaos.log()] == ["created", "key_reused", "replayed"]


def test_requests_without_a_key_each_create_a_customer(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = _customers(chaos)

    ids = {client.post(url, data={"email": "ada@example.com"}).json()["id"] for _ in range(2)}

    assert len(ids) == 2
    assert [r.detail for r in chaos.log()] == ["created", "created"]


def test_stored_replies_are_scoped_by_the_state_key(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """One Idempotency-Key under two state keys is two customers: tests never share."""
    other = chaos.server.for_key(chaos.key + "-other")
    headers = {"Idempotency-Key": "cus-shared"}

    mine = client.post(_customers(chaos), data={"email": "a@example.com"}, headers=headers)
    theirs = client.post(_customers(other), data={"email": "b@example.com"}, headers=headers)

    assert "idempotent-replayed" not in theirs.headers
    assert (mine.json()["email"], theirs.json()["email"]) == ("a@example.com", "b@example.com")
    assert [r.detail for r in other.log()] == ["created"]


def test_a_retrysafe_client_names_a_reused_key_and_sends_it_once(chaos: KeyedChaos) -> None:
    """Found in a user trial: the refusal of a reused key ended as ``bad_request``, like
    any malformed request. It is final (one attempt) and named for what it is."""
    import retrysafe

    url = _customers(chaos)
    with retrysafe.Client(timeout=5) as client:
        client.post(url, data={"email": "ada@example.com"}, idempotency_key="cus-ada-3")
        with pytest.raises(retrysafe.ClientError) as caught:
            client.post(url, data={"email": "grace@example.com"}, idempotency_key="cus-ada-3")
    error = caught.value
    assert (error.status, error.reason, error.outcome) == (
        400,
        "idempotency_key_reused",
        "idempotency_key_reused",
    )
    assert (error.attempts, error.retryable) == (1, False)
    assert "a different request needs a key of its own" in str(error)
    assert [r.detail for r in chaos.log()] == ["created", "key_reused"]
