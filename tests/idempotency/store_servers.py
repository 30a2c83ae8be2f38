"""Throwaway Redis and PostgreSQL servers on loopback, for retrysafe's tests and benchmarks.

Test support, not part of the package: the idempotency tests import it as
``store_servers`` (pytest puts this directory on ``sys.path``), and
benchmarks/middleware_latency.py after adding this directory to ``sys.path``. Each context
manager starts a private server on a free 127.0.0.1 port, with its data in a fresh
temporary directory, yields its URL, and stops and deletes it afterwards. PostgreSQL
refuses to run as root, so as root it runs as the ``postgres`` account (or ``nobody``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ServerNotInstalled", "free_port", "postgres_server", "redis_server"]

_START_TIMEOUT = 30.0


class ServerNotInstalled(Exception):
    """The server's programs are not on this machine.

    Attributes:
        server: ``"redis"`` or ``"postgres"``.
    """

    def __init__(self, server: str, detail: str) -> None:
        super().__init__(f"{detail} (scripts/servers.sh installs it)")
        self.server = server


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """Run a private ``redis-server`` (no persistence); yields ``redis://127.0.0.1:PORT/0``."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerNotInstalled("redis", "redis-server is not installed")
    directory = tempfile.mkdtemp(prefix="retrysafe-redis-")
    port = free_port()
    command = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        directory,
        "--loglevel",
        "warning",
    ]
    log_path = os.path.join(directory, "redis.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_until(lambda: _redis_answers(port), process, log_path, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        _stop(process, signal.SIGTERM)
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Run a private PostgreSQL cluster (trust auth, fsync off); yields its DSN."""
    bindir = _postgres_bindir()
    directory = tempfile.mkdtemp(prefix="retrysafe-postgres-")
    run_as = _unprivileged_account()
    if run_as is not None:
        os.chown(directory, run_as.pw_uid, run_as.pw_gid)
    as_user: dict[str, Any] = {}
    if run_as is not None:
        as_user = {"user": run_as.pw_uid, "group": run_as.pw_gid, "extra_groups": []}
    environment = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    data = os.path.join(directory, "data")
    log_path = os.path.join(directory, "postgres.log")
    process: subprocess.Popen[bytes] | None = None
    try:
        initdb = subprocess.run(
            [
                os.path.join(bindir, "initdb"),
                "--pgdata",
                data,
                "--auth",
                "trust",
                "--username",
                "postgres",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            ],
            capture_output=True,
            env=environment,
            cwd=directory,
            check=False,
            **as_user,
        )
        if initdb.returncode != 0:
            output = (initdb.stdout + initdb.stderr).decode(errors="replace")
            raise RuntimeError(f"initdb failed ({initdb.returncode}):\n{output}")
        port = free_port()
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [
                    os.path.join(bindir, "postgres"),
                    "-D",
                    data,
                    "-p",
                    str(port),
                    "-k",
                    directory,
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=200",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                cwd=directory,
                **as_user,
            )
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        _wait_until(lambda: _postgres_answers(dsn), process, log_path, "postgres")
        yield dsn
    finally:
        if process is not None:
            _stop(process, signal.SIGINT)  # "fast" shutdown
        shutil.rmtree(directory, ignore_errors=True)


def _postgres_bindir() -> str:
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: int(path.split("/")[-3]) if path.split("/")[-3].isdigit() else 0,
    )
    on_path = shutil.which("initdb")
    if candidates:
        return os.path.dirname(candidates[-1])
    if on_path is not None:
        return os.path.dirname(on_path)
    raise ServerNotInstalled("postgres", "PostgreSQL (initdb, postgres) is not installed")


def _unprivileged_account() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, and neither a 'postgres' nor a 'nobody' account exists")


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _postgres_answers(dsn: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def _wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], log_path: str, name: str
) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            with open(log_path, errors="replace") as log:
                output = log.read()[-4000:]
            raise RuntimeError(f"{name} did not start (exit {process.poll()}):\n{output}")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes], first_signal: signal.Signals) -> None:
    if process.poll() is None:
        process.send_signal(first_signal)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
