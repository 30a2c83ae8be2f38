"""Fixtures for the fleet's suite: a private redis-server, fleets that close themselves.

Redis is started like the idempotency suite starts it (``store_servers.py``, put on
``sys.path`` here). Where redis-server is not installed the tests needing it are
skipped, except under CI (the ``CI`` variable set), where that is a failure.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "idempotency"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "telemetry"))

from fleet_servers import FleetMaker
from store_servers import ServerNotInstalled, redis_server

from retrysafe.fleet import FleetSettings, RedisFleet


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A private redis-server for the session."""
    try:
        with redis_server() as url:
            yield url
    except ServerNotInstalled as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc}; under CI the fleet must be tested")
        pytest.skip(str(exc))


@pytest.fixture
def namespace() -> str:
    """A namespace of this test's own: fleets of different tests never meet."""
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_fleet(redis_url: str, namespace: str) -> Iterator[FleetMaker]:
    """Makes RedisFleets (each one a process of the fleet, as Redis sees it) on the test's
    namespace, and closes them all at the end.

    Their ``timeout`` is 0.1 s unless a test says otherwise: most tests are about what is
    shared, and a loaded test machine can hold any process up for more than the default
    5 ms; the tests of a slow or absent Redis set the timeout they are about."""
    made: list[RedisFleet] = []

    def make(url: str | None = None, **settings: Any) -> RedisFleet:
        settings.setdefault("timeout", 0.1)
        fleet = RedisFleet(
            url or redis_url, namespace=namespace, settings=FleetSettings(**settings)
        )
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.close()
