"""The ``api`` fixture for the requests and aiohttp shells.

The shared socket tests (``test_shared_sockets.py``) are the httpx shells' own test
functions, imported and run with this fixture instead of the root one: the same
calls and the same assertions, made through ``requests.Session`` + ``RetryAdapter``
and through ``aiohttp.ClientSession`` + ``RetryMiddleware``.

What the tests read back (status, headers, body, the report in
``extensions["retrysafe"]``) is copied from the shell's own response into an
``httpx.Response``; errors are the shell's own, raised as they are.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
import requests

import retrysafe
from retrysafe.aiohttp import RetryMiddleware
from retrysafe.aiohttp import report_of as aiohttp_report_of
from retrysafe.requests import RetryAdapter
from retrysafe.requests import report_of as requests_report_of

# The shared tests live in tests/ (not a package): make them importable from here.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_UNSET: Any = object()


class ShellApi:
    """One call through the requests adapter or the aiohttp middleware, like ``Api``.

    ``idempotency_key=True`` becomes a fresh ``Idempotency-Key`` header (neither client
    has a per-call argument for it: the header is how their users key a request);
    ``follow_redirects`` is the clients' ``allow_redirects``; ``client_options`` go to
    the adapter or middleware. ``seconds`` is how long the last call took.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.seconds = 0.0

    def request(
        self,
        method: str,
        url: str,
        *,
        policy: retrysafe.RetryPolicy | None = None,
        client_options: dict[str, Any] | None = None,
        idempotency_key: str | bool | None = None,
        headers: dict[str, str] | None = None,
        json: Any = _UNSET,
        content: bytes | None = None,
        timeout: Any = _UNSET,
        follow_redirects: bool = False,
    ) -> httpx.Response:
        options = dict(client_options or {})
        if policy is not None:
            options["policy"] = policy
        headers = dict(headers or {})
        if idempotency_key is True:
            headers["Idempotency-Key"] = str(uuid.uuid4())
        elif isinstance(idempotency_key, str):
            headers["Idempotency-Key"] = idempotency_key
        body = content
        if json is not _UNSET:
            body = jsonlib.dumps(json).encode()
            headers.setdefault("Content-Type", "application/json")
        if self.mode == "requests":
            return self._requests(method, url, options, headers, body, timeout, follow_redirects)
        return asyncio.run(
            self._aiohttp(method, url, options, headers, body, timeout, follow_redirects)
        )

    def _requests(
        self,
        method: str,
        url: str,
        options: dict[str, Any],
        headers: dict[str, str],
        body: bytes | None,
        timeout: Any,
        follow_redirects: bool,
    ) -> httpx.Response:
        adapter = RetryAdapter(**options)
        with requests.Session() as session:
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            started = time.monotonic()
            try:
                response = session.request(
                    method,
                    url,
                    headers=headers,
                    data=body,
                    timeout=None if timeout is _UNSET else timeout,
                    allow_redirects=follow_redirects,
                )
            finally:
                self.seconds = time.monotonic() - started
            return httpx.Response(
                response.status_code,
                headers=[(k, v) for k, v in response.headers.items() if k != "Content-Encoding"],
                content=response.content,
                extensions={"retrysafe": requests_report_of(response)},
            )

    async def _aiohttp(
        self,
        method: str,
        url: str,
        options: dict[str, Any],
        headers: dict[str, str],
        body: bytes | None,
        timeout: Any,
        follow_redirects: bool,
    ) -> httpx.Response:
        middleware = RetryMiddleware(**options)
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            started = time.monotonic()
            try:
                async with session.request(
                    method,
                    url,
                    headers=headers,
                    data=body,
                    allow_redirects=follow_redirects,
                    **({"timeout": None} if timeout is None else {}),
                ) as response:
                    content = await response.read()
            finally:
                self.seconds = time.monotonic() - started
            return httpx.Response(
                response.status,
                headers=[(k, v) for k, v in response.headers.items() if k != "Content-Encoding"],
                content=content,
                extensions={"retrysafe": aiohttp_report_of(response)},
            )

    def __repr__(self) -> str:
        return f"ShellApi({self.mode})"


@pytest.fixture(params=["requests", "aiohttp"])
def api(request: pytest.FixtureRequest) -> ShellApi:
    """retrysafe under requests (RetryAdapter) and under aiohttp (RetryMiddleware)."""
    return ShellApi(str(request.param))
