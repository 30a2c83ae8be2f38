"""Cookies a retried attempt's answer set are sent with the attempts after it.

A retry loop around httpx's client sends its next attempt with the cookies the failed
answer set (the client's jar learned them), as httpx does when it follows a redirect:
a load balancer's sticky cookie on a 503, a session cookie on a 429. retrysafe retries
inside the transport, so its shell carries them itself (``retrysafe.carried_cookies``).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import ClassVar

import httpx
import pytest

import retrysafe
from local_http import AnswersOk, QuietHandler, serving
from retrysafe.carried_cookies import carry_cookies

QUICK = retrysafe.RetryPolicy(backoff_base=0.01, backoff_cap=0.02)


class StickyBalancer(AnswersOk):
    """A 503 that sets ``lb=node7`` to a request without it; a 200 to one with it."""

    cookies_seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        cookie = self.headers.get("Cookie")
        StickyBalancer.cookies_seen.append(cookie)
        if cookie is None or "lb=node7" not in cookie:
            self.send_response(503)
            self.send_header("Set-Cookie", "lb=node7; Path=/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


@pytest.fixture
def balancer() -> Iterator[str]:
    StickyBalancer.cookies_seen = []
    with serving(StickyBalancer) as url:
        yield url


def test_sync_client_sends_the_cookie_a_503_set_and_its_jar_keeps_it(balancer: str) -> None:
    with retrysafe.Client(policy=QUICK, cookies={"user": "ann"}) as client:
        response = client.get(balancer + "/")

        assert response.status_code == 200
        assert StickyBalancer.cookies_seen == ["user=ann", "user=ann; lb=node7"]
        assert dict(client.cookies) == {"user": "ann", "lb": "node7"}
        # The next call starts with it, from the jar, as after any answer that set it.
        client.get(balancer + "/")
        assert StickyBalancer.cookies_seen[-1] is not None
        assert "lb=node7" in StickyBalancer.cookies_seen[-1]
        assert len(StickyBalancer.cookies_seen) == 3


def test_async_client_sends_the_cookie_a_503_set_and_its_jar_keeps_it(balancer: str) -> None:
    async def call() -> tuple[int, dict[str, str]]:
        async with retrysafe.AsyncClient(policy=QUICK) as client:
            response = await client.get(balancer + "/")
            return response.status_code, dict(client.cookies)

    status, jar = asyncio.run(call())

    assert status == 200
    assert StickyBalancer.cookies_seen == [None, "lb=node7"]
    assert jar == {"lb": "node7"}


def test_drop_in_transport_carries_it_within_the_call_only(balancer: str) -> None:
    # The drop-in cannot reach httpx's client's jar: the call's attempts carry the
    # cookie, and the jar keeps only what the final answer set (nothing here).
    with httpx.Client(transport=retrysafe.RetryTransport(policy=QUICK)) as client:
        response = client.get(balancer + "/")

        assert response.status_code == 200
        assert StickyBalancer.cookies_seen == [None, "lb=node7"]
        assert dict(client.cookies) == {}


def test_a_client_whose_cookies_were_set_anew_learns_into_the_new_jar(balancer: str) -> None:
    with retrysafe.Client(policy=QUICK) as client:
        client.cookies = httpx.Cookies({"user": "bo"})
        client.get(balancer + "/")

        assert dict(client.cookies) == {"user": "bo", "lb": "node7"}


def test_a_gone_client_leaves_its_shells_without_a_jar() -> None:
    client = retrysafe.Client()
    jar = client._transport.settings.client_cookies  # type: ignore[attr-defined]
    assert jar is not None
    assert jar() is client.cookies
    del client
    gc.collect()
    assert jar() is None


# -- the header the next attempt carries ---------------------------------------------


def _answer(request: httpx.Request, *set_cookies: str) -> httpx.Response:
    return httpx.Response(
        503, headers=[("Set-Cookie", line) for line in set_cookies], request=request
    )


#: (URL, the Cookie header sent, the answer's Set-Cookie lines, the Cookie header the next
#: attempt carries, None for none), by the standard library jar's rules.
CARRIED = {
    "set again, replaces the one sent; the others stay (longest path first)": (
        "https://api.example.com/v1/x",
        "a=1; lb=old; b",
        ("lb=new; Path=/", "c=3"),
        "c=3; a=1; lb=new; b",
    ),
    "deleted, not sent again": (
        "https://api.example.com/x",
        "a=1; lb=old",
        ("lb=; Max-Age=0; Path=/",),
        "a=1",
    ),
    "the only one deleted, no header": (
        "https://api.example.com/x",
        "lb=old",
        ("lb=gone; Expires=Thu, 01 Jan 1970 00:00:00 GMT",),
        None,
    ),
    "another path, or Secure over http: kept, not sent here": (
        "http://api.example.com/v1/x",
        "lb=old",
        ("lb=new; Path=/admin", "s=1; Secure"),
        "lb=old",
    ),
    "another domain: refused, the one sent by that name stays": (
        "https://api.example.com/x",
        "session=abc",
        ("session=x; Domain=evil.test",),
        "session=abc",
    ),
    "deleted for another path: the one sent stays": (
        "https://api.example.com/x",
        "session=abc",
        ("session=; Max-Age=0; Path=/admin",),
        "session=abc",
    ),
    "a host without a dot, as any other": (
        "http://localhost:8080/x",
        "lb=old",
        ("lb=new; Path=/",),
        "lb=new",
    ),
    "none sent before": ("https://api.example.com/x", None, ("lb=node7",), "lb=node7"),
}


@pytest.mark.parametrize(("url", "sent", "set_cookies", "carried"), CARRIED.values(), ids=CARRIED)
def test_the_next_attempt_carries(
    url: str, sent: str | None, set_cookies: tuple[str, ...], carried: str | None
) -> None:
    request = httpx.Request("GET", url, headers={} if sent is None else {"Cookie": sent})

    carry_cookies(request, _answer(request, *set_cookies), None)

    assert request.headers.get("Cookie") == carried


def test_two_cookie_headers_are_read_as_one_list() -> None:
    sent = [("Cookie", "a=1"), ("Cookie", "b=2")]
    request = httpx.Request("GET", "https://api.example.com/x", headers=sent)

    carry_cookies(request, _answer(request, "lb=node7; Path=/"), None)

    assert request.headers.get_list("cookie") == ["a=1; b=2; lb=node7"]


def test_the_clients_jar_learns_what_the_answer_set() -> None:
    jar = httpx.Cookies({"user": "ann"})
    request = httpx.Request("GET", "https://api.example.com/x")

    carry_cookies(request, _answer(request, "lb=node7"), lambda: jar)

    assert dict(jar) == {"user": "ann", "lb": "node7"}
    assert request.headers["Cookie"] == "lb=node7"


def test_an_answer_that_is_not_retried_is_left_to_httpx(balancer: str) -> None:
    # A 400 is final: httpx's client reads its cookies as it reads any answer's.
    class Refuses(QuietHandler):
        def do_GET(self) -> None:
            self.send_response(400)
            self.send_header("Set-Cookie", "seen=1")
            self.send_header("Content-Length", "0")
            self.end_headers()

    with serving(Refuses) as url, retrysafe.Client(policy=QUICK) as client:
        with pytest.raises(retrysafe.ClientError):
            client.get(url + "/")
        assert dict(client.cookies) == {"seen": "1"}


def test_requests_adapter_sends_it_with_the_next_attempt(balancer: str) -> None:
    requests = pytest.importorskip("requests")
    from retrysafe.requests import RetryAdapter

    with requests.Session() as session:
        session.mount("http://", RetryAdapter(policy=QUICK))
        session.cookies.set("user", "ann")
        response = session.get(balancer + "/", timeout=5)

        assert response.status_code == 200
        assert StickyBalancer.cookies_seen == ["user=ann", "user=ann; lb=node7"]


def test_aiohttp_middleware_sends_it_with_the_next_attempt(balancer: str) -> None:
    aiohttp = pytest.importorskip("aiohttp")
    from retrysafe.aiohttp import RetryMiddleware

    async def call() -> int:
        middleware = RetryMiddleware(policy=QUICK)
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as session,
            session.get(balancer + "/") as response,
        ):
            return int(response.status)

    assert asyncio.run(call()) == 200
    assert StickyBalancer.cookies_seen == [None, "lb=node7"]


class SetsALatin1Cookie(AnswersOk):
    """A 503 setting a cookie with a byte that is not ASCII (and a session cookie), then
    a 200."""

    calls: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        SetsALatin1Cookie.calls.append(self.headers.get("Cookie"))
        if len(SetsALatin1Cookie.calls) == 1:
            self.send_response(503)
            self.send_header("Set-Cookie", "sid=SECRET-SESSION-42; Path=/")
            self._headers_buffer.append(b"Set-Cookie: lb=n\xe9ud7; Path=/\r\n")  # type: ignore[attr-defined]
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


def test_a_cookie_httpx_cannot_send_is_left_out_and_the_call_goes_on() -> None:
    SetsALatin1Cookie.calls = []
    with serving(SetsALatin1Cookie) as url, retrysafe.Client(policy=QUICK) as client:
        assert client.get(url + "/").status_code == 200
        assert SetsALatin1Cookie.calls == [None, "sid=SECRET-SESSION-42"]
        assert dict(client.cookies) == {"sid": "SECRET-SESSION-42"}
        assert client.get(url + "/").status_code == 200  # (nothing the jar cannot send)


def test_a_carry_that_fails_leaves_the_request_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    request = httpx.Request("GET", "https://api.example.com/x", headers={"Cookie": "a=1"})

    def refuse(self: httpx.Cookies, response: httpx.Response) -> None:
        raise ValueError("unreadable")

    monkeypatch.setattr(httpx.Cookies, "extract_cookies", refuse)
    carry_cookies(request, _answer(request, "lb=node7"), None)

    assert request.headers["Cookie"] == "a=1"


def test_a_client_jar_that_fails_still_lets_the_next_attempt_carry_them() -> None:
    request = httpx.Request("GET", "https://api.example.com/x", headers={"Cookie": "a=1"})

    def broken_jar() -> httpx.Cookies:
        raise RuntimeError("no jar")

    carry_cookies(request, _answer(request, "lb=node7"), broken_jar)

    assert request.headers["Cookie"] == "a=1; lb=node7"
