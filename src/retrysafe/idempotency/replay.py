"""Keeping a response for replay, and replaying it with ``Idempotent-Replayed: true``."""

from __future__ import annotations

from collections.abc import Iterable

from retrysafe.idempotency.asgi import Send
from retrysafe.idempotency.records import StoredResponse

__all__ = ["REPLAYED_HEADER", "send_replay", "stored_response"]

#: Marks a replayed response; clients treat it as the server's final, stored outcome.
REPLAYED_HEADER = "idempotent-replayed"

# Hop-by-hop headers belong to one connection; cookies may carry one session's secrets;
# length, date and server are the replaying server's to set.
_NEVER_KEPT = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "set-cookie",
        "set-cookie2",
        "content-length",
        "date",
        "server",
        REPLAYED_HEADER,
    }
)

#: Statuses that never carry a body, nor a Content-Length (RFC 9110).
_BODILESS = frozenset({204, 304})


def stored_response(
    status: int, headers: Iterable[tuple[bytes, bytes]], body: bytes
) -> StoredResponse:
    """The response as kept: every header except hop-by-hop ones (including any the
    ``Connection`` header names), cookies, length, date and server."""
    pairs = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in headers]
    dropped = set(_NEVER_KEPT)
    for name, value in pairs:
        if name == "connection":
            dropped.update(option.strip().lower() for option in value.split(","))
    kept = tuple((name, value) for name, value in pairs if name not in dropped)
    return StoredResponse(status, kept, body)


async def send_replay(send: Send, response: StoredResponse) -> None:
    """Send a kept response again, marked ``Idempotent-Replayed: true``."""
    headers = [
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in response.headers
    ]
    if response.status not in _BODILESS:
        headers.append((b"content-length", str(len(response.body)).encode()))
    headers.append((REPLAYED_HEADER.encode(), b"true"))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body, "more_body": False})
