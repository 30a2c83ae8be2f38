"""Correct use that must type-check cleanly under ``mypy --strict``.

mypy input, not a test (see ``tests/test_client_types.py``): httpx's own arguments
as httpx accepts them, and retrysafe's keywords where retrysafe adds them.
"""

import dataclasses
import ssl
from collections.abc import AsyncIterator, Iterator

import httpx
import httpx2

import retrysafe
from retrysafe import ApiError, CallReport, RetryEvent, RetryPolicy, Verdict
from retrysafe.client import report_of
from retrysafe.idempotency import IdempotencyMiddleware, IdempotencySettings, MemoryStore
from retrysafe.idempotency.asgi import ASGIApp
from retrysafe.simulate import ContentionSettings
from retrysafe.testing import FakeClock

URL = "https://api.example.com/items"


def handler(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


def rule(response: httpx.Response) -> Verdict | None:
    return Verdict.permanent("teapot") if response.status_code == 418 else None


POLICY = RetryPolicy(
    attempts=3,
    retry_statuses=[500, 503],
    idempotent_methods=("GET", "PUT"),
    quota_headers={"x-credits"},
    rules=[rule],
)
FASTER = dataclasses.replace(POLICY, retry_statuses=frozenset({502}))


def make_clients() -> tuple[retrysafe.Client, retrysafe.AsyncClient]:
    client = retrysafe.Client(
        base_url="https://api.example.com",
        timeout=httpx.Timeout(5.0, connect=1.0),
        headers={"user-agent": "app"},
        params={"v": 2},
        verify=ssl.create_default_context(),
        http2=False,
        limits=httpx.Limits(max_connections=10),
        follow_redirects=True,
        event_hooks={"request": [print]},
        transport=httpx.MockTransport(handler),
        mounts={"http://internal": httpx.HTTPTransport()},
        policy=POLICY,
        dependency="api",
        idempotency="auto",
    )
    async_client = retrysafe.AsyncClient(
        timeout=None,
        transport=httpx.MockTransport(handler),
        mounts={"http://internal": httpx.AsyncHTTPTransport()},
        policy=POLICY,
    )
    return client, async_client


def as_httpx(client: retrysafe.Client) -> httpx.Client:
    return client


def sync_calls(client: retrysafe.Client) -> int:
    response = client.get(URL, params={"q": "x"}, timeout=2.0, policy=FASTER, dependency="search")
    client.post(URL, json={"amount": 1}, idempotency_key=True)
    client.post(URL, content=b"{}", idempotency_key="order-1", auth=("user", "secret"))
    client.put(URL, data={"a": "b"}, files={"f": b"bytes"}, headers=[("x-a", "b")])
    client.patch(URL, json=[1, 2], idempotency_key=False, follow_redirects=False)
    client.delete(URL, extensions={"trace": "on"}, policy=None)
    client.head(URL, timeout=httpx.Timeout(1.0))
    client.options(URL, cookies={"session": "s"})
    client.request("POST", httpx.URL(URL), json={}, operation="pay-1")
    client.request("GET", URL, auth=None, timeout=(1.0, 2.0, 3.0, 4.0))
    with client.stream("POST", URL, json={}, idempotency_key=True, policy=POLICY) as streamed:
        chunks: Iterator[bytes] = streamed.iter_bytes()
        next(chunks, b"")
    sent = client.send(client.build_request("GET", URL), stream=True, follow_redirects=True)
    sent.close()
    report: CallReport | None = report_of(response)
    try:
        client.get(URL)
    except ApiError as error:
        return error.attempts
    return 0 if report is None else report.attempts


async def async_calls(client: retrysafe.AsyncClient) -> int:
    response = await client.get(URL, params={"q": "x"}, policy=FASTER, dependency="search")
    await client.post(URL, json={"amount": 1}, idempotency_key=True)
    await client.put(URL, content=b"x", timeout=1.0)
    await client.patch(URL, data={"a": "b"}, operation="patch-1")
    await client.delete(URL, auth=("user", "secret"))
    await client.head(URL)
    await client.options(URL)
    await client.request("GET", URL, extensions={})
    async with client.stream("GET", URL, policy=POLICY, dependency="feed") as streamed:
        lines: AsyncIterator[str] = streamed.aiter_lines()
        await anext(lines, "")
    sent = await client.send(client.build_request("GET", URL), stream=True)
    await sent.aclose()
    report = report_of(response)
    return 0 if report is None else report.attempts


def hooks_of_every_shape() -> None:
    """Any one-argument callable is a hook, whatever its parameter is called."""
    events: list[RetryEvent] = []

    def on_event(e: RetryEvent) -> None:
        events.append(e)

    retrysafe.Client(hooks=[on_event, events.append, lambda e: events.append(e)])
    retrysafe.RetryTransport(httpx.HTTPTransport(), hooks=(events.append,))


def middleware_takes_any_collection(app: ASGIApp) -> None:
    IdempotencyMiddleware(
        app,
        MemoryStore(),
        scope=lambda request: "caller",
        required=False,
        methods={"POST", "PUT"},
        release_statuses=[401, 409],
    )
    IdempotencySettings(required=True, methods=("POST",), release_statuses=range(400, 410))
    FakeClock(randoms=(0.5, 0.25))


def simulation_settings_take_any_collection() -> None:
    ContentionSettings(clients=[10, 50], strategies=["none", "full"])
    ContentionSettings(clients=range(10, 30, 10), strategies={"equal"})


def reports_behind_an_sdk_on_an_httpx_fork(sdk_response: httpx2.Response) -> int:
    """openai 3.x types its responses as httpx2's; the one an ``httpx.Client`` it was given
    returns is httpx's, and its report is read the same way."""
    report = retrysafe.report_of(sdk_response)
    return 0 if report is None else report.attempts
