"""Body-centred endpoints: /quota, /refused-site, /ok-error, /echo, /auth, /validate and
/malformed's defaults."""

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


def test_auth_accepts_the_header_with_any_value_even_an_empty_one(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """Presence is what counts: an empty value is still the key in the right place."""
    empty = client.get(chaos.url("/auth"), headers={"X-Api-Key": ""})
    elsewhere = client.get(chaos.url("/auth"), headers={"Authorization": "Bearer k"})

    assert empty.status_code == 200
    assert elsewhere.status_code == 401


def test_auth_header_name_can_be_chosen(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/auth", header="x-token")

    refused = client.get(url, headers={"X-Api-Key": "k"})
    allowed = client.get(url, headers={"X-Token": "k"})

    assert refused.status_code == 401
    assert "x-token header" in refused.json()["message"]
    assert allowed.status_code == 200


def test_validate_names_every_missing_parameter_in_order(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """``require=email,name,plan`` with only ``name`` given (and ``email`` empty): 400
    naming ``email`` and ``plan``; all three given: 200 with their values."""
    missing = client.get(chaos.url("/validate", require="email,name,plan", name="Ada", email=""))
    complete = client.get(
        chaos.url("/validate", require="email, name,plan", email="a@b.c", name="Ada", plan="x")
    )

    assert (missing.status_code, missing.json()) == (400, {"missing": ["email", "plan"]})
    assert (complete.status_code, complete.json()) == (
        200,
        {"email": "a@b.c", "name": "Ada", "plan": "x"},
    )


def test_echo_joins_a_repeated_header_and_keeps_the_last_query_value(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """Repeated headers are joined with ``", "``; ``query`` keeps the last value per name,
    ``query_list`` every pair in order."""
    headers = [("X-Tag", "a"), ("X-Tag", "b"), ("X-Once", "c")]
    response = client.get(chaos.url("/echo") + "&tag=first&tag=last", headers=headers)

    echoed = response.json()
    assert echoed["headers"]["x-tag"] == "a, b"
    assert echoed["headers"]["x-once"] == "c"
    assert echoed["query"]["tag"] == "last"
    assert echoed["query_list"] == [["key", chaos.key], ["tag", "first"], ["tag", "last"]]
    assert echoed["path"] == "/echo"


def test_echo_shows_a_body_that_is_not_utf8_with_replacement_characters(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.post(chaos.url("/echo"), content=b"ok \xff\xfe end")

    assert response.json()["body"] == "ok \ufffd\ufffd end"


def test_malformed_defaults_to_truncated_json_with_200(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/malformed"))

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == b'{"items": [{"id": 1}, {"id": 2'
    assert [r.action for r in chaos.log()] == ["malformed:truncated-json"]


@pytest.mark.parametrize("status", [204, 304])
def test_malformed_with_a_bodiless_status_sends_no_body(
    chaos: KeyedChaos, client: httpx.Client, status: int
) -> None:
    """A 204 or 304 may not carry a body: the reply stays valid HTTP and the connection
    stays usable for the next request."""
    response = client.get(chaos.url("/malformed", kind="html-error", status=status))
    after = client.get(chaos.url("/ok-error"))

    assert response.status_code == status
    assert response.content == b""
    assert after.status_code == 200
