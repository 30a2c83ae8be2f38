"""What an aiohttp exception means to the engine: the httpx exception it matches.

The engine classifies an attempt's failure by how far the request got; aiohttp's
exceptions say it in their own words. :func:`attempt_failure` names each as the httpx
exception the engine knows (a refused connection, a reset, a garbage status line, a
timeout). The original is not kept (not even as ``__cause__``): its message and repr
can hold the URL with its query and the request's headers; its class name is put in
the new message instead.
"""

from __future__ import annotations

import aiohttp
import httpx
from aiohttp.http_exceptions import HttpProcessingError

from retrysafe.classify import AttemptTimedOut
from retrysafe.foreign_shell import in_place_of

__all__ = ["WaitedInThePool", "attempt_failure", "raised_downstream"]


class WaitedInThePool(Exception):
    """The middleware's: an attempt cut while it waited for a free connection of its
    session's connector, the client's own queue (httpx's pool timeout)."""


def raised_downstream(exc: aiohttp.ClientError) -> bool:
    """Whether ``exc`` is a decision made further down the middleware chain about a
    response that came back, not a broken exchange: a ``raise_for_status()``, an inner
    ``RetryMiddleware``'s final error, too many redirects. It goes to the caller as it
    is. (aiohttp's own parse failures are ClientResponseErrors too, raised from an
    ``HttpProcessingError``.)"""
    return isinstance(exc, aiohttp.ClientResponseError) and not isinstance(
        exc.__cause__, HttpProcessingError
    )


def attempt_failure(exc: BaseException) -> Exception:
    """The httpx exception standing for aiohttp's ``exc``."""
    failure = _match(exc)
    return in_place_of(exc, failure)


def _match(exc: BaseException) -> Exception:
    # Messages are fixed: aiohttp's can hold the URL, with its query.
    if isinstance(exc, WaitedInThePool):
        return httpx.PoolTimeout("no connection of the session came free in time")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout("connecting timed out")
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return httpx.ProxyError("the proxy failed")
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unreachable, DNS, TLS
        return httpx.ConnectError("connecting failed")
    if isinstance(exc, aiohttp.ServerTimeoutError):  # one read waited out sock_read
        return httpx.ReadTimeout("the server sent nothing for the read timeout")
    if isinstance(exc, TimeoutError):  # the attempt's whole time (bytes may have trickled)
        return AttemptTimedOut("the response did not arrive within the attempt's time")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError("the server closed the connection without answering")
    if isinstance(exc, (aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)):
        return httpx.ReadError("the connection was reset")
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        # A body cut short; a status line or header aiohttp could not parse.
        return httpx.RemoteProtocolError("the server broke the HTTP exchange")
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.LocalProtocolError("the request cannot be sent as it is")
    if isinstance(exc, aiohttp.ClientConnectionError):
        return httpx.ReadError("the connection failed")
    return httpx.TransportError(f"the request failed ({type(exc).__name__})")
