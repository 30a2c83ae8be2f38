"""/tail/{key} read directly: who is slow, how slow, and what the log says.

Whether a request is slow depends only on (``seed``, key, request number), so each test
picks its seed with the same ``draw`` the server uses. Wall-clock assertions are loose
bounds around waits far apart (tens of ms against a second).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from retrysafe.chaos import KeyedChaos
from retrysafe.chaos.chance import draw


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def _seed(key: str, attempt: int, wanted: Callable[[float], bool]) -> str:
    """A seed whose draw for the key's request ``attempt`` satisfies ``wanted``."""
    return next(f"s{n}" for n in range(100_000) if wanted(draw(f"s{n}", key, attempt)))


def test_each_request_is_answered_with_its_number_and_how_it_went(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """Request 1 slow, request 2 fast under one seed: the draw is per request number."""
    seed = next(
        f"s{n}"
        for n in range(100_000)
        if draw(f"s{n}", chaos.key, 1) < 0.5 <= draw(f"s{n}", chaos.key, 2)
    )
    url = chaos.url("/tail/{key}", slow_fraction=0.5, slow_ms=30, fast_ms=0, seed=seed)

    replies = [client.get(url) for _ in range(2)]

    assert [reply.json() for reply in replies] == [
        {"status": 200, "attempt": 1, "key": chaos.key, "slow": True},
        {"status": 200, "attempt": 2, "key": chaos.key, "slow": False},
    ]
    assert [(r.action, r.detail) for r in chaos.log()] == [
        ("status:200", "slow"),
        ("status:200", "fast"),
    ]


def test_the_seed_decides_who_is_slow(chaos: KeyedChaos, client: httpx.Client) -> None:
    slow_seed = _seed(chaos.key, 1, lambda point: point < 0.5)
    other = chaos.server.for_key(chaos.key + "-b")
    fast_seed = _seed(other.key, 1, lambda point: point >= 0.5)

    slow = client.get(chaos.url("/tail/{key}", slow_fraction=0.5, slow_ms=0, seed=slow_seed))
    fast = client.get(other.url("/tail/{key}", slow_fraction=0.5, slow_ms=0, seed=fast_seed))

    assert (slow.json()["slow"], fast.json()["slow"]) == (True, False)


def test_by_default_two_percent_of_requests_are_slow(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """``slow_fraction`` defaults to 0.02: a draw under it is slow, one just over it fast."""
    under = _seed(chaos.key, 1, lambda point: point < 0.02)
    over = _seed(chaos.key, 2, lambda point: 0.02 <= point < 0.3)

    slow = client.get(chaos.url("/tail/{key}", slow_ms=0, seed=under))
    fast = client.get(chaos.url("/tail/{key}", slow_ms=0, seed=over))

    assert (slow.json()["slow"], fast.json()["slow"]) == (True, False)


def test_a_slow_request_takes_a_second_by_default(chaos: KeyedChaos, client: httpx.Client) -> None:
    with pytest.raises(httpx.ReadTimeout):
        client.get(chaos.url("/tail/{key}", slow_fraction=1), timeout=0.5)


def test_a_fast_request_answers_at_once_by_default(chaos: KeyedChaos, client: httpx.Client) -> None:
    started = time.monotonic()
    response = client.get(chaos.url("/tail/{key}", slow_fraction=0))

    assert time.monotonic() - started < 0.4
    assert response.json()["slow"] is False


def test_a_client_that_leaves_is_logged_disconnected_after_the_ms_it_waited(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    with pytest.raises(httpx.ReadTimeout):
        client.get(chaos.url("/tail/{key}", slow_fraction=1, slow_ms=5000), timeout=0.3)

    ends = time.monotonic() + 5
    while not chaos.log() and time.monotonic() < ends:
        time.sleep(0.02)
    [record] = chaos.log()
    assert record.action == "disconnected"
    match = re.fullmatch(r"slow after (\d+) ms", record.detail)
    assert match, record.detail
    assert 250 <= int(match.group(1)) < 5000
