"""Reading the idempotency key from a request's headers, and refusing malformed ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

__all__ = ["KeyProblem", "read_key"]


@dataclasses.dataclass(frozen=True)
class KeyProblem:
    """Why a request's idempotency key header cannot be used, in one line."""

    detail: str


def read_key(
    headers: Iterable[tuple[bytes, bytes]], header: str, *, max_length: int
) -> str | KeyProblem | None:
    """The request's key; ``None`` when the header is absent; a problem when malformed.

    A key is 1 to ``max_length`` printable ASCII characters (space to ``~``), sent in
    exactly one header field; surrounding whitespace is not part of it.
    """
    name = header.lower().encode("latin-1")
    values = [value for field, value in headers if field.lower() == name]
    if not values:
        return None
    if len(values) > 1:
        return KeyProblem(f"send exactly one {header} header, not {len(values)}")
    raw = values[0].strip(b" \t")
    if not raw:
        return KeyProblem(f"the {header} header is empty")
    if len(raw) > max_length:
        return KeyProblem(f"the {header} is {len(raw)} characters long; at most {max_length}")
    if any(byte < 0x20 or byte > 0x7E for byte in raw):
        return KeyProblem(
            f"the {header} may hold printable ASCII only; no control or non-ASCII characters"
        )
    return raw.decode("ascii")
