"""/retry-after: hints in every form, and enforcement of the wait they ask for."""

from __future__ import annotations

import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime

import httpx
import pytest

from retrysafe.chaos import KeyedChaos


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def test_seconds_hint_is_enforced_then_honoured(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/retry-after", mode="seconds", seconds=1)

    first = client.get(url)
    too_early = client.get(url)
    time.sleep(1.05)
    after_waiting = client.get(url)

    assert (first.status_code, first.headers["retry-after"]) == (429, "1")
    assert (too_early.status_code, too_early.headers["retry-after"]) == (429, "1")
    assert after_waiting.status_code == 200
    assert [r.action for r in chaos.log()] == ["status:429", "early", "status:200"]


def test_an_early_retry_starts_the_wait_over(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/retry-after", seconds=1)
    client.get(url)
    time.sleep(0.6)
    client.get(url)  # early: the full second starts again
    time.sleep(0.6)

    assert client.get(url).status_code == 429
    assert [r.action for r in chaos.log()] == ["status:429", "early", "early"]


def test_after_being_served_the_key_stays_served(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/retry-after", seconds=0)

    assert [client.get(url).status_code for _ in range(3)] == [429, 200, 200]


def test_status_parameter_changes_the_refusal(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/retry-after", status=503, seconds=5))

    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"


def test_date_hint_is_a_future_imf_fixdate_and_is_enforced(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = chaos.url("/retry-after", mode="date", seconds=30)

    first = client.get(url)
    early = client.get(url)

    hint = first.headers["retry-after"]
    assert hint.endswith(" GMT")
    wait = parsedate_to_datetime(hint).timestamp() - time.time()
    assert 28 < wait <= 31
    assert early.status_code == 429
    assert [r.action for r in chaos.log()] == ["status:429", "early"]


def test_past_date_hint_allows_an_immediate_retry(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/retry-after", mode="past-date")

    first = client.get(url)

    assert parsedate_to_datetime(first.headers["retry-after"]).timestamp() < time.time()
    assert client.get(url).status_code == 200


def test_garbage_hint_carries_no_wait(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/retry-after", mode="garbage", seconds=60)

    first = client.get(url)

    assert first.headers["retry-after"] == "soon"
    assert client.get(url).status_code == 200


def test_unknown_mode_is_a_bad_request(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/retry-after", mode="tomorrow"))

    assert response.status_code == 400
    assert response.json()["parameter"] == "mode"
