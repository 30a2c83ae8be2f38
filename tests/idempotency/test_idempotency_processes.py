"""Two OS processes, each serving the app with uvicorn on its own port, share one store:
duplicates sent to both still run once. Real sockets, real servers, every shared store."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from idempotency_app import headers
from idempotency_stores import SHARED_STORE_KINDS, new_namespace

pytestmark = pytest.mark.anyio

HERE = Path(__file__).parent
#: Long enough that every duplicate arrives while the first still runs.
HANDLER_DELAY = 0.3


@dataclasses.dataclass(frozen=True)
class ShopServers:
    """The two serving processes' base URLs, and the log every run appends to."""

    urls: tuple[str, str]
    runs_log: Path

    def runs(self, key: str) -> int:
        """How many times, across both processes, ``/orders`` ran for ``key``."""
        return self.runs_log.read_text().splitlines().count(f"/orders {key}")


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(
            "memory",
            marks=pytest.mark.skip(
                reason="MemoryStore lives inside one process; two processes cannot share it"
            ),
        ),
        *SHARED_STORE_KINDS,
    ],
)
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ShopServers]:
    """Two uvicorn processes serving the shop app against one store of each kind."""
    kind = str(request.param)
    directory = tmp_path_factory.mktemp(f"shop-{kind}")
    if kind == "sqlite":
        location = str(directory / "idempotency.sqlite3")
    else:
        location = str(request.getfixturevalue("redis_url" if kind == "redis" else "postgres_dsn"))
    runs_log = directory / "runs.log"
    runs_log.touch()
    command = [
        sys.executable,
        str(HERE / "serve_shop.py"),
        kind,
        location,
        new_namespace(),
        str(runs_log),
        str(HANDLER_DELAY),
    ]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, cwd=HERE) for _ in range(2)]
    try:
        ports = []
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.strip().isdigit():
                pytest.fail(f"serve_shop.py did not start (exit {process.poll()})")
            ports.append(int(line))
        yield ShopServers(
            (f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"), runs_log
        )
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def test_fifty_duplicates_across_two_processes_run_once_without_5xx(
    servers: ShopServers,
) -> None:
    key = f"dup-{uuid.uuid4().hex}"
    async with httpx.AsyncClient(timeout=10) as client:
        responses = await asyncio.gather(
            *(
                client.post(f"{servers.urls[n % 2]}/orders", json={"n": 1}, headers=headers(key))
                for n in range(50)
            )
        )
        replays = [
            await client.post(f"{url}/orders", json={"n": 1}, headers=headers(key))
            for url in servers.urls
        ]

    statuses = sorted(r.status_code for r in responses)
    fresh = [
        r for r in responses if r.status_code == 201 and "idempotent-replayed" not in r.headers
    ]
    assert servers.runs(key) == 1
    assert all(status < 500 for status in statuses), Counter(statuses)
    assert set(statuses) <= {201, 409}
    assert len(fresh) == 1
    for replay in replays:
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.content == fresh[0].content


async def test_a_client_that_hangs_up_on_a_real_server_still_gets_the_outcome_kept(
    servers: ShopServers,
) -> None:
    key = f"hangup-{uuid.uuid4().hex}"
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(
                f"{servers.urls[0]}/orders",
                json={},
                headers=headers(key),
                timeout=httpx.Timeout(5.0, read=0.05),
            )
        retry = await client.post(f"{servers.urls[1]}/orders", json={}, headers=headers(key))
        while retry.status_code == 409:  # still running: wait as told, then ask again
            await anyio.sleep(float(retry.headers["retry-after"]) / 10)
            retry = await client.post(f"{servers.urls[1]}/orders", json={}, headers=headers(key))

    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert servers.runs(key) == 1
