"""The response side of a keyed request: copy what the app sends, keep it before it's gone."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import anyio

from retrysafe.idempotency.asgi import Message, Send

__all__ = ["ResponseCapture"]


class ResponseCapture:
    """Wraps the server's ``send``: forwards the response and keeps a copy of it.

    When the app sends the last body chunk, ``on_complete`` runs (shielded from
    cancellation) *before* that chunk goes out, so the outcome is stored even when the
    client is gone by then; ``recorded`` says it ran. ``sent`` is set once the last chunk
    has been forwarded (or could not be). A body over ``max_size`` is not kept;
    ``oversized`` says so.

    If the server's ``send`` fails because the client left (ASGI servers raise
    ``OSError``), nothing more is forwarded, but the app runs on so the copy is
    completed for the client's retry. Once the copy cannot be kept (too large), or, for
    an event stream (``text/event-stream``, which ends only when its client leaves),
    ``runs_on_for`` seconds after the client left, the app's next ``send`` raises that
    ``OSError`` again, and the app stops as it would without the middleware. Any other
    response runs to its end, however long its body takes.
    """

    def __init__(
        self,
        send: Send,
        *,
        max_size: int,
        on_complete: Callable[[ResponseCapture], Awaitable[None]],
        runs_on_for: float = math.inf,
    ) -> None:
        self._send = send
        self._max_size = max_size
        self._on_complete = on_complete
        self._runs_on_for = runs_on_for
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.oversized = False
        self.client_gone = False
        #: What the server's ``send`` raised when the client left, and when (anyio's clock).
        self._gone: OSError | None = None
        self._gone_at = 0.0
        #: Whether the response is an event stream, which ends only when its client leaves.
        self._endless = False
        self.recorded = False
        self.sent = anyio.Event()

    async def send(self, message: Message) -> None:
        """The ``send`` handed to the app."""
        gone = self._gone
        if gone is not None and (
            self.oversized
            or (self._endless and anyio.current_time() - self._gone_at >= self._runs_on_for)
        ):
            raise gone  # nothing left to keep for a retry: stop the app
        kind = message["type"]
        last = False
        if kind == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(bytes(name), bytes(value)) for name, value in message["headers"]]
            self._endless = any(
                name.lower() == b"content-type"
                and value.split(b";", 1)[0].strip().lower() == b"text/event-stream"
                for name, value in self.headers
            )
        elif kind == "http.response.body":
            self._keep(bytes(message.get("body", b"")))
            last = not message.get("more_body", False)
            if last:
                with anyio.CancelScope(shield=True):
                    await self._on_complete(self)
                self.recorded = True
        try:
            await self._forward(message)
        finally:
            if last:
                self.sent.set()

    def _keep(self, chunk: bytes) -> None:
        if self.oversized:
            return
        if len(self.body) + len(chunk) > self._max_size:
            self.oversized = True
            self.body = bytearray()
            return
        self.body += chunk

    async def _forward(self, message: Message) -> None:
        if self.client_gone:
            return
        try:
            await self._send(message)
        except OSError as exc:
            self.client_gone = True
            self._gone, self._gone_at = exc, anyio.current_time()
