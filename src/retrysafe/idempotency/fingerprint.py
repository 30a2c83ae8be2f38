"""The fingerprint of a request: what must match for a repeat to count as the same request."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import parse_qsl

__all__ = ["canonical_body", "canonical_query", "request_fingerprint"]


def request_fingerprint(
    method: str, path: str, query: bytes, body: bytes, content_type: str | None
) -> str:
    """A SHA-256 over the method, path, query, body and media type, in canonical forms.

    Two requests that differ only in JSON formatting (key order, whitespace), in the
    order of distinct query parameters, or in their ``Content-Type``'s parameters or
    letter case get the same fingerprint; any other difference in method, path, query,
    body or media type gives another (the same bytes as JSON and as a form are read as
    different requests by the app, so they are different requests here too).
    """
    digest = hashlib.sha256()
    for part in (
        method.upper().encode(),
        path.encode("utf-8", "surrogateescape"),
        canonical_query(query),
        canonical_body(body, content_type),
        _media_type(content_type).encode("latin-1", "replace"),
    ):
        # Length-prefixed, so no two different splits of the same bytes collide.
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def canonical_query(query: bytes) -> bytes:
    """The query string decoded and sorted by name, keeping the order of repeated names.

    Percent escapes are decoded byte for byte (as Latin-1), so escapes of different
    bytes never decode to the same text.
    """
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="latin-1")
    pairs.sort(key=lambda pair: pair[0])
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode()


def canonical_body(body: bytes, content_type: str | None) -> bytes:
    """A JSON body rewritten with sorted keys and no whitespace; other bodies as sent.

    Numbers keep the exact text they were sent as: read as floats, two different amounts
    such as ``12345678901234567.89`` and ``…88`` would look the same. A body labelled
    JSON that does not parse is taken byte for byte.
    """
    if not body or not _is_json(content_type):
        return body
    try:
        document = json.loads(
            body, parse_float=_Literal, parse_int=_Literal, parse_constant=_Literal
        )
    except (ValueError, RecursionError):
        return body
    return _write_canonical(document).encode("utf-8", "surrogatepass")


class _Literal:
    """JSON text written out exactly as it is: a number as sent, or punctuation."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_OPEN_ARRAY, _CLOSE_ARRAY = _Literal("["), _Literal("]")
_OPEN_OBJECT, _CLOSE_OBJECT = _Literal("{"), _Literal("}")
_COMMA, _COLON = _Literal(","), _Literal(":")


def _write_canonical(document: object) -> str:
    """Serialise a parsed document: keys sorted, no whitespace, numbers as sent.

    Iterative rather than recursive, so any depth the parser accepted is written too.
    """
    out: list[str] = []
    pending: list[object] = [document]
    while pending:
        item = pending.pop()
        if isinstance(item, _Literal):
            out.append(item.text)
        elif isinstance(item, str):
            out.append(json.dumps(item, ensure_ascii=False))
        elif item is None or item is True or item is False:
            out.append(json.dumps(item))
        elif isinstance(item, list):
            parts: list[object] = [_OPEN_ARRAY]
            for index, element in enumerate(item):
                parts.extend((_COMMA, element) if index else (element,))
            parts.append(_CLOSE_ARRAY)
            pending.extend(reversed(parts))
        elif isinstance(item, dict):
            parts = [_OPEN_OBJECT]
            for index, name in enumerate(sorted(item)):
                if index:
                    parts.append(_COMMA)
                parts.extend((_Literal(json.dumps(name, ensure_ascii=False)), _COLON, item[name]))
            parts.append(_CLOSE_OBJECT)
            pending.extend(reversed(parts))
        else:
            raise TypeError(f"not a parsed JSON value: {item!r}")
    return "".join(out)


def _media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` (lower-cased, no parameters); "" for none."""
    if content_type is None:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def _is_json(content_type: str | None) -> bool:
    media_type = _media_type(content_type)
    return media_type == "application/json" or media_type.endswith("+json")
