"""A private redis-server that a test can kill and start again on the same port.

Built on ``tests/idempotency/store_servers.py`` (its free port, readiness check and stop),
which the fleet's conftest puts on ``sys.path``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable

from store_servers import ServerNotInstalled, _redis_answers, _stop, _wait_until, free_port

from retrysafe.fleet import RedisFleet

__all__ = ["FleetMaker", "RestartableRedis", "wait_for"]

#: The ``make_fleet`` fixture: ``make_fleet(url=None, **FleetSettings fields)``.
FleetMaker = Callable[..., RedisFleet]


class RestartableRedis:
    """``redis-server`` on one loopback port, no persistence: ``kill()`` loses every key,
    as a crashed Redis without persistence does; ``start()`` brings it back, empty."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServerNotInstalled("redis", "redis-server is not installed")
        self._binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._directory = tempfile.mkdtemp(prefix="retrysafe-fleet-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> RestartableRedis:
        command = [
            self._binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._directory,
            "--loglevel",
            "warning",
        ]
        log_path = os.path.join(self._directory, "redis.log")
        with open(log_path, "ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _wait_until(lambda: _redis_answers(self.port), self._process, log_path, "redis-server")
        return self

    def kill(self) -> None:
        """Stop it hard (SIGKILL): clients see their connections drop."""
        if self._process is not None:
            _stop(self._process, signal.SIGKILL)
            self._process = None

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self._directory, ignore_errors=True)

    def __enter__(self) -> RestartableRedis:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def wait_for(condition: Callable[[], object], seconds: float = 3.0) -> None:
    """Poll ``condition()`` until it is true; fail the test after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not true within {seconds} s"
        time.sleep(0.01)
