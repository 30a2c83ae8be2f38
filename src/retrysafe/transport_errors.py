"""The errors a drop-in transport raises when no response came back and no attempt failed.

:class:`~retrysafe.RetryTransport` and :class:`~retrysafe.AsyncRetryTransport` promise
httpx's own exceptions: a call that got a response returns it, and one whose last
attempt failed re-raises that attempt's httpx exception. A call that ends with neither
(load protection refused it before anything was sent, or its deadline left no time for
a first attempt) has only retrysafe's error to raise. Raised as it is, it escapes code
that catches httpx's exceptions: the openai SDK turns ``httpx.RequestError`` into its
own ``APIConnectionError`` and let ``CircuitOpen`` through to its caller, who had
written ``except openai.APIError``.

So such an error is re-typed here to be *also* an httpx exception, with ``request`` set
as httpx's own are, the way the requests adapter's errors are also requests' own:

==========================================  ==========================================
retrysafe error                             also a
==========================================  ==========================================
CircuitOpen, BudgetExhausted,               ``httpx.TransportError`` (nothing was
CooldownActive, PacingDelayed               sent: retrysafe held the request back)
DeadlineExceeded                            ``httpx.TimeoutException``
==========================================  ==========================================

``except retrysafe.CircuitOpen`` and ``repr()`` read as everywhere else.
(``retrysafe.Client``, which raises retrysafe's errors, and ``raise_errors=True`` keep
them as they are.)
"""

from __future__ import annotations

from typing import Any

import httpx

import retrysafe.errors as base
from retrysafe.foreign_shell import adopt_error

__all__ = [
    "BudgetExhausted",
    "CircuitOpen",
    "CooldownActive",
    "DeadlineExceeded",
    "PacingDelayed",
    "as_httpx_error",
]


class _HttpxError:
    """What the re-typed errors add: a pickled one carries its request without secrets."""

    _request: httpx.Request | None

    def _shareable_state(self) -> dict[str, Any]:
        """The fields a pickled error carries (see ``ApiError._shareable_state``), with
        httpx's request (its ``request``) copied without its secrets."""
        state: dict[str, Any] = super()._shareable_state()  # type: ignore[misc]
        if isinstance(state.get("_request"), httpx.Request):
            state["_request"] = base.shareable_request(state["_request"])
        return state


class CircuitOpen(_HttpxError, base.CircuitOpen, httpx.TransportError):
    __doc__ = base.CircuitOpen.__doc__


class BudgetExhausted(_HttpxError, base.BudgetExhausted, httpx.TransportError):
    __doc__ = base.BudgetExhausted.__doc__


class CooldownActive(_HttpxError, base.CooldownActive, httpx.TransportError):
    __doc__ = base.CooldownActive.__doc__


class PacingDelayed(_HttpxError, base.PacingDelayed, httpx.TransportError):
    __doc__ = base.PacingDelayed.__doc__


class DeadlineExceeded(_HttpxError, base.DeadlineExceeded, httpx.TimeoutException):
    __doc__ = base.DeadlineExceeded.__doc__


_KINDS: dict[type[base.ApiError], type[base.ApiError]] = {
    base.CircuitOpen: CircuitOpen,
    base.BudgetExhausted: BudgetExhausted,
    base.CooldownActive: CooldownActive,
    base.PacingDelayed: PacingDelayed,
    base.DeadlineExceeded: DeadlineExceeded,
}


def as_httpx_error(error: base.ApiError, request: httpx.Request) -> base.ApiError:
    """``error`` as the class above that matches it, its ``request`` the one sent (an
    error of any other class comes back as it is)."""
    adopted: Any = adopt_error(error, _KINDS)
    if adopted is not error:
        adopted._request = request  # (httpx's own field behind its request property)
    return adopted  # type: ignore[no-any-return]
