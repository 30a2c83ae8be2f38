"""Knowing when one retrying call runs inside another, so retries do not multiply.

A service that retries, calling a service that retries, calling an API that
fails, sends ``attempts ** layers`` requests. Each retrysafe call runs in a
:class:`RetryScope` kept in a context variable; a call that finds an enclosing
scope (same task or thread, e.g. an in-process ASGI app, a rule or a hook)
is nested: it retries less, and when it gives up after retrying it tells the
enclosing call, which then does not retry the same failure again.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator

__all__ = ["RetryScope", "retry_scope"]


@dataclasses.dataclass
class RetryScope:
    """One retrysafe call in progress; ``depth`` 0 is the outermost."""

    depth: int
    parent: RetryScope | None = None
    #: Set by a nested call that already retried and gave up during this call's attempt.
    nested_gave_up: bool = False

    @property
    def nested(self) -> bool:
        return self.parent is not None


_current: contextvars.ContextVar[RetryScope | None] = contextvars.ContextVar(
    "retrysafe_retry_scope", default=None
)


@contextlib.contextmanager
def retry_scope() -> Iterator[RetryScope]:
    """Enter a scope for one call, nested in the current one if there is one."""
    parent = _current.get()
    scope = RetryScope(depth=0 if parent is None else parent.depth + 1, parent=parent)
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)
