"""IdempotencySettings: how the middleware treats keyed requests, as one validated value."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Collection

__all__ = ["DEFAULT_METHODS", "DEFAULT_RELEASE_STATUSES", "IdempotencySettings"]

#: Methods whose keys the middleware honours unless told otherwise. PUT and DELETE are
#: idempotent by definition and pass through.
DEFAULT_METHODS: frozenset[str] = frozenset({"POST", "PATCH"})

#: Statuses, besides every 5xx, that release the key instead of being kept: they say the
#: request was refused before anything was done, so it may be sent again (corrected, or
#: later) under the same key rather than replayed. 422 is how frameworks (FastAPI's
#: request validation) and handlers refuse a body; 401 and 403 are refused credentials;
#: 408 and 429 say "not now". Stripe likewise keeps only results of requests that began
#: executing. A handler that did work and still answers one of these calls
#: ``mark_committed`` to have it kept.
DEFAULT_RELEASE_STATUSES: frozenset[int] = frozenset({401, 403, 408, 422, 429})

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


@dataclasses.dataclass(frozen=True, kw_only=True)
class IdempotencySettings:
    """The middleware's settings. Frozen: derive variants with ``dataclasses.replace``.

    Attributes:
        required: ``True`` answers a keyless request 400; ``False`` lets it through
            unguarded.
        ttl: seconds a finished request's response is kept for replay (retention).
        lease: seconds a claim holds the key unless renewed. The middleware renews it
            every third of this while the handler runs, so only a claim whose server
            stopped renewing it (crashed, or cut off from the store) lapses, and the next
            repeat takes the key over.
        header: the request header carrying the key.
        methods: request methods whose keys are honoured; others pass through. Any
            collection of names; kept as a ``frozenset`` of upper-case names.
        max_key_length: longest key accepted, in characters.
        max_body_size: largest keyed request body, in bytes (larger: 413). The body is
            read whole to fingerprint it.
        max_response_size: largest response body kept for replay; a larger one is
            recorded as not replayable, and repeats get 409 rather than a second run.
        in_flight_retry_after: the ``Retry-After`` seconds told to a repeat that arrives
            while the first request still runs (never past the lease's end).
        release_statuses: statuses, besides every 5xx, that release the key rather than
            being kept (a handler can still keep them with ``mark_committed``); by default
            :data:`DEFAULT_RELEASE_STATUSES`. Any collection; kept as a ``frozenset``.
    """

    required: bool
    ttl: float = 86_400.0
    lease: float = 60.0
    header: str = "Idempotency-Key"
    methods: Collection[str] = DEFAULT_METHODS
    max_key_length: int = 255
    max_body_size: int = 1_048_576
    max_response_size: int = 1_048_576
    in_flight_retry_after: float = 1.0
    release_statuses: Collection[int] = DEFAULT_RELEASE_STATUSES

    def __post_init__(self) -> None:
        if not isinstance(self.required, bool):
            raise TypeError(f"required must be True or False, got {self.required!r}")
        for name in ("ttl", "lease", "in_flight_retry_after"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in ("max_key_length", "max_body_size", "max_response_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if not isinstance(self.header, str) or not _TOKEN.fullmatch(self.header):
            raise ValueError(f"header must be an HTTP header name, got {self.header!r}")
        if isinstance(self.methods, str):
            # (a str is a collection too: of its letters, which no request method is)
            raise TypeError(
                f"methods must be a collection of method names, such as {{{self.methods!r}}}; "
                f"got the string {self.methods!r}"
            )
        methods = frozenset(str(method).upper() for method in self.methods)
        if not methods:
            raise ValueError("methods must name at least one method")
        object.__setattr__(self, "methods", methods)
        statuses = frozenset(self.release_statuses)
        if any(not isinstance(status, int) or not 100 <= status <= 599 for status in statuses):
            raise ValueError(f"release_statuses must be HTTP statuses, got {sorted(statuses)}")
        object.__setattr__(self, "release_statuses", statuses)
