"""BoundedTimeouts: httpx's per-phase timeouts as an attempt bounded them, keeping the caller's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["BoundedTimeouts"]


class BoundedTimeouts(dict[str, "float | None"]):
    """The ``timeout`` extension an attempt was sent with; ``caller`` holds the one the
    request came with.

    An attempt's phases are bounded by the time it has left, on the very request the
    caller handed over. A caller may send that request again (``client.send(request)``
    twice, or an SDK retrying on its own), and that call must start from the caller's
    timeouts, not from the last attempt's shrunken ones: it finds this type on the
    request and takes ``caller``. (A plain ``dict`` to httpx and httpcore, which only
    read it. Made as ``BoundedTimeouts(values)`` and ``caller`` set after, with no
    ``__init__`` of its own: this runs for every attempt.)
    """

    __slots__ = ("caller",)

    caller: Mapping[str, Any]
