"""A mock server that notes the timeouts each attempt reaches it with.

Shared by the tests of which timeouts an attempt is sent with: the caller's own, the
ones bounded by the attempt's time, or what a redirect chain or a resent request had
left.
"""

from __future__ import annotations

from typing import Any

import httpx

#: The timeouts a client made with ``timeout=5.0`` gives every phase of a request.
CALLERS: dict[str, float] = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}


class TimeoutRecorder:
    """A mock server (for ``httpx.MockTransport``) that notes the timeouts each attempt
    was sent with, and answers 200."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(dict(request.extensions["timeout"]))
        return httpx.Response(200)
