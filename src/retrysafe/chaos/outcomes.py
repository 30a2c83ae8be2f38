"""Replies that go wrong on the wire: resets, closes, hangs, truncated and trickled bodies.

Each is a Starlette :class:`~starlette.responses.Response` whose ``__call__`` does the
damage, so an endpoint decides *what* happens and returns it like any other reply. All of
them give up as soon as the server starts stopping, so a hanging client never holds a
shutdown up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from retrysafe.chaos.connection import close_quietly, reset
from retrysafe.chaos.protocol import stopping_event, transport_of

__all__ = [
    "DripResponse",
    "NoReply",
    "PauseOutcome",
    "SocketFault",
    "SocketFaultKind",
    "TruncatedResponse",
    "end_for_shutdown",
    "pause",
    "supports_socket_faults",
    "wait_for_disconnect",
]

PauseOutcome = Literal["elapsed", "stopping", "disconnected"]
SocketFaultKind = Literal["reset", "close", "hang"]


async def wait_for_disconnect(receive: Receive) -> None:
    """Wait until the client has gone (the request body must already have been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _first_of(waiters: Mapping[PauseOutcome, Callable[[], Awaitable[None]]]) -> PauseOutcome:
    """Run the waiters concurrently; return the name of the first to finish, cancel the rest."""
    finished: list[PauseOutcome] = []
    async with anyio.create_task_group() as group:

        async def run(name: PauseOutcome, waiter: Callable[[], Awaitable[None]]) -> None:
            await waiter()
            finished.append(name)
            group.cancel_scope.cancel()

        for name, waiter in waiters.items():
            group.start_soon(run, name, waiter)
    return finished[0]


async def pause(
    scope: Scope, receive: Receive, seconds: float | None, *, end_if_client_leaves: bool = True
) -> PauseOutcome:
    """Wait ``seconds`` (forever for ``None``) unless the server stops or the client leaves.

    With ``end_if_client_leaves=False`` the wait goes on after the client has gone, as
    the work of a real server does.
    """
    waiters: dict[PauseOutcome, Callable[[], Awaitable[None]]] = {}
    if end_if_client_leaves:
        waiters["disconnected"] = lambda: wait_for_disconnect(receive)
    if seconds is not None:
        waiters["elapsed"] = lambda: anyio.sleep(seconds)
    stopping = stopping_event(scope)
    if stopping is not None:

        async def wait_for_stop() -> None:
            await stopping.wait()

        waiters["stopping"] = wait_for_stop
    if not waiters:
        await anyio.sleep_forever()
    return await _first_of(waiters)


async def end_for_shutdown(scope: Scope, receive: Receive) -> None:
    """Close the connection because the server is stopping, and wait for it to go."""
    transport = transport_of(scope)
    if transport is not None:
        close_quietly(transport)
        await wait_for_disconnect(receive)


def supports_socket_faults(scope: Scope) -> bool:
    """Whether this request's server lets the app reset or close its connection."""
    return transport_of(scope) is not None


class NoReply(Response):
    """Sends nothing: the connection has already been ended (for example by a shutdown)."""

    def __init__(self) -> None:
        super().__init__(status_code=500)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


class SocketFault(Response):
    """No reply at all: a TCP reset, a clean close, or silence until the client leaves.

    ``reset`` and ``close`` need :class:`~retrysafe.chaos.protocol.ChaosH11Protocol`;
    check :func:`supports_socket_faults` before choosing them.
    """

    def __init__(self, kind: SocketFaultKind) -> None:
        super().__init__(status_code=500)
        self.kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.kind == "hang":
            if await pause(scope, receive, None) == "stopping":
                await end_for_shutdown(scope, receive)
            return
        transport = transport_of(scope)
        if transport is None:
            raise RuntimeError(f"{self.kind!r} needs a server using ChaosH11Protocol")
        if self.kind == "reset":
            reset(transport)
        else:
            close_quietly(transport)
        await wait_for_disconnect(receive)


class TruncatedResponse(Response):
    """Headers promising ``promised`` body bytes, only ``sent`` of them, then a close."""

    def __init__(self, *, promised: int, sent: int, headers: Mapping[str, str]) -> None:
        super().__init__(
            status_code=200,
            headers={**headers, "content-length": str(promised)},
            media_type="application/octet-stream",
        )
        self.sent = sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": b"x" * self.sent, "more_body": True})
        transport = transport_of(scope)
        if transport is not None:
            close_quietly(transport)
            await wait_for_disconnect(receive)
        # Elsewhere, returning with the body incomplete makes the server close the connection.


class DripResponse(Response):
    """Headers (``status``) at once, then ``chunks`` chunks of ``chunk_bytes`` each after
    ``interval``: a slow body, of a success or of an error answer."""

    def __init__(
        self,
        *,
        chunks: int,
        chunk_bytes: int,
        interval: float,
        headers: Mapping[str, str],
        status: int = 200,
        media_type: str = "text/plain",
    ) -> None:
        super().__init__(
            status_code=status,
            headers={**headers, "content-length": str(chunks * chunk_bytes)},
            media_type=media_type,
        )
        self.chunks = chunks
        self.chunk_bytes = chunk_bytes
        self.interval = interval

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        if self.chunks == 0:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        for index in range(self.chunks):
            outcome = await pause(scope, receive, self.interval)
            if outcome == "stopping":
                await end_for_shutdown(scope, receive)
                return
            if outcome == "disconnected":
                return
            chunk = (b"%d" % (index % 10)) * self.chunk_bytes
            more = index < self.chunks - 1
            await send({"type": "http.response.body", "body": chunk, "more_body": more})
