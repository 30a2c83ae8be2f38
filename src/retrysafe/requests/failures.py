"""What a requests/urllib3 exception means to the engine: the httpx exception it matches.

The engine classifies an attempt's failure by how far the request got (never
connected, maybe sent, cut in the body); requests wraps urllib3's exceptions, which
wrap http.client's and the socket's. :func:`attempt_failure` digs to the cause and
names it as the httpx exception the engine knows, so a connection refused, a reset,
a garbage status line or a read timeout are judged exactly as on httpx. The
original is not kept (not even as ``__cause__``, which tracebacks print): requests'
and urllib3's messages hold the URL with its query; its class name is put in the new
message instead.
"""

from __future__ import annotations

import http.client
import socket

import httpx
import requests
from requests import exceptions as rex
from urllib3 import exceptions as u3

from retrysafe.classify import AttemptTimedOut
from retrysafe.foreign_shell import in_place_of

__all__ = ["attempt_failure"]


def attempt_failure(exc: Exception, *, expired: bool) -> Exception:
    """The httpx exception standing for ``exc``; ``expired``: the watchdog cut the attempt."""
    failure = _match(exc)
    # (a connect or a wait for a pooled connection that ended after the watchdog's cut,
    # as a busy process's thread can, sent nothing: it stays what it is)
    if expired and not isinstance(failure, (httpx.ConnectTimeout, httpx.PoolTimeout)):
        failure = AttemptTimedOut("the attempt did not finish in its time")
    return in_place_of(exc, failure)


def _root(exc: BaseException) -> BaseException | None:
    """The innermost cause requests and urllib3 wrapped."""
    inner: object = exc.args[0] if exc.args else None
    if isinstance(inner, u3.MaxRetryError):
        inner = inner.reason
    if isinstance(inner, u3.ProtocolError) and len(inner.args) > 1:
        inner = inner.args[1]
    return inner if isinstance(inner, BaseException) else None


def _match(exc: Exception) -> Exception:
    # Messages are fixed: the originals can hold the URL, with its query.
    if isinstance(exc, rex.ConnectTimeout):
        return httpx.ConnectTimeout("connecting timed out")
    if isinstance(exc, rex.ReadTimeout):
        return httpx.ReadTimeout("the server sent nothing for the read timeout")
    if isinstance(exc, rex.ProxyError):
        return httpx.ProxyError("the proxy failed")
    if isinstance(exc, rex.SSLError):
        return httpx.ConnectError("the TLS handshake failed")
    if isinstance(exc, rex.ContentDecodingError):
        return httpx.DecodingError("the body could not be decoded")
    if isinstance(exc, rex.InvalidSchema):
        return httpx.UnsupportedProtocol("the URL's scheme is not supported")
    if isinstance(exc, (rex.InvalidURL, rex.InvalidHeader, rex.URLRequired, rex.MissingSchema)):
        return httpx.LocalProtocolError("the request cannot be sent as it is")
    if isinstance(exc, u3.EmptyPoolError):
        return httpx.PoolTimeout("no connection of the pool came free in time")
    if isinstance(exc, (rex.ConnectionError, rex.ChunkedEncodingError, u3.HTTPError)):
        return _connection_failure(exc)
    return httpx.TransportError(f"the request failed ({type(exc).__name__})")


def _connection_failure(exc: Exception) -> Exception:
    root = _root(exc)
    if isinstance(root, u3.NewConnectionError):  # refused, unreachable, no such name
        return httpx.ConnectError("connecting failed")
    if isinstance(root, (u3.ConnectTimeoutError,)):
        return httpx.ConnectTimeout("connecting timed out")
    if isinstance(root, (u3.ReadTimeoutError, socket.timeout)):
        return httpx.ReadTimeout("the server sent nothing for the read timeout")
    if isinstance(root, (u3.EmptyPoolError, u3.ClosedPoolError)):
        return httpx.PoolTimeout("no connection of the pool came free in time")
    if isinstance(root, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return httpx.ReadError("the connection was reset")
    if isinstance(root, http.client.HTTPException | u3.ProtocolError | u3.IncompleteRead):
        # Closed before an answer, a garbage status line, a body cut short.
        return httpx.RemoteProtocolError("the server broke the HTTP exchange")
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return httpx.RemoteProtocolError("the body ended early")
    return httpx.ReadError("the connection failed")
