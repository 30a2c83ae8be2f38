"""/redirect-chain/{key}: slow hops, per-hop failures, every request logged per hop."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import httpx
import pytest

from retrysafe.chaos import KeyedChaos


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5, follow_redirects=True) as client:
        yield client


def test_a_chain_redirects_hop_by_hop_then_answers_200(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """``hops=3`` is three 302s, each to the next hop, then a 200: four requests."""
    response = client.get(chaos.url("/redirect-chain/{key}", hops=3))

    assert response.status_code == 200
    assert response.json()["hop"] == 3
    assert [r.status_code for r in response.history] == [302, 302, 302]
    records = chaos.log()
    assert [r.endpoint for r in records] == [f"redirect-chain/{hop}" for hop in range(4)]
    assert [r.action for r in records] == ["status:302"] * 3 + ["status:200"]
    assert [r.detail for r in records] == [f"hop {hop} of 3" for hop in range(4)]


def test_the_location_is_relative_and_keeps_the_other_parameters(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """A hop points at the same path and query with only ``hop`` advanced."""
    response = client.get(chaos.url("/redirect-chain/{key}", hops=2, hop=1), follow_redirects=False)

    location = response.headers["location"]
    assert response.status_code == 302
    assert location.startswith(f"/redirect-chain/{chaos.key}?")
    assert "hops=2" in location
    assert location.endswith("hop=2")


def test_each_hop_waits_delay_ms(chaos: KeyedChaos, client: httpx.Client) -> None:
    """Three requests of 100 ms each take at least 0.3 s in all."""
    started = time.monotonic()
    response = client.get(chaos.url("/redirect-chain/{key}", hops=2, delay_ms=100))
    took = time.monotonic() - started

    assert response.status_code == 200
    assert 0.3 <= took < 1.5
    arrivals = [record.time for record in chaos.log()]
    assert all(later - earlier >= 0.09 for earlier, later in itertools.pairwise(arrivals))


def test_every_hop_fails_its_first_requests_when_asked(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """``fail_times=1``: each hop answers ``fail_status`` once, counted per hop."""
    url = chaos.url("/redirect-chain/{key}", hops=1, fail_times=1, fail_status=502)

    first = client.get(url)
    second = client.get(url)
    third = client.get(url)

    assert (first.status_code, first.json()["hop"]) == (502, 0)
    assert (second.status_code, second.json()["hop"]) == (502, 1)
    assert (third.status_code, third.json()["hop"]) == (200, 1)
    assert [(r.endpoint, r.action) for r in chaos.log()] == [
        ("redirect-chain/0", "status:502"),
        ("redirect-chain/0", "status:302"),
        ("redirect-chain/1", "status:502"),
        ("redirect-chain/0", "status:302"),
        ("redirect-chain/1", "status:200"),
    ]


def test_the_redirect_status_can_be_chosen(chaos: KeyedChaos, client: httpx.Client) -> None:
    """``redirect=307`` keeps a POST a POST, with its body, along the chain."""
    response = client.post(chaos.url("/redirect-chain/{key}", hops=1, redirect=307), json={"a": 1})

    assert response.status_code == 200
    assert [(r.method, r.action) for r in chaos.log()] == [
        ("POST", "status:307"),
        ("POST", "status:200"),
    ]
    assert len({record.body_sha256 for record in chaos.log()}) == 1


@pytest.mark.parametrize(
    ("params", "parameter"),
    [({"hops": -1}, "hops"), ({"hops": 1, "hop": 2}, "hop"), ({"redirect": 200}, "redirect")],
)
def test_bad_parameters_are_refused(
    chaos: KeyedChaos, client: httpx.Client, params: dict[str, int], parameter: str
) -> None:
    """A chain that cannot be is a 400 naming the parameter, and is not logged."""
    response = client.get(chaos.url("/redirect-chain/{key}", **params))

    assert response.status_code == 400
    assert response.json()["parameter"] == parameter
    assert chaos.log() == []


@pytest.mark.parametrize("odd", ["pct%41", "q?x", "h#1 sp"])
def test_every_hop_stays_on_a_key_with_characters_urls_quote(
    chaos: KeyedChaos, client: httpx.Client, odd: str
) -> None:
    """The next hop's Location keeps the key quoted: ``%41`` must not become ``A``."""
    keyed = chaos.server.for_key(f"{chaos.key}-{odd}")
    response = client.get(keyed.url("/redirect-chain/{key}", hops=2))
    assert response.status_code == 200
    assert [r.endpoint for r in keyed.log()] == [f"redirect-chain/{hop}" for hop in range(3)]


def test_a_chain_defaults_to_three_302_hops(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/redirect-chain/{key}"))

    assert response.json()["hop"] == 3
    assert [r.status_code for r in response.history] == [302, 302, 302]


@pytest.mark.parametrize("redirect", [300, 304, 305, 306])
def test_only_the_five_redirect_statuses_can_be_chosen(
    chaos: KeyedChaos, client: httpx.Client, redirect: int
) -> None:
    """``redirect`` is one of 301, 302, 303, 307 and 308; any other 3xx is a 400 that lists them."""
    response = client.get(chaos.url("/redirect-chain/{key}", redirect=redirect))

    assert response.status_code == 400
    assert response.json()["parameter"] == "redirect"
    assert "301, 302, 303, 307, 308" in response.json()["error"]
    assert chaos.log() == []
