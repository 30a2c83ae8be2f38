"""A small shop API behind a token check and the idempotency middleware, for the tests.

Every handler counts its runs in ``Shop.runs`` (per path), so a test can say exactly how
many times a write executed. Callers authenticate with ``Authorization: Bearer <name>``;
an outer middleware puts the verified name in ``request.state.caller``, which is the
idempotency scope.
"""

from __future__ import annotations

import collections
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from retrysafe.idempotency import (
    IdempotencyMiddleware,
    IdempotencyStore,
    current_request,
    mark_committed,
)

#: The callers the token check knows: ``Bearer <name>`` for each.
CALLERS = frozenset({"alice", "bob"})


class Shop:
    """Run counts, and gates that hold each ``/slow`` run until the test opens them.

    ``entered[n]`` is set when run ``n`` of ``/slow`` starts; it then waits for
    ``gates[n]``. With ``runs_log``, each run also appends ``<path> <key>`` to that file,
    so runs in several processes can be counted together.
    """

    def __init__(self, *, handler_delay: float = 0.0, runs_log: Path | None = None) -> None:
        self.runs: collections.Counter[str] = collections.Counter()
        self.handler_delay = handler_delay
        self.runs_log = runs_log
        self.entered: collections.defaultdict[int, anyio.Event] = collections.defaultdict(
            anyio.Event
        )
        self.gates: collections.defaultdict[int, anyio.Event] = collections.defaultdict(anyio.Event)


class TokenAuth:
    """Outer middleware: identifies the caller from a bearer token, never rejects."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"authorization" and value.startswith(b"Bearer "):
                    caller = value[len(b"Bearer ") :].decode()
                    if caller in CALLERS:
                        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)


def verified_caller(request: Request) -> str | None:
    """The idempotency scope: the caller TokenAuth verified, if any."""
    caller = getattr(request.state, "caller", None)
    return caller if isinstance(caller, str) else None


def _shop(request: Request) -> Shop:
    shop: Shop = request.app.state.shop
    return shop


async def _count(request: Request) -> tuple[Shop, int]:
    shop = _shop(request)
    shop.runs[request.url.path] += 1
    if shop.runs_log is not None:
        guarded = current_request(request)
        key = guarded.key if guarded is not None else "-"
        with shop.runs_log.open("a") as log:  # O_APPEND: whole lines, even across processes
            log.write(f"{request.url.path} {key}\n")
    if shop.handler_delay:
        await anyio.sleep(shop.handler_delay)
    return shop, shop.runs[request.url.path]


async def orders(request: Request) -> Response:
    """Creates an order: 201 with its number, a session cookie and ordinary headers."""
    _, run = await _count(request)
    body = await request.body()
    received: Any = json.loads(body) if body else None
    return JSONResponse(
        {"order": run, "received": received, "query": dict(request.query_params)},
        status_code=201,
        headers={
            "Set-Cookie": f"session=secret-{run}; HttpOnly",
            "X-Order": str(run),
            "Cache-Control": "no-store",
        },
    )


async def list_orders(request: Request) -> Response:
    _, run = await _count(request)
    return JSONResponse({"listed": run})


async def status(request: Request) -> Response:
    """Answers with the status in the path, e.g. ``/status/503``."""
    _, run = await _count(request)
    code = int(request.path_params["code"])
    if code in (204, 304):
        return Response(status_code=code)
    return JSONResponse({"run": run}, status_code=code)


async def boom(request: Request) -> Response:
    await _count(request)
    raise RuntimeError("the handler failed")


async def commit_then_fail(request: Request) -> Response:
    """Marks the write committed, then fails with a 500 that must be kept."""
    _, run = await _count(request)
    mark_committed(request)
    return JSONResponse({"run": run, "error": "failed after the write"}, status_code=500)


async def commit_then_raise(request: Request) -> Response:
    await _count(request)
    mark_committed(request)
    raise RuntimeError("the handler failed after the write")


async def big(request: Request) -> Response:
    """A response of ``?size=`` bytes."""
    _, run = await _count(request)
    size = int(request.query_params.get("size", "0"))
    return Response(b"x" * size, headers={"X-Run": str(run)})


async def slow(request: Request) -> Response:
    """Holds until the test opens this run's gate; answers with the run number."""
    shop, run = await _count(request)
    shop.entered[run].set()
    await shop.gates[run].wait()
    return JSONResponse({"run": run}, status_code=201)


async def stream(request: Request) -> Response:
    """Streams three chunks: ``chunk0`` to ``chunk2``, one line each."""
    await _count(request)

    async def chunks() -> AsyncIterator[bytes]:
        for number in range(3):
            yield f"chunk{number}\n".encode()

    return StreamingResponse(chunks(), media_type="text/plain")


async def stream_then_fail(request: Request) -> Response:
    """Does its work (counted), answers 201 and starts its body, then fails mid-body."""
    await _count(request)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"charged": true, '
        raise RuntimeError("the body failed half-way")

    return StreamingResponse(chunks(), status_code=201, media_type="application/json")


async def feed(request: Request) -> Response:
    """An endless event stream (counted once): one event every 10 ms, each counted in
    ``shop.runs["/feed events"]``, until the server stops it."""
    shop, _ = await _count(request)

    async def events() -> AsyncIterator[bytes]:
        while True:
            shop.runs["/feed events"] += 1
            yield b"data: tick\n\n"
            await anyio.sleep(0.01)

    return StreamingResponse(events(), media_type="text/event-stream")


async def slow_stream(request: Request) -> Response:
    """A finite body streamed slowly: 20 chunks, 50 ms apart (1 s in all), answered 201."""
    await _count(request)

    async def chunks() -> AsyncIterator[bytes]:
        for number in range(20):
            yield f"part{number}\n".encode()
            await anyio.sleep(0.05)

    return StreamingResponse(chunks(), status_code=201, media_type="text/plain")


def build_app(
    store: IdempotencyStore, *, shop: Shop | None = None, **middleware_options: Any
) -> Starlette:
    """The shop app: TokenAuth, then IdempotencyMiddleware (``required`` defaults True)."""
    middleware_options.setdefault("required", True)
    app = Starlette(
        routes=[
            Route("/orders", orders, methods=["POST", "PATCH", "PUT"]),
            Route("/orders", list_orders, methods=["GET"]),
            Route("/orders/other", orders, methods=["POST"]),
            Route("/status/{code:int}", status, methods=["POST"]),
            Route("/boom", boom, methods=["POST"]),
            Route("/commit-then-fail", commit_then_fail, methods=["POST"]),
            Route("/commit-then-raise", commit_then_raise, methods=["POST"]),
            Route("/big", big, methods=["POST"]),
            Route("/slow", slow, methods=["POST"]),
            Route("/stream", stream, methods=["POST"]),
            Route("/stream-then-fail", stream_then_fail, methods=["POST"]),
            Route("/feed", feed, methods=["POST"]),
            Route("/slow-stream", slow_stream, methods=["POST"]),
        ],
        middleware=[
            Middleware(TokenAuth),
            Middleware(
                IdempotencyMiddleware,
                store=store,
                scope=verified_caller,
                **middleware_options,
            ),
        ],
    )
    app.state.shop = shop if shop is not None else Shop()
    return app


def client_for(app: ASGIApp) -> httpx.AsyncClient:
    """An httpx client calling ``app`` in process; app errors come back as 500s."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://shop.test")


def headers(key: str | None = None, *, caller: str | None = "alice") -> dict[str, str]:
    """Request headers: the caller's bearer token and, when given, the idempotency key."""
    result = {} if caller is None else {"Authorization": f"Bearer {caller}"}
    if key is not None:
        result["Idempotency-Key"] = key
    return result
