"""Body-centred endpoints: /quota, /refused-site, /ok-error, /echo."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from retrysafe.chaos import KeyedChaos


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def test_quota_is_a_429_with_zero_credits_left(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/quota"))

    assert response.status_code == 429
    assert response.headers["x-api-remaining-credits"] == "0"
    assert "retry-after" not in response.headers
    assert "error" in response.json()


def test_quota_header_value_and_name_can_be_chosen(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/quota", remaining="-1", header="x-credits-left"))

    assert response.headers["x-credits-left"] == "-1"
    assert "x-api-remaining-credits" not in response.headers


def test_refused_site_is_a_503_with_a_stable_error(chaos: KeyedChaos, client: httpx.Client) -> None:
    first = client.get(chaos.url("/refused-site"))
    second = client.get(chaos.url("/refused-site"))

    assert first.status_code == second.status_code == 503
    expected = {"error": "The website returned HTTP 403 and could not be read."}
    assert first.json() == second.json() == expected


def test_ok_error_is_a_200_reporting_an_error(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/ok-error"))

    assert response.status_code == 200
    assert response.json()["status"] == "error"
    assert response.json()["error"]


def test_echo_reflects_method_path_query_headers_and_body(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.put(
        chaos.url("/echo", colour="blue", unknown="ignored"),
        content="héllo",
        headers={"X-Custom": "yes", "Idempotency-Key": "k-1"},
    )

    echoed = response.json()
    assert response.status_code == 200
    assert echoed["method"] == "PUT"
    assert echoed["path"] == "/echo"
    assert echoed["query"] == {"colour": "blue", "unknown": "ignored", "key": chaos.key}
    assert echoed["headers"]["x-custom"] == "yes"
    assert echoed["headers"]["idempotency-key"] == "k-1"
    assert echoed["body"] == "héllo"
    assert chaos.log()[0].idempotency_key == "k-1"


def test_echo_keeps_repeated_query_parameters(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/echo") + "&tag=a&tag=b")

    assert ["tag", "a"] in response.json()["query_list"]
    assert ["tag", "b"] in response.json()["query_list"]


def test_auth_says_where_the_key_goes_until_it_is_sent(chaos: KeyedChaos) -> None:
    with httpx.Client() as client:
        refused = client.get(chaos.url("/auth"))
        allowed = client.get(chaos.url("/auth"), headers={"X-Api-Key": "k"})
    assert refused.status_code == 401
    assert "x-api-key header" in refused.json()["message"]
    assert allowed.status_code == 200


def test_validate_names_each_missing_parameter(chaos: KeyedChaos) -> None:
    with httpx.Client() as client:
        typo = client.get(chaos.url("/validate", require="email", emial="jane@example.com"))
        right = client.get(chaos.url("/validate", require="email", email="jane@example.com"))
    assert (typo.status_code, typo.json()) == (400, {"missing": ["email"]})
    assert (right.status_code, right.json()) == (200, {"email": "jane@example.com"})
