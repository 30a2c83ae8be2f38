"""The errors a :class:`~retrysafe.aiohttp.RetryMiddleware` raises, in both exception trees.

A final failure raises retrysafe's error for it, re-typed so that it is *also* the
aiohttp exception an aiohttp user already catches (and so that aiohttp's session
passes it through as it is: every one is an ``aiohttp.ClientError``). Each class has
the name of the retrysafe class it subclasses:

==========================================  ===========================================
retrysafe error                             also a
==========================================  ===========================================
ClientError, RateLimited, QuotaExhausted,   ``aiohttp.ClientResponseError`` (as
ServerError                                 ``raise_for_status`` raises)
TransportError                              ``aiohttp.ClientConnectionError``; when the
                                            last attempt timed out, ``TransportTimeout``
                                            is also an ``aiohttp.ServerTimeoutError``
DeadlineExceeded                            ``aiohttp.ServerTimeoutError`` (so also
                                            ``asyncio.TimeoutError``)
BadResponse, RetryAfterTooLong,             ``aiohttp.ClientError``
CircuitOpen, BudgetExhausted,
CooldownActive, PacingDelayed
==========================================  ===========================================

On these, ``response`` is the last ``aiohttp.ClientResponse`` (body read), or None;
``history`` stays retrysafe's (the attempts), not aiohttp's redirect history.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx
import yarl
from multidict import CIMultiDict, CIMultiDictProxy

import retrysafe.errors as base
from retrysafe.foreign_shell import adopt_error
from retrysafe.redact import hidden_values, redact_url

__all__ = [
    "BadResponse",
    "BudgetExhausted",
    "CircuitOpen",
    "ClientError",
    "CooldownActive",
    "DeadlineExceeded",
    "PacingDelayed",
    "QuotaExhausted",
    "RateLimited",
    "RetryAfterTooLong",
    "ServerError",
    "TransportError",
    "TransportTimeout",
    "as_aiohttp_error",
]


class _AiohttpError:
    """retrysafe's one-line message, not aiohttp's ``__str__``; and a pickled copy."""

    def __str__(self) -> str:
        return BaseException.__str__(self)  # type: ignore[arg-type]

    def _shareable_state(self) -> dict[str, Any]:
        """The fields a pickled error carries (see ``ApiError._shareable_state``): aiohttp's
        live response stays behind (it holds the connection and the event loop, and
        pickles no more than they do), its headers and ``request_info`` go as plain,
        picklable copies, the response's secret headers hidden."""
        state: dict[str, Any] = super()._shareable_state()  # type: ignore[misc]
        state["response"] = None
        headers = state.get("headers")
        if headers is not None:
            state["headers"] = CIMultiDict(hidden_values(headers.items()))
        info = state.get("request_info")
        if isinstance(info, aiohttp.RequestInfo):
            # (a CIMultiDict, which pickles, for the read-only proxy, which does not)
            picklable = CIMultiDict(info.headers)
            state["request_info"] = info._replace(headers=picklable)  # type: ignore[arg-type]
        return state


class ClientError(_AiohttpError, base.ClientError, aiohttp.ClientResponseError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.ClientError.__doc__


class RateLimited(_AiohttpError, base.RateLimited, aiohttp.ClientResponseError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.RateLimited.__doc__


class QuotaExhausted(_AiohttpError, base.QuotaExhausted, aiohttp.ClientResponseError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.QuotaExhausted.__doc__


class ServerError(_AiohttpError, base.ServerError, aiohttp.ClientResponseError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.ServerError.__doc__


class TransportError(_AiohttpError, base.TransportError, aiohttp.ClientConnectionError):
    __doc__ = base.TransportError.__doc__


class TransportTimeout(TransportError, aiohttp.ServerTimeoutError):
    """A ``TransportError`` whose last attempt timed out: also ``asyncio.TimeoutError``."""


class DeadlineExceeded(_AiohttpError, base.DeadlineExceeded, aiohttp.ServerTimeoutError):
    __doc__ = base.DeadlineExceeded.__doc__


class BadResponse(_AiohttpError, base.BadResponse, aiohttp.ClientError):
    __doc__ = base.BadResponse.__doc__


class RetryAfterTooLong(_AiohttpError, base.RetryAfterTooLong, aiohttp.ClientError):
    __doc__ = base.RetryAfterTooLong.__doc__


class CircuitOpen(_AiohttpError, base.CircuitOpen, aiohttp.ClientError):
    __doc__ = base.CircuitOpen.__doc__


class BudgetExhausted(_AiohttpError, base.BudgetExhausted, aiohttp.ClientError):
    __doc__ = base.BudgetExhausted.__doc__


class CooldownActive(_AiohttpError, base.CooldownActive, aiohttp.ClientError):
    __doc__ = base.CooldownActive.__doc__


class PacingDelayed(_AiohttpError, base.PacingDelayed, aiohttp.ClientError):
    __doc__ = base.PacingDelayed.__doc__


_KINDS: dict[type[base.ApiError], type[base.ApiError]] = {
    base.ClientError: ClientError,
    base.RateLimited: RateLimited,
    base.QuotaExhausted: QuotaExhausted,
    base.ServerError: ServerError,
    base.TransportError: TransportError,
    base.DeadlineExceeded: DeadlineExceeded,
    base.BadResponse: BadResponse,
    base.RetryAfterTooLong: RetryAfterTooLong,
    base.CircuitOpen: CircuitOpen,
    base.BudgetExhausted: BudgetExhausted,
    base.CooldownActive: CooldownActive,
    base.PacingDelayed: PacingDelayed,
}
_TIMED_OUT_KINDS = {**_KINDS, base.TransportError: TransportTimeout}


def as_aiohttp_error(
    error: base.ApiError,
    *,
    cause: BaseException | None,
    response: aiohttp.ClientResponse | None,
) -> base.ApiError:
    """``error`` as the class above that matches it, carrying aiohttp's response."""
    timed_out = type(error) is base.TransportError and isinstance(cause, httpx.TimeoutException)
    adopted: Any = adopt_error(error, _TIMED_OUT_KINDS if timed_out else _KINDS)
    adopted.response = response
    if isinstance(adopted, aiohttp.ClientResponseError):
        # What aiohttp's own ClientResponseError carries, for handlers written for it.
        adopted.message = error.outcome
        adopted.request_info = (
            _shown(response.request_info) if response is not None else None  # type: ignore[assignment]
        )
        adopted.headers = response.headers if response is not None else None
    return adopted  # type: ignore[no-any-return]


def _shown(info: aiohttp.RequestInfo) -> aiohttp.RequestInfo:
    """``info`` as the error carries it: its secret headers' values hidden and its URLs
    redacted. aiohttp's own ``ClientResponseError`` prints its ``request_info``, and a
    handler written for it may log that; the request's credentials must not go with it.
    """
    headers = CIMultiDict(hidden_values(info.headers.items()))
    return aiohttp.RequestInfo(
        yarl.URL(redact_url(str(info.url)), encoded=True),
        info.method,
        CIMultiDictProxy(headers),
        yarl.URL(redact_url(str(info.real_url)), encoded=True),
    )
