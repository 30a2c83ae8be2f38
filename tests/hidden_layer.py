"""A retrying layer hidden inside a transport: nesting as a library makes it.

A retrysafe client refuses a retrying transport given to it directly (two layers in
one client are a mistake). A library's own transport may still retry inside itself,
through retrysafe, where the client cannot see it: that is what the nesting guard is
for, and what these wrappers stand for in the tests of it.
"""

from __future__ import annotations

import httpx


class HiddenLayer(httpx.BaseTransport):
    """A sync transport that sends each request through ``layer`` (a RetryTransport)."""

    def __init__(self, layer: httpx.BaseTransport) -> None:
        self.layer = layer

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.layer.handle_request(request)

    def close(self) -> None:
        self.layer.close()


class AsyncHiddenLayer(httpx.AsyncBaseTransport):
    """An async transport that sends each request through ``layer``."""

    def __init__(self, layer: httpx.AsyncBaseTransport) -> None:
        self.layer = layer

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.layer.handle_async_request(request)

    async def aclose(self) -> None:
        await self.layer.aclose()
