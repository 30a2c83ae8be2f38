"""The request side of a keyed request: read the body whole, then hand it to the app."""

from __future__ import annotations

import dataclasses
from typing import Literal

import anyio

from retrysafe.idempotency.asgi import Message, Receive

__all__ = ["BodyRefused", "read_body", "replaying_receive"]


@dataclasses.dataclass(frozen=True)
class BodyRefused:
    """The body was not read: it is over the limit, or the client left while sending it."""

    reason: Literal["too_large", "disconnected"]


async def read_body(
    receive: Receive, *, limit: int, content_length: str | None
) -> bytes | BodyRefused:
    """The whole request body, at most ``limit`` bytes.

    A declared ``Content-Length`` over the limit is refused before reading anything.
    """
    declared = (content_length or "").strip()
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        return BodyRefused("too_large")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return BodyRefused("disconnected")
        if message["type"] != "http.request":
            continue
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            return BodyRefused("too_large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying_receive(body: bytes, response_sent: anyio.Event) -> Receive:
    """A ``receive`` for the app that yields the already-read ``body``.

    After that it reports a disconnect only once ``response_sent`` is set, after the last
    body chunk went out: an app that stops on a disconnect (Starlette's streaming
    responses do) must not cut that chunk off. The app is never told the client left
    mid-way: a claimed request runs to the end so its outcome can be kept, and the
    client's retry gets it replayed.
    """
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await response_sent.wait()
        return {"type": "http.disconnect"}

    return receive
