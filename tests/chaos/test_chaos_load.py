"""Load- and time-driven endpoints: /rate-limit, /outage, /capacity."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import httpx
import pytest

from retrysafe.chaos import KeyedChaos
from retrysafe.chaos.limiter import TokenBucket


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def test_rate_limit_allows_a_burst_then_refuses(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/rate-limit/search", rps=0.25, burst=3)

    statuses = [client.get(url).status_code for _ in range(4)]

    assert statuses == [200, 200, 200, 429]


@pytest.mark.parametrize(
    ("rps", "retry_after"),
    # the next token 4 s away; 2.5 s away, rounded up (never 2)
    [(0.25, "4"), (0.4, "3")],
)
def test_rate_limit_retry_after_is_the_rounded_up_wait_for_a_token(
    chaos: KeyedChaos, client: httpx.Client, rps: float, retry_after: str
) -> None:
    url = chaos.url("/rate-limit/search", rps=rps, burst=1)
    client.get(url)

    refused = client.get(url)

    assert refused.status_code == 429
    assert refused.headers["retry-after"] == retry_after


def test_rate_limit_refills_at_the_rate(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/rate-limit/search", rps=10, burst=1)
    client.get(url)
    refused = client.get(url)
    time.sleep(0.15)

    assert refused.headers["retry-after"] == "1"
    assert client.get(url).status_code == 200


def test_rate_limit_buckets_are_separate(chaos: KeyedChaos, client: httpx.Client) -> None:
    client.get(chaos.url("/rate-limit/a", rps=0.1))

    assert client.get(chaos.url("/rate-limit/b", rps=0.1)).status_code == 200
    assert client.get(chaos.url("/rate-limit/a", rps=0.1)).status_code == 429


def test_token_bucket_arithmetic() -> None:
    bucket = TokenBucket(rate=2.0, burst=2, now=100.0)

    assert bucket.try_take(100.0)
    assert bucket.try_take(100.0)
    assert not bucket.try_take(100.0)
    assert bucket.seconds_until_token(100.0) == pytest.approx(0.5)
    assert bucket.retry_after(100.0) == 1
    assert bucket.try_take(100.5)
    assert bucket.seconds_until_token(110.0) == 0.0
    assert bucket.tokens == 2.0


def test_outage_is_503_for_the_window_then_200(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/outage/{key}", down_ms=300, retry_after=1)

    first = client.get(url)
    during = client.get(url)
    time.sleep(0.35)
    after = client.get(url)

    assert (first.status_code, first.headers["retry-after"]) == (503, "1")
    assert during.status_code == 503
    assert after.status_code == 200


def test_outage_lasts_one_second_by_default(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/outage/{key}")

    first = client.get(url)
    time.sleep(0.6)  # (well past half a second, well short of one)
    still_down = client.get(url)

    assert (first.status_code, still_down.status_code) == (503, 503)


@pytest.mark.anyio
async def test_capacity_sheds_requests_beyond_the_concurrency(chaos: KeyedChaos) -> None:
    url = chaos.url("/capacity/db", concurrency=2, service_ms=400)
    statuses: list[int] = []

    async def call(client: httpx.AsyncClient) -> None:
        statuses.append((await client.get(url)).status_code)

    async with httpx.AsyncClient(timeout=5) as client, anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(call, client)

    assert sorted(statuses) == [200, 200, 503, 503, 503]
    assert sorted(r.detail for r in chaos.log()) == ["served"] * 2 + ["shed"] * 3


def test_capacity_frees_slots_when_work_ends(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/capacity/db", concurrency=1, service_ms=10)

    assert [client.get(url).status_code for _ in range(3)] == [200, 200, 200]


def test_capacity_work_continues_after_the_client_gives_up(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = chaos.url("/capacity/db", concurrency=1, service_ms=500)
    with pytest.raises(httpx.ReadTimeout):
        client.get(url, timeout=0.1)

    assert client.get(url).status_code == 503


def test_token_bucket_retry_after_is_the_wait_rounded_up_to_a_whole_second() -> None:
    bucket = TokenBucket(rate=0.4, burst=1, now=0.0)
    assert bucket.try_take(0.0)

    assert bucket.retry_after(0.0) == 3
    assert bucket.retry_after(1.4) == 2
    assert bucket.retry_after(1.9) == 1


def test_token_bucket_refills_each_moment_only_once() -> None:
    """Looking at an empty bucket often does not make it fill any faster."""
    bucket = TokenBucket(rate=1.0, burst=1, now=0.0)
    assert bucket.try_take(0.0)

    assert not bucket.try_take(0.5)
    assert not bucket.try_take(0.9)
    assert bucket.seconds_until_token(0.9) == pytest.approx(0.1)
    assert bucket.try_take(1.0)
