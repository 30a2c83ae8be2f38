"""The fingerprint of a request: what must match for a repeat to count as the same request."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import parse_qsl

__all__ = ["canonical_body", "canonical_query", "request_fingerprint"]


def request_fingerprint(
    method: str, path: str, query: bytes, body: bytes, content_type: str | None
) -> str:
    """A SHA-256 over the method, path, query and body, in canonical forms.

    Two requests that differ only in JSON formatting (key order, whitespace) or in the
    order of distinct query parameters get the same fingerprint; any other difference in
    method, path, query or body gives another.
    """
    digest = hashlib.sha256()
    for part in (
        method.upper().encode(),
        path.encode("utf-8", "surrogateescape"),
        canonical_query(query),
        canonical_body(body, content_type),
    ):
        # Length-prefixed, so no two different splits of the same bytes collide.
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def canonical_query(query: bytes) -> bytes:
    """The query string decoded and sorted by name, keeping the order of repeated names."""
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    pairs.sort(key=lambda pair: pair[0])
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode()


def canonical_body(body: bytes, content_type: str | None) -> bytes:
    """A JSON body re-serialised with sorted keys and no whitespace; other bodies as sent.

    A body labelled JSON that does not parse is taken byte for byte.
    """
    if not body or not _is_json(content_type):
        return body
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return body
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    )


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")
