"""A keyed write the app redirected with a 307 or 308: the same operation, sent again to
the redirect's target under the same key.

A 307 or 308 asks the client to send the same request (method and body) to another
URL, and clients send it with the same ``Idempotency-Key``: it is one operation. The
middleware keeps the 307 as the key's outcome (a repeat of the first request is
redirected again), so the request at the target, whose path differs, read as another
request reusing the key (422), and such a write never succeeded under its key.

Each hop is kept under a key of its own, made from the client's key and the hop's
target (:func:`hop_key`), which no client key can equal. A request whose fingerprint
differs from its key's record is taken for a hop only when the chain of kept redirects
from that record leads to its own target (:func:`redirect_target`): a different request
sent under the key anywhere else is still refused as the key reused.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import unquote, urlsplit

from retrysafe.idempotency.asgi import Scope
from retrysafe.idempotency.records import IdempotencyRecord

__all__ = ["MAX_HOPS", "hop_key", "redirect_target", "request_target"]

#: The redirects that keep the method and body (RFC 9110, sections 15.4.8 and 15.4.9).
_SAME_REQUEST_REDIRECTS: Final = frozenset({307, 308})
#: The longest chain of kept redirects followed (httpx follows 20 by default).
MAX_HOPS: Final = 20
#: Between a key and a hop's target: a control character, which a key never holds
#: (``read_key`` refuses it), so no client's key is a hop's.
_SEPARATOR: Final = "\x1f"


def request_target(scope: Scope) -> str:
    """The request's path and query, as a redirect's ``Location`` names them."""
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    path = str(scope["path"])
    return f"{path}?{query}" if query else path


def redirect_target(record: IdempotencyRecord) -> str | None:
    """Where ``record``'s kept 307 or 308 sends its request again: the path and query of
    its ``Location`` (an absolute path, or an absolute URL's), percent-decoded as a
    server's path is; None for any other record or ``Location`` (a relative path, which
    would need the first request's URL to resolve)."""
    response = record.response
    if record.state != "completed" or response is None:
        return None
    if response.status not in _SAME_REQUEST_REDIRECTS:
        return None
    location = next((value for name, value in response.headers if name == "location"), None)
    if location is None:
        return None
    parts = urlsplit(location.strip())
    if not parts.path.startswith("/"):
        return None
    path = unquote(parts.path)
    return f"{path}?{parts.query}" if parts.query else path


def hop_key(key: str, target: str) -> str:
    """The key the request sent to a redirect's ``target`` under ``key`` is kept under."""
    return f"{key}{_SEPARATOR}{target}"
