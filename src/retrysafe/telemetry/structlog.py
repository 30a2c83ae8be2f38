"""Every retrysafe event as one structlog entry (``retrysafe[structlog]``).

Pass a :class:`StructlogEvents` in a client's or transport's ``hooks``::

    client = retrysafe.Client(hooks=[StructlogEvents()])

Each event is logged as ``retrysafe.<kind>`` (``retrysafe.retry``,
``retrysafe.failure``...) at the level the stdlib ``retrysafe`` logger would use
(:func:`retrysafe.observe.event_level`, so ``LogSettings.client_error_level``
applies too), with the event's fields as keys: exactly
:func:`retrysafe.observe.event_fields` (``kind``, ``dependency``, ``method``,
``url``, ``attempt``, ``status``, ``outcome``, ``reason``, ``wait``, ``elapsed``,
``error``, ``exception``, ``transition``). The URL is already redacted.
"""

from __future__ import annotations

from typing import Any

try:
    import structlog
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "retrysafe.telemetry.structlog needs structlog: pip install 'retrysafe[structlog]'"
    ) from exc

from retrysafe.observe import RetryEvent, event_fields, event_level

__all__ = ["StructlogEvents"]


class StructlogEvents:
    """A hook that logs every event to structlog, one entry per event.

    ``logger``: the structlog logger to use; default ``structlog.get_logger("retrysafe")``.
    """

    def __init__(self, logger: Any = None) -> None:
        self.logger = logger if logger is not None else structlog.get_logger("retrysafe")

    def __call__(self, event: RetryEvent) -> None:
        """Log ``event`` with its fields."""
        self.logger.log(event_level(event), f"retrysafe.{event.kind}", **event_fields(event))

    def __repr__(self) -> str:
        return f"StructlogEvents({self.logger!r})"
