"""DeadlineMiddleware: an inbound deadline header becomes the request's deadline scope.

When a retrysafe client calls with ``deadline_header="Request-Timeout"``, each
attempt tells the server how many seconds it has. This ASGI middleware reads
that header and runs the app inside ``retrysafe.deadline(seconds - margin)``, so
every retrysafe call the handler makes shares what is left of the caller's
time: nested services share one budget of time instead of each starting its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from retrysafe.clock import Clock, checked_clock
from retrysafe.deadline_scope import deadline

__all__ = ["DeadlineMiddleware"]

#: A deadline header's value: decimal seconds, not negative (no sign, exponent, ``_``,
#: ``inf`` or ``nan``, all of which Python's ``float()`` would take).
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class DeadlineMiddleware:
    """Run each HTTP request under the deadline its caller sent in ``header``.

    ``margin`` seconds are kept back for the reply to travel home. A missing,
    malformed, negative or non-finite header leaves the request without a
    scope (the handler's own policies still apply). Sent more than once (several
    lines, or values separated by commas), the tightest value counts.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        header: str = "Request-Timeout",
        margin: float = 0.05,
        clock: Clock | None = None,
    ) -> None:
        if not math.isfinite(margin) or margin < 0:
            raise ValueError(f"DeadlineMiddleware margin must be >= 0 seconds, got {margin!r}")
        self.app = app
        self.header = header.lower().encode("latin-1")
        self.margin = margin
        self.clock = clock if clock is None else checked_clock(clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        seconds = self._inbound_seconds(scope) if scope["type"] == "http" else None
        if seconds is None:
            await self.app(scope, receive, send)
            return
        async with deadline(max(0.0, seconds - self.margin), clock=self.clock):
            await self.app(scope, receive, send)

    def _inbound_seconds(self, scope: Scope) -> float | None:
        """The tightest of the header's values (every line of it, and each comma-separated
        value in a line, as HTTP reads them alike); None if there is none, or if any is not
        plain decimal seconds (such as ``10.000``)."""
        tightest: float | None = None
        for name, value in scope.get("headers", ()):
            if name.lower() != self.header:
                continue
            for piece in value.decode("latin-1").split(","):
                text = piece.strip()
                if _SECONDS.fullmatch(text) is None:
                    return None
                seconds = float(text)
                if not math.isfinite(seconds):  # (so many digits that they read as inf)
                    return None
                if tightest is None or seconds < tightest:
                    tightest = seconds
        return tightest
