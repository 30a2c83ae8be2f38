"""Client and AsyncClient: httpx clients that retry safely and raise errors you can act on.

They are ``httpx.Client`` / ``httpx.AsyncClient`` with every transport wrapped
in a retry shell, plus three per-call arguments::

    with retrysafe.Client(base_url="https://api.example.com") as client:
        client.post("/payments", json=payment, idempotency_key=True)

A success returns the ``httpx.Response`` (body read) with a report in
``response.extensions["retrysafe"]``; a final failure raises the matching
:class:`~retrysafe.ApiError`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import httpx

from retrysafe.clock import Clock
from retrysafe.decisions import CallReport
from retrysafe.engine import IDEMPOTENCY_HEADER
from retrysafe.errors import ApiError
from retrysafe.governor import Governor
from retrysafe.idempotency.journal import Journal, state_after
from retrysafe.observe import EventHook
from retrysafe.policy import RetryPolicy
from retrysafe.transport import OPTIONS_EXTENSION, AsyncRetryTransport, CallOptions, RetryTransport

__all__ = ["AsyncClient", "Client"]


#: Methods that get a key of their own under ``idempotency="auto"``.
_AUTO_KEYED_METHODS = frozenset({"POST", "PATCH"})
_SEND_ARGUMENTS = ("auth", "follow_redirects")


def _check_idempotency_mode(mode: str) -> Literal["off", "auto"]:
    if mode not in ("off", "auto"):
        raise ValueError(
            f"idempotency must be 'off' or 'auto' (a key on every POST and PATCH), got {mode!r}"
        )
    return "auto" if mode == "auto" else "off"


def _with_call_options(
    kwargs: dict[str, Any],
    idempotency_key: str | bool | None,
    policy: RetryPolicy | None,
    dependency: str | None,
    *,
    method: str = "",
    idempotency: str = "off",
) -> dict[str, Any]:
    """httpx request kwargs carrying the key header and the per-call options."""
    if policy is not None and not isinstance(policy, RetryPolicy):
        raise TypeError(f"policy must be a retrysafe.RetryPolicy, got {type(policy).__name__}")
    if idempotency_key is None and idempotency == "auto" and method.upper() in _AUTO_KEYED_METHODS:
        idempotency_key = True
    if idempotency_key is True:
        # One key for the whole call: built once here, so every attempt sends the same one.
        idempotency_key = str(uuid.uuid4())
    if idempotency_key is not None and idempotency_key is not False:
        if not isinstance(idempotency_key, str) or not idempotency_key.strip():
            raise ValueError(
                "idempotency_key must be True (make one) or a non-empty string, "
                f"got {idempotency_key!r}"
            )
        headers = httpx.Headers(kwargs.get("headers"))
        headers[IDEMPOTENCY_HEADER] = idempotency_key
        kwargs["headers"] = headers
    extensions = dict(kwargs.get("extensions") or {})
    extensions[OPTIONS_EXTENSION] = CallOptions(policy=policy, dependency=dependency)
    kwargs["extensions"] = extensions
    return kwargs


def _split_send_arguments(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """httpx ``request()`` kwargs split into ``build_request()`` and ``send()`` ones."""
    send = {name: kwargs.pop(name) for name in _SEND_ARGUMENTS if name in kwargs}
    return kwargs, send


def _begin_operation(
    journal: Journal | None, operation: str, request: httpx.Request, key: str | bool | None
) -> Journal:
    """Record the operation durably and put its (possibly resumed) key on the request."""
    if journal is None:
        raise ValueError("operation= needs a journal: Client(journal=Journal('ops.sqlite3'))")
    if key is not None:
        raise ValueError("operation= keeps its own idempotency key; do not pass idempotency_key")
    entry = journal.begin(operation, request)
    request.headers[IDEMPOTENCY_HEADER] = entry.key
    journal.mark_sent(operation)
    return journal


def _finish_operation(journal: Journal, operation: str, outcome: httpx.Response | ApiError) -> None:
    if isinstance(outcome, ApiError):
        journal.finish(
            operation,
            state=state_after(outcome),
            attempts=outcome.attempts,
            status=outcome.status,
            reason=outcome.reason,
        )
        return
    report = outcome.extensions.get(OPTIONS_EXTENSION)
    attempts = report.attempts if isinstance(report, CallReport) else 1
    journal.finish(
        operation, state="done", attempts=attempts, status=outcome.status_code, reason=None
    )


_Transport = TypeVar("_Transport")
_Shell = TypeVar("_Shell")


def _wrap_transports(
    transport: _Transport,
    mounts: dict[Any, _Transport | None],
    wrap: Callable[[_Transport], _Shell],
) -> tuple[_Shell, dict[Any, _Shell | None]]:
    """Wrap the client's transport and every mounted one (proxies, custom mounts).

    httpx picks a transport per URL from these two; wrapping them all keeps
    httpx's own transport configuration intact.
    """
    wrapped = {
        pattern: None if mounted is None else wrap(mounted) for pattern, mounted in mounts.items()
    }
    return wrap(transport), wrapped


def _raise_if_failed(response: httpx.Response) -> httpx.Response:
    """Raise the call's error if its final response was a failure."""
    report = response.extensions.get(OPTIONS_EXTENSION)
    if isinstance(report, CallReport) and report.error is not None:
        raise report.error
    return response


class Client(httpx.Client):
    """An ``httpx.Client`` whose requests retry per ``policy`` and raise ``ApiError``.

    ``governor`` holds the load protection per dependency (one per client by
    default; pass a shared one to share budgets and breakers across clients).
    Other arguments are as for :class:`~retrysafe.RetryTransport`; every keyword
    argument retrysafe does not know goes to ``httpx.Client``.
    """

    def __init__(
        self,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | None = None,
        governor: Governor | None = None,
        deadline_header: str | None = None,
        idempotency: Literal["off", "auto"] = "off",
        journal: Journal | None = None,
        **httpx_kwargs: Any,
    ) -> None:
        super().__init__(**httpx_kwargs)
        self.idempotency = _check_idempotency_mode(idempotency)
        self.journal = journal
        self.governor = governor if governor is not None else Governor(clock=clock)

        def wrap(transport: httpx.BaseTransport) -> RetryTransport:
            return RetryTransport(
                transport,
                policy=policy,
                clock=clock,
                hooks=hooks,
                dependency=dependency,
                raise_errors=True,
                governor=self.governor,
                deadline_header=deadline_header,
            )

        self._transport, self._mounts = _wrap_transports(self._transport, self._mounts, wrap)

    def request(
        self,
        method: str,
        url: httpx.URL | str,
        *,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send one logical request, retried as the policy allows.

        ``idempotency_key=True`` makes one key for this call (sent on every
        attempt); a string is sent as given. ``policy`` and ``dependency``
        override the client's for this call. ``operation`` names a write kept in
        the client's journal: its key survives a crash, and re-running the same
        operation resumes it with the same key and bytes.
        """
        if operation is None:
            kwargs = _with_call_options(
                kwargs,
                idempotency_key,
                policy,
                dependency,
                method=method,
                idempotency=self.idempotency,
            )
            return super().request(method, url, **kwargs)
        build, send = _split_send_arguments(_with_call_options(kwargs, None, policy, dependency))
        request = self.build_request(method, url, **build)
        journal = _begin_operation(self.journal, operation, request, idempotency_key)
        try:
            response = self.send(request, **send)
        except ApiError as error:
            _finish_operation(journal, operation, error)
            raise
        _finish_operation(journal, operation, response)
        return response

    def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        response = super().send(request, **kwargs)
        try:
            return _raise_if_failed(response)
        except BaseException:
            response.close()
            raise

    def get(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def head(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("HEAD", url, **kwargs)

    def options(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("OPTIONS", url, **kwargs)

    def post(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def patch(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)


class AsyncClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` whose requests retry per ``policy`` and raise ``ApiError``.

    Works on asyncio and trio. Arguments as for :class:`Client`.
    """

    def __init__(
        self,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | None = None,
        governor: Governor | None = None,
        deadline_header: str | None = None,
        idempotency: Literal["off", "auto"] = "off",
        journal: Journal | None = None,
        **httpx_kwargs: Any,
    ) -> None:
        super().__init__(**httpx_kwargs)
        self.idempotency = _check_idempotency_mode(idempotency)
        self.journal = journal
        self.governor = governor if governor is not None else Governor(clock=clock)

        def wrap(transport: httpx.AsyncBaseTransport) -> AsyncRetryTransport:
            return AsyncRetryTransport(
                transport,
                policy=policy,
                clock=clock,
                hooks=hooks,
                dependency=dependency,
                raise_errors=True,
                governor=self.governor,
                deadline_header=deadline_header,
            )

        self._transport, self._mounts = _wrap_transports(self._transport, self._mounts, wrap)

    async def request(
        self,
        method: str,
        url: httpx.URL | str,
        *,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send one logical request, retried as the policy allows (see ``Client.request``).

        The journal is SQLite on local disk: its writes are brief and made inline.
        """
        if operation is None:
            kwargs = _with_call_options(
                kwargs,
                idempotency_key,
                policy,
                dependency,
                method=method,
                idempotency=self.idempotency,
            )
            return await super().request(method, url, **kwargs)
        build, send = _split_send_arguments(_with_call_options(kwargs, None, policy, dependency))
        request = self.build_request(method, url, **build)
        journal = _begin_operation(self.journal, operation, request, idempotency_key)
        try:
            response = await self.send(request, **send)
        except ApiError as error:
            _finish_operation(journal, operation, error)
            raise
        _finish_operation(journal, operation, response)
        return response

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        response = await super().send(request, **kwargs)
        try:
            return _raise_if_failed(response)
        except BaseException:
            await response.aclose()
            raise

    async def get(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("GET", url, **kwargs)

    async def head(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("HEAD", url, **kwargs)

    async def options(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("OPTIONS", url, **kwargs)

    async def post(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("POST", url, **kwargs)

    async def put(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("PUT", url, **kwargs)

    async def patch(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("PATCH", url, **kwargs)

    async def delete(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("DELETE", url, **kwargs)
