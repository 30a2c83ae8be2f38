"""Telling the outside world what happened: log records and event hooks.

Logger ``retrysafe`` gets one INFO record per retry (dependency, attempt,
reason, status, wait) and one WARNING record per final failure (status and a
bounded, secret-scrubbed body excerpt); a fail-fast ``CircuitOpen`` is DEBUG,
since the breaker opening was already a WARNING. Hooks receive the same facts as
:class:`RetryEvent` values, for metrics. Every URL here is already redacted,
and control characters in a message are escaped.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Literal, Protocol

from retrysafe.redact import printable

__all__ = ["EventHook", "Observer", "RetryEvent", "logger"]

logger = logging.getLogger("retrysafe")
# A library never decides where its records go: without this, Python's last-resort
# handler would print every final-failure WARNING to stderr of apps that log nothing.
logger.addHandler(logging.NullHandler())


@dataclasses.dataclass(frozen=True)
class RetryEvent:
    """One thing that happened to a call.

    ``kind`` is ``"retry"`` (an attempt failed and another follows after
    ``wait`` seconds), ``"success"`` or ``"failure"`` (the call is over), or
    ``"circuit"`` (the dependency's breaker changed state; ``reason`` is
    ``"closed->open"`` and the like), or ``"hedge"`` (a hedged copy: ``reason``
    ``"sent"``, ``"won"``, ``"lost"`` (cancelled: another copy won) or
    ``"refused:<why>"``; ``attempt`` is the copy's number).
    ``reason`` is why it happened (for a failure, why retrying stopped) and
    ``outcome`` what the attempt got; ``error`` names the error class of a failure.
    """

    kind: Literal["retry", "success", "failure", "circuit", "hedge"]
    dependency: str
    method: str
    url: str
    attempt: int
    reason: str
    status: int | None
    wait: float = 0.0
    elapsed: float = 0.0
    error: str | None = None
    outcome: str = ""


class EventHook(Protocol):
    """Anything called with each :class:`RetryEvent`: a metrics counter, a tracer..."""

    def __call__(self, event: RetryEvent) -> None: ...


class Observer:
    """Sends each event to the log and to every hook; a failing hook never fails the call."""

    __slots__ = ("_hooks",)

    def __init__(self, hooks: Sequence[EventHook] = ()) -> None:
        self._hooks = tuple(hooks)

    @property
    def listening(self) -> bool:
        """Whether anyone hears routine events (a hook, or the log at DEBUG): if not,
        a successful call need not build its event at all."""
        return bool(self._hooks) or logger.isEnabledFor(logging.DEBUG)

    def emit(self, event: RetryEvent, *, body_excerpt: str = "") -> None:
        """Log ``event`` and hand it to the hooks."""
        _log(event, body_excerpt)
        for hook in self._hooks:
            try:
                hook(event)
            except Exception:
                logger.exception("retrysafe event hook %r failed; the call goes on", hook)

    def __repr__(self) -> str:
        return f"Observer({len(self._hooks)} hooks)"


def _level(event: RetryEvent) -> int:
    """Retries are INFO; a final failure is a WARNING, except a fail-fast CircuitOpen,
    which is DEBUG: the breaker opening is already one WARNING, and an outage must
    not turn every cheap fail-fast call into a log line."""
    if event.kind == "failure":
        return logging.DEBUG if event.error == "CircuitOpen" else logging.WARNING
    if event.kind == "circuit":
        return logging.WARNING if event.reason.endswith("->open") else logging.INFO
    if event.kind == "retry":
        return logging.INFO
    return logging.DEBUG


def _log(event: RetryEvent, body_excerpt: str) -> None:
    level = _level(event)
    if not logger.isEnabledFor(level):
        return
    fields = {"retrysafe": dataclasses.asdict(event)}
    # The message is one line whatever a server or a rule put in these texts: control
    # characters are escaped (the structured fields keep the values as they are).
    event = dataclasses.replace(
        event,
        dependency=printable(event.dependency),
        method=printable(event.method),
        url=printable(event.url),
        reason=printable(event.reason),
        outcome=printable(event.outcome),
    )
    body_excerpt = printable(body_excerpt)
    status = f"HTTP {event.status} " if event.status is not None else ""
    if event.kind == "retry":
        logger.log(
            level,
            "retrying %s %s [%s]: attempt %d got %s%s, waiting %.3fs",
            event.method,
            event.url,
            event.dependency,
            event.attempt,
            status,
            event.reason,
            event.wait,
            extra=fields,
        )
    elif event.kind == "failure":
        logger.log(
            level,
            "%s %s [%s] failed after %d attempt(s): %s%s, gave up: %s (%s)%s",
            event.method,
            event.url,
            event.dependency,
            event.attempt,
            status,
            event.outcome,
            event.reason,
            event.error,
            f" body: {body_excerpt}" if body_excerpt else "",
            extra=fields,
        )
    elif event.kind == "circuit":
        logger.log(level, "circuit %s [%s]", event.reason, event.dependency, extra=fields)
    elif event.kind == "hedge":
        logger.log(
            level,
            "hedge %s %s [%s]: copy %d %s",
            event.method,
            event.url,
            event.dependency,
            event.attempt,
            event.reason,
            extra=fields,
        )
    else:
        logger.log(
            level,
            "%s %s [%s] succeeded after %d attempts",
            event.method,
            event.url,
            event.dependency,
            event.attempt,
            extra=fields,
        )
