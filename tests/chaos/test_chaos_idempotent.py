"""/idempotent/{resource}: effects applied once per key, replies that fail after commit."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from retrysafe.chaos import KeyedChaos

Post = Callable[..., httpx.Response]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


@pytest.fixture
def post(client: httpx.Client) -> Post:
    """POST a fixed body, with an Idempotency-Key when one is given."""

    def post(url: str, key: str | None = None, body: bytes = b'{"amount": 5}') -> httpx.Response:
        headers = {} if key is None else {"Idempotency-Key": key}
        return client.post(url, content=body, headers=headers)

    return post


def test_a_keyed_write_applies_once_and_replays_its_reply(chaos: KeyedChaos, post: Post) -> None:
    url = chaos.url("/idempotent/orders")

    first = post(url, "op-1")
    repeat = post(url, "op-1")

    assert first.status_code == repeat.status_code == 201
    assert "idempotent-replayed" not in first.headers
    assert repeat.headers["idempotent-replayed"] == "true"
    assert repeat.json() == first.json()
    assert chaos.ledger("orders") == {"op-1": 1}
    assert [(r.action, r.detail) for r in chaos.log()] == [
        ("status:201", "applied"),
        ("status:201", "replayed"),
    ]


def test_different_keys_are_different_writes(chaos: KeyedChaos, post: Post) -> None:
    url = chaos.url("/idempotent/orders")

    ids = {post(url, key).json()["id"] for key in ["a", "b", "a"]}

    assert len(ids) == 2
    assert chaos.ledger("orders") == {"a": 1, "b": 1}


def test_writes_without_a_key_apply_every_time_under_empty_key(
    chaos: KeyedChaos, post: Post
) -> None:
    url = chaos.url("/idempotent/orders")

    post(url)
    post(url)

    assert chaos.ledger("orders") == {"": 2}


@pytest.mark.parametrize("status", [500, 503])
def test_fail_after_commit_status_loses_the_reply_not_the_write(
    chaos: KeyedChaos, post: Post, status: int
) -> None:
    url = chaos.url("/idempotent/orders", fail_after_commit=status)

    failed = post(url, "op-1")
    retried = post(url, "op-1")

    assert failed.status_code == status
    assert retried.status_code == 201
    assert retried.headers["idempotent-replayed"] == "true"
    assert chaos.ledger("orders") == {"op-1": 1}
    assert failed.json()["error"]
    assert [(r.action, r.detail) for r in chaos.log()] == [
        (f"status:{status}", "applied"),
        ("status:201", "replayed"),
    ]


def test_fail_after_commit_reset_drops_the_connection_after_applying(
    chaos: KeyedChaos, post: Post
) -> None:
    url = chaos.url("/idempotent/orders", fail_after_commit="reset")

    with pytest.raises(httpx.ReadError):
        post(url, "op-1")

    assert chaos.ledger("orders") == {"op-1": 1}
    assert post(url, "op-1").headers["idempotent-replayed"] == "true"
    assert [(r.action, r.detail) for r in chaos.log()] == [
        ("reset", "applied"),
        ("status:201", "replayed"),
    ]


def test_fail_after_commit_hang_times_out_after_applying(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = chaos.url("/idempotent/orders", fail_after_commit="hang")

    with pytest.raises(httpx.ReadTimeout):
        client.post(url, headers={"Idempotency-Key": "op-1"}, timeout=0.3)

    assert chaos.ledger("orders") == {"op-1": 1}


def test_fail_times_fails_the_first_n_replies_per_key(chaos: KeyedChaos, post: Post) -> None:
    url = chaos.url("/idempotent/orders", fail_after_commit=503, fail_times=2)

    statuses = [post(url, "op-1").status_code for _ in range(3)]
    other_key = post(url, "op-2").status_code

    assert statuses == [503, 503, 201]
    assert other_key == 503
    assert chaos.ledger("orders") == {"op-1": 1, "op-2": 1}


def test_a_retry_without_a_key_applies_the_effect_twice(chaos: KeyedChaos, post: Post) -> None:
    url = chaos.url("/idempotent/orders", fail_after_commit=500)

    assert post(url).status_code == 500
    assert post(url).status_code == 201
    assert chaos.ledger("orders") == {"": 2}


def test_reusing_a_key_with_another_body_is_refused(chaos: KeyedChaos, post: Post) -> None:
    url = chaos.url("/idempotent/orders")
    post(url, "op-1", body=b'{"amount": 5}')

    conflict = post(url, "op-1", body=b'{"amount": 6}')

    assert conflict.status_code == 422
    assert chaos.ledger("orders") == {"op-1": 1}
    assert chaos.log()[-1].detail == "conflict"


def test_ledger_is_served_over_http_per_key(
    chaos: KeyedChaos, client: httpx.Client, post: Post
) -> None:
    post(chaos.url("/idempotent/orders"), "op-1")

    over_http = client.get(chaos.url("/_chaos/ledger/orders")).json()
    other_key = client.get(chaos.url("/_chaos/ledger/orders", key="someone-else")).json()

    assert over_http == {"op-1": 1}
    assert other_key == {}


def test_only_post_is_accepted(chaos: KeyedChaos, client: httpx.Client) -> None:
    assert client.get(chaos.url("/idempotent/orders")).status_code == 405


def test_one_idempotency_key_on_two_resources_is_two_writes(chaos: KeyedChaos, post: Post) -> None:
    """Writes are scoped by resource: reusing a key on another resource applies it there."""
    orders = post(chaos.url("/idempotent/orders"), "op-1")
    refunds = post(chaos.url("/idempotent/refunds"), "op-1")

    assert orders.status_code == refunds.status_code == 201
    assert "idempotent-replayed" not in refunds.headers
    assert orders.json()["resource"] == "orders"
    assert refunds.json()["resource"] == "refunds"
    assert orders.json()["id"] != refunds.json()["id"]
    assert chaos.ledger("orders") == chaos.ledger("refunds") == {"op-1": 1}


def test_the_reply_names_the_write_and_its_replay_is_the_same_json(
    chaos: KeyedChaos, post: Post
) -> None:
    url = chaos.url("/idempotent/orders")

    first = post(url, "op-1")
    repeat = post(url, "op-1")

    assert first.json() == {
        "resource": "orders",
        "id": first.json()["id"],
        "idempotency_key": "op-1",
        "key": chaos.key,
    }
    assert repeat.content == first.content
    assert first.headers["content-type"] == repeat.headers["content-type"] == "application/json"
    assert (first.headers["x-attempt"], repeat.headers["x-attempt"]) == ("1", "2")


def test_a_key_reused_with_another_body_is_refused_even_while_replies_still_fail(
    chaos: KeyedChaos, post: Post
) -> None:
    """The 422 is not a commit: ``fail_after_commit`` never hides it behind a lost reply."""
    url = chaos.url("/idempotent/orders", fail_after_commit=503, fail_times=3)

    assert post(url, "op-1", body=b'{"amount": 5}').status_code == 503
    conflict = post(url, "op-1", body=b'{"amount": 6}')

    assert conflict.status_code == 422
    assert "different body" in conflict.json()["error"]
    assert chaos.ledger("orders") == {"op-1": 1}
    assert [(r.action, r.detail) for r in chaos.log()] == [
        ("status:503", "applied"),
        ("status:422", "conflict"),
    ]


def test_a_hung_reply_is_logged_as_applied(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/idempotent/orders", fail_after_commit="hang")

    with pytest.raises(httpx.ReadTimeout):
        client.post(url, headers={"Idempotency-Key": "op-1"}, timeout=0.3)

    assert [(r.action, r.detail) for r in chaos.log()] == [("hang", "applied")]


@pytest.mark.parametrize("failure", ["timeout", "502", "RESET"])
def test_an_unknown_fail_after_commit_is_refused_and_applies_nothing(
    chaos: KeyedChaos, post: Post, failure: str
) -> None:
    response = post(chaos.url("/idempotent/orders", fail_after_commit=failure), "op-1")

    assert response.status_code == 400
    assert response.json()["parameter"] == "fail_after_commit"
    assert chaos.ledger("orders") == {}
    assert chaos.log() == []
