"""Cookies that a retried attempt's response set, carried into the attempts after it.

A server may set a cookie on an answer that asks to be tried again: a load balancer's
sticky-session cookie, a session or anti-bot cookie on a 503 or a 429. A retry loop
around httpx's client sends the next attempt with it (the client's jar learned it from
that response), and so does httpx when it follows a redirect. retrysafe retries inside
the transport, where httpx's client never sees that response, so the shell does it: the
next attempt's ``Cookie`` header gets the cookies the response set (by the cookie rules
of the standard library's jar: domain, path, ``Secure``, expiry), in place of any it
sent by the same name, and loses those the response deleted. The cookies the request
carried otherwise (the client's jar, or a ``Cookie`` header given by hand) stay.

Under :class:`retrysafe.Client` the client's jar learns them too, as it learns a final
response's (``ShellSettings.client_cookies``). Under a plain ``httpx.Client`` with the
drop-in transport, the transport cannot reach the client's jar: the attempts of the call
carry them, and the jar keeps only what the final response set. The requests and aiohttp
shells copy the header this sets on their view of the request onto the request they send,
and their session's jar likewise keeps the final response's.

Only a response that is retried and carries ``Set-Cookie`` comes here, so a successful
call pays nothing for it. A cookie that is not ASCII (which httpx cannot send) is left
out, and anything else going wrong here leaves the request as it was: carrying a cookie
never fails a call. Not carried: a cookie set by a hedged copy that lost its race, and,
under the drop-in, a cookie across a redirect (httpx rebuilds each hop's ``Cookie`` from
its client's jar).
"""

from __future__ import annotations

import http.cookiejar
from collections.abc import Callable

import httpx

__all__ = ["carry_cookies"]

#: The host name the jar files a host's own cookie under ("localhost" as
#: "localhost.local"): the jar's own function, which its type stubs leave out.
_EFFECTIVE_HOST: Callable[[object], tuple[str, str]] = http.cookiejar.eff_request_host  # type: ignore[attr-defined]


def carry_cookies(
    request: httpx.Request,
    response: httpx.Response,
    client_cookies: Callable[[], httpx.Cookies | None] | None,
) -> None:
    """Set ``request``'s ``Cookie`` header for its next attempt from the cookies its
    retried ``response`` set; and teach them to the client's jar (``client_cookies()``,
    if the shell serves a retrysafe client still alive)."""
    try:
        lines = [line for line in response.headers.get_list("set-cookie") if line.isascii()]
        if not lines:
            return
        setting = httpx.Response(
            response.status_code,
            headers=[("set-cookie", line) for line in lines],
            request=request,
        )
        # A jar holding what the request sent, for every path of its host, then what the
        # response set, by the jar's rules: a cookie set anew replaces the one sent, one
        # deleted goes, one the rules refuse (another domain) changes nothing.
        jar = httpx.Cookies()
        host = _EFFECTIVE_HOST(httpx.Cookies._CookieCompatRequest(request))[1]
        for name, value in _pairs(request.headers.get_list("cookie")):
            jar.jar.set_cookie(_sent_cookie(name, value, host))
        jar.extract_cookies(setting)
        probe = httpx.Request(request.method, request.url)
        jar.set_cookie_header(probe)
        header = probe.headers.get("cookie")
        if header is None:
            request.headers.pop("Cookie", None)
        else:
            request.headers["Cookie"] = header
        client_jar = client_cookies() if client_cookies is not None else None
        if client_jar is not None:
            client_jar.extract_cookies(setting)
    except Exception:
        pass


def _pairs(headers: list[str]) -> list[tuple[str, str | None]]:
    """The ``name=value`` pairs of a request's ``Cookie`` headers, in order (a part with
    no ``=`` is a name alone)."""
    pairs: list[tuple[str, str | None]] = []
    for header in headers:
        for part in header.split(";"):
            name, equals, value = part.strip().partition("=")
            if name.strip():
                pairs.append((name.strip(), value.strip() if equals else None))
    return pairs


def _sent_cookie(name: str, value: str | None, host: str) -> http.cookiejar.Cookie:
    """A cookie the request sent, as the jar would hold one its host set for every path
    (a host's own cookie, so that one the response sets by that name replaces it)."""
    return http.cookiejar.Cookie(
        version=0,
        name=name,
        value=value,
        port=None,
        port_specified=False,
        domain=host,
        domain_specified=False,
        domain_initial_dot=False,
        path="/",
        path_specified=True,
        secure=False,
        expires=None,
        discard=True,
        comment=None,
        comment_url=None,
        rest={},
    )
