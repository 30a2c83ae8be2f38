"""Endpoints whose body is the point: quota errors, errors dressed as successes, bodies a
client cannot parse, and an echo of what the client really sent.

A status code alone misleads a client here: a 429 that no wait will fix, a 503 that is
really a permanent refusal, a 200 that reports an error. Rules in the client decide.

- ``/quota?remaining=0&header=x-api-remaining-credits``: 429, the header with
  ``remaining`` verbatim, and a JSON error; no Retry-After.
- ``/refused-site``: 503 with the stable JSON error :data:`REFUSED_SITE_ERROR`.
- ``/ok-error``: 200 with ``{"status": "error", "error": "..."}``.
- ``/auth?header=x-api-key``: 401 with a message saying where the key goes unless the
  request carries that header (any value), then 200.
- ``/validate?require=email,name``: 400 ``{"missing": [...]}`` naming each required query
  parameter the request lacks (a misspelled ``emial=`` is just unknown), else 200.
- ``/echo``: JSON of the request: method, path, query (last value per name),
  query_list (every pair), headers (repeats joined with ``", "``) and body (UTF-8 text).
  Like every endpoint, it reads at most the app's ``max_body_bytes`` (1 MiB by default);
  a larger body is answered 413 without the rest being read.
- ``/malformed?kind=truncated-json|html-error|empty|wrong-content-type&status=200``: a
  complete HTTP reply whose body a JSON client cannot use.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import arrive
from retrysafe.chaos.params import (
    choice_param,
    header_name_param,
    header_value_param,
    status_code,
)
from retrysafe.chaos.replies import ALL_METHODS, BODILESS_STATUSES, reply_json
from retrysafe.chaos.state import ChaosState

__all__ = ["MALFORMED_KINDS", "REFUSED_SITE_ERROR", "routes"]

#: The stable error text of ``/refused-site`` (a 503 that no retry will fix).
REFUSED_SITE_ERROR = "The website returned HTTP 403 and could not be read."

#: What ``/malformed?kind=`` can send, each with the body and content type it uses.
MALFORMED_KINDS: dict[str, tuple[bytes, str]] = {
    "truncated-json": (b'{"items": [{"id": 1}, {"id": 2', "application/json"),
    "html-error": (
        b"<!DOCTYPE html><html><head><title>Error</title></head>"
        b"<body><h1>Something went wrong</h1></body></html>",
        "text/html; charset=utf-8",
    ),
    "empty": (b"", "application/json"),
    "wrong-content-type": (b'{"ok": true}', "text/html; charset=utf-8"),
}


def _echo(request: Request, body: bytes) -> dict[str, Any]:
    headers: dict[str, str] = {}
    for name, value in request.headers.items():
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return {
        "method": request.method,
        "path": request.url.path,
        "query": dict(request.query_params),
        "query_list": [[name, value] for name, value in request.query_params.multi_items()],
        "headers": headers,
        "body": body.decode("utf-8", errors="replace"),
    }


def routes(state: ChaosState) -> list[Route]:
    """The body-centred endpoints, bound to ``state``."""

    async def quota(request: Request) -> Response:
        header = header_name_param(request, "header", "x-api-remaining-credits")
        remaining = header_value_param(request, "remaining")
        arrival = await arrive(state, request, "quota")
        content = {"error": "Out of credits. Add credits to your account to continue."}
        headers = {header: "0" if remaining is None else remaining}
        return reply_json(arrival, 429, content, headers=headers)

    async def auth(request: Request) -> Response:
        header = header_name_param(request, "header", "x-api-key")
        arrival = await arrive(state, request, "auth")
        if header in request.headers:
            return reply_json(arrival, 200, {"ok": True})
        message = f"Missing API key: pass it in the {header} header."
        return reply_json(arrival, 401, {"error": "unauthorized", "message": message})

    async def validate(request: Request) -> Response:
        required = [
            name.strip()
            for name in (request.query_params.get("require") or "").split(",")
            if name.strip()
        ]
        arrival = await arrive(state, request, "validate")
        missing = [name for name in required if not request.query_params.get(name)]
        if missing:
            return reply_json(arrival, 400, {"missing": missing})
        return reply_json(arrival, 200, {name: request.query_params[name] for name in required})

    async def refused_site(request: Request) -> Response:
        arrival = await arrive(state, request, "refused-site")
        return reply_json(arrival, 503, {"error": REFUSED_SITE_ERROR})

    async def ok_error(request: Request) -> Response:
        arrival = await arrive(state, request, "ok-error")
        content = {"status": "error", "error": "The operation failed; the server said so in a 200."}
        return reply_json(arrival, 200, content)

    async def echo(request: Request) -> Response:
        arrival = await arrive(state, request, "echo")
        return reply_json(arrival, 200, _echo(request, arrival.body))

    async def malformed(request: Request) -> Response:
        kind = choice_param(request, "kind", "truncated-json", MALFORMED_KINDS)
        status = status_code("status", request.query_params.get("status") or "200")
        arrival = await arrive(state, request, "malformed")
        arrival.record(f"malformed:{kind}")
        body, content_type = MALFORMED_KINDS[kind]
        if status in BODILESS_STATUSES:
            body = b""
        return Response(
            body, status_code=status, headers=arrival.headers({"content-type": content_type})
        )

    return [
        Route("/quota", quota, methods=ALL_METHODS),
        Route("/auth", auth, methods=ALL_METHODS),
        Route("/validate", validate, methods=ALL_METHODS),
        Route("/refused-site", refused_site, methods=ALL_METHODS),
        Route("/ok-error", ok_error, methods=ALL_METHODS),
        Route("/echo", echo, methods=ALL_METHODS),
        Route("/malformed", malformed, methods=ALL_METHODS),
    ]
