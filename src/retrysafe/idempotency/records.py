"""The values an idempotency store keeps and returns: records, stored responses, claims."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

__all__ = ["Claimed", "IdempotencyRecord", "RecordState", "StoredResponse", "record_from_fields"]

#: ``in_flight``: a request holds the key under a lease and its handler is running.
#: ``completed``: the handler finished and its response is kept for replay.
#: ``not_replayable``: the handler finished but its response could not be kept
#: (too large, or it failed after committing), so repeats are refused, never re-run.
RecordState = Literal["in_flight", "completed", "not_replayable"]


@dataclasses.dataclass(frozen=True)
class StoredResponse:
    """A response as kept for replay: status, the headers safe to repeat, and the body.

    Header names are lowercase; hop-by-hop headers and ``Set-Cookie`` are never kept.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def headers_json(self) -> str:
        """The headers as compact JSON, the form the database stores keep them in."""
        return json.dumps([list(pair) for pair in self.headers], separators=(",", ":"))

    @staticmethod
    def columns(response: StoredResponse | None) -> tuple[object, ...]:
        """``(state, status, headers, body)`` as the SQL stores keep an outcome.

        ``None`` is a result too large to keep: the key is tombstoned, not replayable.
        """
        if response is None:
            return ("not_replayable", None, None, None)
        return ("completed", response.status, response.headers_json(), response.body)

    @classmethod
    def from_parts(cls, status: int, headers_json: str, body: bytes) -> StoredResponse:
        """Rebuild a response from a status, :meth:`headers_json` output and the body."""
        pairs = json.loads(headers_json)
        return cls(status, tuple((str(name), str(value)) for name, value in pairs), bytes(body))


@dataclasses.dataclass(frozen=True)
class IdempotencyRecord:
    """What a store holds for one (caller scope, key), as seen by a request that did not
    get the claim.

    Attributes:
        state: see :data:`RecordState`.
        fingerprint: the fingerprint of the request that made the record; a repeat with
            another fingerprint is a different request reusing the key.
        expires_at: wall-clock seconds when the record lapses: the end of the lease while
            in flight, the end of retention once finished.
        response: the response to replay (``completed`` records only).
    """

    state: RecordState
    fingerprint: str
    expires_at: float
    response: StoredResponse | None = None


@dataclasses.dataclass(frozen=True)
class Claimed:
    """The caller now owns the key: run the handler, then finish with this ``token``.

    The token fences the claim: once the lease lapses and another request takes the key
    over, writes made with the old token are refused.
    """

    token: str


_STATES: dict[str, RecordState] = {
    "in_flight": "in_flight",
    "completed": "completed",
    "not_replayable": "not_replayable",
}


def record_from_fields(fields: tuple[Any, ...]) -> IdempotencyRecord:
    """Decode a stored record: (state, fingerprint, expires_at, status, headers JSON, body).

    The status, headers and body are read only for ``completed`` records.
    """
    state_text, fingerprint, expires_at, status, headers, body = fields
    state = _STATES[str(state_text)]
    response = None
    if state == "completed":
        response = StoredResponse.from_parts(int(status), str(headers), bytes(body))
    return IdempotencyRecord(state, str(fingerprint), float(expires_at), response)
