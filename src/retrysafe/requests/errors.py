"""The errors a :class:`~retrysafe.requests.RetryAdapter` raises, in both exception trees.

A final failure raises retrysafe's error for it, re-typed so that it is *also* the
``requests`` exception a requests user already catches. Each class below has the
name of the retrysafe class it subclasses (so ``except retrysafe.ServerError`` and
``repr()`` read as everywhere else) and a requests base:

==========================================  ===========================================
retrysafe error                             also a
==========================================  ===========================================
ClientError, RateLimited, QuotaExhausted,   ``requests.HTTPError`` (as
ServerError                                 ``raise_for_status()`` raises)
TransportError                              ``requests.ConnectionError``; when the last
                                            attempt timed out, ``TransportTimeout``
                                            (a ``TransportError``) is also a
                                            ``requests.Timeout``, and its subclasses
                                            ``TransportReadTimeout`` and
                                            ``TransportConnectTimeout`` also
                                            ``requests.ReadTimeout`` and
                                            ``requests.ConnectTimeout``
DeadlineExceeded                            ``requests.Timeout``
BadResponse                                 ``requests.RequestException``
RetryAfterTooLong, CircuitOpen,             ``requests.exceptions.RetryError`` (what
BudgetExhausted, CooldownActive,            urllib3's ``Retry`` raises when it stops)
PacingDelayed
==========================================  ===========================================

On these, ``response`` is the last ``requests.Response`` (body read), or None, and
``request`` the ``PreparedRequest``; every other field is retrysafe's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import httpx
import requests
from requests.exceptions import RetryError
from requests.structures import CaseInsensitiveDict

import retrysafe.errors as base
from retrysafe.classify import AttemptTimedOut
from retrysafe.foreign_shell import adopt_error
from retrysafe.kept_body import was_cut
from retrysafe.redact import Redactor, hidden_values, redact_url

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
    "TransportConnectTimeout",
    "TransportReadTimeout",
    "TransportTimeout",
    "as_requests_error",
]


class _RequestsError:
    """What the re-typed errors add: requests' ``request`` attribute."""

    request: requests.PreparedRequest | None = None

    def _shareable_state(self) -> dict[str, Any]:
        """The fields a pickled error carries (see ``ApiError._shareable_state``), with
        requests' own response and request, their secrets left behind."""
        state: dict[str, Any] = super()._shareable_state()  # type: ignore[misc]
        if isinstance(state.get("request"), requests.PreparedRequest):
            state["request"] = _shareable_request(state["request"])
        if isinstance(state.get("response"), requests.Response):
            state["response"] = _shareable_response(state["response"])
        return state


def _hidden(headers: Mapping[str, str]) -> CaseInsensitiveDict[str]:
    """``headers`` with the values of secret ones replaced."""
    return CaseInsensitiveDict(dict(hidden_values(headers.items())))


def _shareable_request(request: requests.PreparedRequest) -> requests.PreparedRequest:
    """A copy of ``request`` with its secret headers hidden, its URL redacted and its body
    left out: a pickled error may leave the process, and these are the caller's."""
    shared = request.copy()
    shared.headers = _hidden(request.headers)
    shared.url = redact_url(request.url) if request.url else request.url
    shared.body = None
    # The session's cookies, kept beside the request (requests' own field, unannotated)
    vars(shared)["_cookies"] = requests.cookies.RequestsCookieJar()
    return shared


def _shareable_response(response: requests.Response) -> requests.Response:
    """What requests pickles of ``response`` (its body read), its secret headers (a
    ``Set-Cookie``), cookies and request's secrets left behind."""
    shared = copy.copy(response)
    shared.headers = _hidden(response.headers)
    shared.cookies = requests.cookies.RequestsCookieJar()
    shared.url = redact_url(response.url) if response.url else response.url
    shared.history = [_shareable_response(earlier) for earlier in response.history]
    request = response.request
    redactor = Redactor([])
    if request is not None:
        shared.request = _shareable_request(request)
        if request.url:
            # (the request's secrets, scrubbed from the body if the server echoed them)
            stand_in = httpx.Request(
                request.method or "GET",
                request.url,
                headers=list(request.headers.items()),
                content=request.body if isinstance(request.body, bytes) else None,
            )
            redactor = Redactor.for_request(stand_in)
    if isinstance(shared._content, bytes):
        shared._content = redactor.scrub_bytes(
            shared._content, cut=was_cut(response), at_most=base.PICKLED_BODY_AT_MOST
        )
    return shared


class ClientError(_RequestsError, base.ClientError, requests.HTTPError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.ClientError.__doc__


class RateLimited(_RequestsError, base.RateLimited, requests.HTTPError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.RateLimited.__doc__


class QuotaExhausted(_RequestsError, base.QuotaExhausted, requests.HTTPError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.QuotaExhausted.__doc__


class ServerError(_RequestsError, base.ServerError, requests.HTTPError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.ServerError.__doc__


class TransportError(_RequestsError, base.TransportError, requests.ConnectionError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.TransportError.__doc__


class TransportTimeout(TransportError, requests.Timeout):  # type: ignore[misc]  # as above
    """A ``TransportError`` whose last attempt timed out: also a ``requests.Timeout``."""


class TransportReadTimeout(TransportTimeout, requests.ReadTimeout):  # type: ignore[misc]  # as above
    """A ``TransportTimeout`` whose last attempt's answer did not come in time (a read
    timed out, or the attempt's whole time ran out as the server trickled it): also a
    ``requests.ReadTimeout``, which an ``except`` written for requests' own catches."""


class TransportConnectTimeout(TransportTimeout, requests.ConnectTimeout):  # type: ignore[misc]  # as above
    """A ``TransportTimeout`` whose last attempt timed out connecting (nothing was sent):
    also a ``requests.ConnectTimeout``."""


class DeadlineExceeded(_RequestsError, base.DeadlineExceeded, requests.Timeout):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.DeadlineExceeded.__doc__


class BadResponse(_RequestsError, base.BadResponse, requests.RequestException):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.BadResponse.__doc__


class RetryAfterTooLong(_RequestsError, base.RetryAfterTooLong, RetryError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.RetryAfterTooLong.__doc__


class CircuitOpen(_RequestsError, base.CircuitOpen, RetryError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.CircuitOpen.__doc__


class BudgetExhausted(_RequestsError, base.BudgetExhausted, RetryError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.BudgetExhausted.__doc__


class CooldownActive(_RequestsError, base.CooldownActive, RetryError):  # type: ignore[misc]  # both bases define the fields
    __doc__ = base.CooldownActive.__doc__


class PacingDelayed(_RequestsError, base.PacingDelayed, RetryError):  # type: ignore[misc]  # both bases define the fields
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


def as_requests_error(
    error: base.ApiError,
    *,
    cause: BaseException | None,
    response: requests.Response | None,
    request: requests.PreparedRequest,
) -> base.ApiError:
    """``error`` as the class above that matches it, carrying requests' own objects."""
    kinds = _KINDS
    if type(error) is base.TransportError and isinstance(cause, httpx.TimeoutException):
        kinds = {**_KINDS, base.TransportError: _timeout_kind(cause)}
    adopted: Any = adopt_error(error, kinds)
    adopted.response = response
    adopted.request = request
    return adopted  # type: ignore[no-any-return]


def _timeout_kind(cause: httpx.TimeoutException) -> type[TransportTimeout]:
    """The timeout class for a last attempt that failed with ``cause``: requests' own
    read or connect timeout where requests has one for it (a pool's or a write's, it
    has none)."""
    if isinstance(cause, httpx.ConnectTimeout):
        return TransportConnectTimeout
    if isinstance(cause, (httpx.ReadTimeout, AttemptTimedOut)):
        return TransportReadTimeout
    return TransportTimeout
