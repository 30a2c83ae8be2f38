"""The handle a handler uses to say "the side effect happened": :func:`mark_committed`."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Protocol

__all__ = ["SCOPE_KEY", "IdempotentRequest", "current_request", "mark_committed"]

#: Where the middleware puts the :class:`IdempotentRequest` in the ASGI scope.
SCOPE_KEY = "retrysafe.idempotency"


class _HasScope(Protocol):
    @property
    def scope(self) -> MutableMapping[str, Any]: ...


class IdempotentRequest:
    """The keyed request a handler is serving under a claim.

    Attributes:
        caller: the caller scope the key belongs to.
        key: the idempotency key.
        committed: set by :meth:`mark_committed`.
    """

    def __init__(self, caller: str, key: str) -> None:
        self.caller = caller
        self.key = key
        self.committed = False

    def mark_committed(self) -> None:
        """Record that the side effect happened, so the outcome is kept whatever it is.

        Afterwards a 5xx response is stored for replay instead of releasing the key, and
        an exception that reaches the middleware leaves the key not replayable (repeats
        get 409) instead of free to run again. (Under Starlette and FastAPI an exception
        usually reaches it as their 500 response, which is then stored and replayed.)
        """
        self.committed = True

    def __repr__(self) -> str:
        return f"IdempotentRequest(key={self.key!r}, committed={self.committed!r})"


def current_request(request: _HasScope | MutableMapping[str, Any]) -> IdempotentRequest | None:
    """The :class:`IdempotentRequest` being served, from a Starlette request or an ASGI
    scope; ``None`` when the request is not guarded by a key."""
    scope = request if isinstance(request, MutableMapping) else request.scope
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, IdempotentRequest) else None


def mark_committed(request: _HasScope | MutableMapping[str, Any]) -> bool:
    """Tell the idempotency middleware this request's side effect happened.

    Call it from the handler (with its Starlette ``Request`` or ASGI scope) once the
    write is durable: a later failure is then stored or refused, never re-run. Returns
    ``False`` when the request carries no key, so there is nothing to mark.
    """
    guarded = current_request(request)
    if guarded is None:
        return False
    guarded.mark_committed()
    return True
