"""pytest fixtures for testing retry behaviour against a real chaos server.

Registered automatically (entry point ``pytest11``). Importing this module is cheap: the
chaos server (starlette, uvicorn) is imported and started only when a test asks for
``chaos`` or ``chaos_server``.

- ``chaos_server``: one started :class:`~retrysafe.chaos.ChaosServer` for the session.
- ``chaos``: a :class:`~retrysafe.chaos.KeyedChaos` with a key unique to the test, so
  tests share the server without sharing attempts, ledgers or log records::

      def test_retries_a_503(chaos):
          response = client.get(chaos.url("/fail/{key}", times=2))
          assert [record.action for record in chaos.log()] == [
              "status:503", "status:503", "status:200"
          ]
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from retrysafe.chaos import ChaosServer, KeyedChaos

__all__ = ["chaos", "chaos_server", "retrysafe_testing", "unique_key"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def unique_key(test_name: str) -> str:
    """A URL-safe state key naming the test, with a random suffix so reruns never collide."""
    readable = _UNSAFE.sub("-", test_name).strip("-")[:48] or "test"
    return f"{readable}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def chaos_server() -> Iterator[ChaosServer]:
    """A chaos server on a free loopback port, started once and stopped after the session."""
    from retrysafe.chaos import ChaosServer

    with ChaosServer() as server:
        yield server


@pytest.fixture
def chaos(chaos_server: ChaosServer, request: pytest.FixtureRequest) -> KeyedChaos:
    """The session's chaos server, scoped to a key unique to this test."""
    return chaos_server.for_key(unique_key(request.node.name))


@pytest.fixture
def retrysafe_testing() -> Iterator[None]:
    """Testing mode for one test: no waits, one attempt a call, no load protection.

    Inside the test, ``retrysafe.testing.set_testing(True, attempts=3)`` lets calls
    retry (still without waiting); whatever was in force before comes back after.
    """
    from retrysafe.testing.mode import in_testing_mode

    with in_testing_mode():
        yield
