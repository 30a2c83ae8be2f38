"""An in-process chaos server: uvicorn and the raw TCP faults on a background thread.

Tests start one (the ``chaos_server`` fixture does), point real clients at real loopback
sockets, and read what the server saw straight from its memory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import threading
import time
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from retrysafe.chaos.app import DEFAULT_MAX_BODY_BYTES, create_app
from retrysafe.chaos.connection import listening_socket
from retrysafe.chaos.faults import FAULT_NAMES, FaultServers, closed_port
from retrysafe.chaos.protocol import ChaosH11Protocol
from retrysafe.chaos.state import ChaosRecord, ChaosState

__all__ = ["ChaosServer"]

_START_TIMEOUT = 10.0
_STOP_TIMEOUT = 5.0
# Whole seconds (uvicorn's type): how long a stop waits for requests that ignore it.
_GRACEFUL_SHUTDOWN = 1
#: The server loop's clock, taken when this module loads (see ``_serve``).
_monotonic = time.monotonic


@dataclasses.dataclass
class _Running:
    """One run of the server: its thread, uvicorn server, sockets and ports."""

    thread: threading.Thread
    server: uvicorn.Server
    port: int
    faults: FaultServers


class _ReportingServer(uvicorn.Server):
    """uvicorn's server, setting ``ready`` once it listens (uvicorn has no hook for it)."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self.ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


_THREAD_NAME = "retrysafe-chaos-server"


class _StopNoise(logging.Filter):
    """Drops what uvicorn logs, in a chaos server's own thread, about the handlers a stop
    cancels: the graceful-shutdown timeout and each cancelled handler's traceback.
    ``stop()`` promises to end hanging requests; that is no error of the app served."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.threadName != _THREAD_NAME:
            return True  # (another uvicorn server in this process: its records stand)
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            return False
        return "timeout graceful shutdown exceeded" not in record.getMessage()


_stop_noise = _StopNoise()


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ChaosServer:
    """The chaos app and the raw TCP faults, served from a background thread.

    ``start()`` returns once every port is listening; ``stop()`` ends the thread within
    about a second even with hanging requests open. Both are safe to call twice, and a
    stopped server can be started again (on a new port, with its state kept). The state
    (log, ledgers) is read directly, without HTTP.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        state: ChaosState | None = None,
        app: ASGIApp | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.state = ChaosState() if state is None else state
        #: What is served: the chaos app, or ``app`` to serve one of your own with the
        #: same socket access (``scope["extensions"]["retrysafe.chaos.transport"]``),
        #: e.g. to lose a reply after your handler has done its work.
        #: ``max_body_bytes`` limits request bodies of the chaos app (not of ``app``).
        self.app: ASGIApp = (
            create_app(self.state, max_body_bytes=max_body_bytes) if app is None else app
        )
        self._lifecycle = threading.Lock()
        self._running: _Running | None = None

    # Lifecycle

    def start(self) -> ChaosServer:
        """Start serving (no-op when already running); returns once listening."""
        with self._lifecycle:
            if self._running is not None:
                return self
            http_socket = listening_socket(self.host, self.requested_port)
            faults = FaultServers(self.host)
            try:
                faults.bind()
            except BaseException:
                http_socket.close()
                faults.close_unserved()
                raise
            config = uvicorn.Config(
                self.app,
                http=ChaosH11Protocol,
                ws="none",
                lifespan="off",
                interface="asgi3",
                log_config=None,
                log_level="warning",
                access_log=False,
                proxy_headers=False,
                server_header=False,
                timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN,
            )
            uvicorn_log = logging.getLogger("uvicorn.error")
            if _stop_noise not in uvicorn_log.filters:
                uvicorn_log.addFilter(_stop_noise)
            ready = threading.Event()
            server = _ReportingServer(config, ready)
            errors: list[BaseException] = []
            thread = threading.Thread(
                target=self._run,
                args=(server, http_socket, faults, ready, errors),
                name=_THREAD_NAME,
                daemon=True,
            )
            thread.start()
            if not ready.wait(_START_TIMEOUT):
                server.should_exit = True
                thread.join(_STOP_TIMEOUT)
                raise RuntimeError(f"the chaos server did not start within {_START_TIMEOUT} s")
            if errors:
                thread.join(_STOP_TIMEOUT)
                raise RuntimeError("the chaos server failed to start") from errors[0]
            self._running = _Running(
                thread=thread, server=server, port=http_socket.getsockname()[1], faults=faults
            )
        return self

    def stop(self) -> None:
        """Stop serving and close every connection (no-op when not running)."""
        with self._lifecycle:
            running, self._running = self._running, None
        if running is None:
            return
        running.server.should_exit = True
        running.thread.join(_STOP_TIMEOUT)
        if running.thread.is_alive():
            running.server.force_exit = True
            running.thread.join(_STOP_TIMEOUT)

    def __enter__(self) -> ChaosServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(
        self,
        server: uvicorn.Server,
        http_socket: socket.socket,
        faults: FaultServers,
        ready: threading.Event,
        errors: list[BaseException],
    ) -> None:
        """The server thread: serve until told to exit, reporting a failure to start."""
        try:
            asyncio.run(self._serve(server, http_socket, faults))
        except BaseException as exc:  # reported to start(); a thread has nowhere to raise
            errors.append(exc)
        finally:
            faults.close_unserved()
            http_socket.close()
            ready.set()

    @staticmethod
    async def _serve(
        server: uvicorn.Server, http_socket: socket.socket, faults: FaultServers
    ) -> None:
        # The loop keeps its own clock. The stock loop reads ``time.monotonic`` afresh on
        # every turn, so a test patching it while the server runs (as freezegun does)
        # would set the server's timers by the fake clock; after the patch its idle
        # tick would lie an hour away, and a stop would wait for it.
        asyncio.get_running_loop().time = _monotonic  # type: ignore[method-assign]
        await faults.serve()
        try:
            await server.serve(sockets=[http_socket])
        finally:
            await faults.close()

    # Addresses

    @property
    def running(self) -> bool:
        """Whether the server is serving now."""
        return self._running is not None

    def _current(self) -> _Running:
        running = self._running
        if running is None:
            raise RuntimeError("the chaos server is not running; call start() first")
        return running

    @property
    def port(self) -> int:
        """The HTTP port (chosen at start when ``port=0``)."""
        return self._current().port

    @property
    def url(self) -> str:
        """The base URL of the chaos app, like ``http://127.0.0.1:54321``."""
        return _url(self.host, self.port)

    def fault_url(self, name: str) -> str:
        """The URL of a raw TCP fault (see :data:`~retrysafe.chaos.faults.FAULT_NAMES`)."""
        if name == "refused":
            return self.closed_port_url()
        running = self._current()
        if name not in running.faults.ports:
            raise ValueError(f"unknown fault {name!r}; known faults: {', '.join(FAULT_NAMES)}")
        return _url(self.host, running.faults.ports[name]) + "/"

    def closed_port_url(self) -> str:
        """A URL on a loopback port nothing listens on: connecting is refused."""
        return _url(self.host, closed_port(self.host)) + "/"

    # State

    def reset(self) -> None:
        """Forget all state: attempts, log, buckets, ledgers, stored replies."""
        self.state.reset()

    def log(self, key: str | None = None) -> list[ChaosRecord]:
        """The request log in recording order, only ``key``'s records when a key is given."""
        return self.state.log(key)

    def ledger(self, resource: str, key: str = "") -> dict[str, int]:
        """Side effects applied on ``/idempotent/{resource}`` for ``key``, per Idempotency-Key.

        Writes sent without an Idempotency-Key are counted under ``""``.
        """
        return self.state.ledger(resource, key)

    def for_key(self, key: str) -> KeyedChaos:
        """A view of this server for one state key, as the ``chaos`` fixture gives a test."""
        return KeyedChaos(self, key)


# At the end: keyed.py imports this module at its own end (see there).
from retrysafe.chaos.keyed import KeyedChaos  # noqa: E402
