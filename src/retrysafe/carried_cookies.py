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
call pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

__all__ = ["carry_cookies"]


def carry_cookies(
    request: httpx.Request,
    response: httpx.Response,
    client_cookies: Callable[[], httpx.Cookies | None] | None,
) -> None:
    """Set ``request``'s ``Cookie`` header for its next attempt from the cookies its
    retried ``response`` set; and teach them to the client's jar (``client_cookies()``,
    if the shell serves a retrysafe client still alive)."""
    jar = client_cookies() if client_cookies is not None else None
    if jar is not None:
        jar.extract_cookies(response)
    fresh = httpx.Cookies()
    fresh.extract_cookies(response)  # (the response's request is the one sent again)
    probe = httpx.Request(request.method, request.url)
    fresh.set_cookie_header(probe)  # what of them this URL is sent, by the jar's rules
    carried = _pairs(probe.headers.get("cookie", ""))
    kept_by_jar = {cookie.name for cookie in fresh.jar}
    named = {_cookie_name(line) for line in response.headers.get_list("set-cookie")}
    # Replaced: sent again with the value the response set. Deleted (or refused by the
    # jar's rules): named by the response but kept by no jar. A cookie set for another
    # path of this host is neither, and what the request carried by that name stays.
    replaced = {name for name, _ in carried} | (named - kept_by_jar)
    sent = _pairs(request.headers.get("cookie", ""))
    cookies = [pair for pair in sent if pair[0] not in replaced]
    cookies += carried
    if cookies:
        request.headers["Cookie"] = "; ".join(
            name if value is None else f"{name}={value}" for name, value in cookies
        )
    else:
        request.headers.pop("Cookie", None)


def _pairs(header: str) -> list[tuple[str, str | None]]:
    """The ``name=value`` pairs of a ``Cookie`` header, in order (a part with no ``=`` is
    a name alone, kept as it was)."""
    pairs: list[tuple[str, str | None]] = []
    for part in header.split(";"):
        name, equals, value = part.strip().partition("=")
        if name:
            pairs.append((name.strip(), value.strip() if equals else None))
    return pairs


def _cookie_name(set_cookie: str) -> str:
    """The name a ``Set-Cookie`` line sets."""
    return set_cookie.split(";", 1)[0].partition("=")[0].strip()
