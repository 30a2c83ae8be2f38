"""Client and AsyncClient: httpx clients that retry safely and raise errors you can act on.

They are ``httpx.Client`` / ``httpx.AsyncClient`` with every transport wrapped
in a retry shell, httpx's own typed signatures, and per-call arguments of
retrysafe's own (``idempotency_key``, ``policy``, ``dependency``, ``operation``)::

    with retrysafe.Client(base_url="https://api.example.com") as client:
        client.post("/payments", json=payment, idempotency_key=True)

A success returns the ``httpx.Response`` (body read, unless streamed) whose
report :func:`report_of` returns; a final failure raises the matching
:class:`~retrysafe.ApiError`.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import httpx

# httpx's type aliases name these by string; importing them lets typing.get_type_hints
# resolve the signatures below.
from httpx import URL, Auth, Cookies, Headers, Proxy, QueryParams, Request, Timeout  # noqa: F401
from httpx._client import USE_CLIENT_DEFAULT, UseClientDefault
from httpx._config import DEFAULT_LIMITS, DEFAULT_MAX_REDIRECTS, DEFAULT_TIMEOUT_CONFIG
from httpx._types import (
    AuthTypes,
    CertTypes,
    CookieTypes,
    HeaderTypes,
    ProxyTypes,
    QueryParamTypes,
    RequestContent,
    RequestData,
    RequestExtensions,
    RequestFiles,
    TimeoutTypes,
)

from retrysafe.async_client import AsyncClient
from retrysafe.call_options import OPTIONS_EXTENSION
from retrysafe.client_options import (
    READ_OPTIONS,
    STREAMED_OPTIONS,
    IdempotencyMode,
    add_auto_key,
    begin_operation,
    check_idempotency_mode,
    check_journal,
    check_typed_headers,
    check_typed_url,
    finish_operation,
    jar_of,
    mark_stream,
    report_of,
    scrub_refused_url,
    upload_headers,
    warn_per_request_cookies,
    with_call_options,
    wrap_transports,
)
from retrysafe.clock import Clock
from retrysafe.decisions import CallReport
from retrysafe.errors import ApiError
from retrysafe.governor import Governor
from retrysafe.idempotency.journal import Journal
from retrysafe.observe import EventHook
from retrysafe.policy import RetryPolicy
from retrysafe.redact import unshown_value
from retrysafe.request_facts import KEY_SENT_BEFORE_EXTENSION, DependencyNamer
from retrysafe.transport import RetryTransport

__all__ = ["AsyncClient", "Client", "report_of"]


class Client(httpx.Client):
    """An ``httpx.Client`` whose requests retry per ``policy`` and raise ``ApiError``.

    ``governor`` holds the load protection per dependency (one per client by
    default; pass a shared one to share budgets and breakers across clients).
    ``idempotency="auto"`` gives every POST and PATCH without a key one of its own;
    ``journal`` keeps named operations (``request(..., operation=...)``).
    Other retrysafe arguments are as for :class:`~retrysafe.RetryTransport`;
    the rest are ``httpx.Client``'s, with its defaults.
    """

    def __init__(
        self,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | DependencyNamer | None = None,
        governor: Governor | None = None,
        deadline_header: str | None = None,
        idempotency: IdempotencyMode = "off",
        journal: Journal | None = None,
        auth: AuthTypes | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        verify: ssl.SSLContext | str | bool = True,
        cert: CertTypes | None = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        proxy: ProxyTypes | None = None,
        mounts: Mapping[str, httpx.BaseTransport | None] | None = None,
        timeout: TimeoutTypes = DEFAULT_TIMEOUT_CONFIG,
        follow_redirects: bool = False,
        limits: httpx.Limits = DEFAULT_LIMITS,
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
        event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
        base_url: httpx.URL | str = "",
        transport: httpx.BaseTransport | None = None,
        default_encoding: str | Callable[[bytes], str] = "utf-8",
    ) -> None:
        check_typed_headers(headers)  # (a value httpx cannot send, refused unshown)
        super().__init__(
            auth=auth,
            params=params,
            headers=headers,
            cookies=cookies,
            verify=verify,
            cert=cert,
            trust_env=trust_env,
            http1=http1,
            http2=http2,
            proxy=proxy,
            mounts=mounts,
            timeout=timeout,
            follow_redirects=follow_redirects,
            limits=limits,
            max_redirects=max_redirects,
            event_hooks=event_hooks,
            base_url=base_url,
            transport=transport,
            default_encoding=default_encoding,
        )
        self.idempotency = check_idempotency_mode(idempotency)
        self.journal = check_journal(journal)
        self.governor = governor if governor is not None else Governor(clock=clock)

        client_cookies = jar_of(self)

        def wrap(transport: httpx.BaseTransport) -> RetryTransport:
            shell = RetryTransport(
                transport,
                policy=policy,
                clock=clock,
                hooks=hooks,
                dependency=dependency,
                raise_errors=True,
                governor=self.governor,
                deadline_header=deadline_header,
            )
            # (the client's jar learns cookies its retried attempts' answers set; a final
            # answer becomes the client's error, which carries its body)
            shell.settings = shell.settings._replace(
                client_cookies=client_cookies, returns_answers=False
            )
            return shell

        self._transport, self._mounts = wrap_transports(self._transport, self._mounts, wrap)

    def request(
        self,
        method: str,
        url: httpx.URL | str,
        *,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
    ) -> httpx.Response:
        """Send one logical request, retried as the policy allows.

        ``idempotency_key=True`` makes one key for this call (sent on every
        attempt); a string is sent as given. ``policy`` and ``dependency``
        override the client's for this call. ``operation`` names a write kept in
        the client's journal: its key survives a crash, and re-running the same
        operation resumes it with the same key and bytes.
        """
        if not (
            idempotency_key is None and policy is None and dependency is None and operation is None
        ):  # (the usual call has nothing to add: not even a function call, on every call)
            headers, extensions = with_call_options(
                headers,
                extensions,
                # An operation's key comes from the journal (begin_operation checks none is
                # given).
                idempotency_key=idempotency_key if operation is None else None,
                policy=policy,
                dependency=dependency,
            )
        if cookies is not None:
            warn_per_request_cookies()
        if files:  # (as httpx: no files, no multipart body)
            headers = upload_headers(headers, operation)
        try:
            request = self.build_request(
                method,
                url,
                content=content,
                data=data,
                files=files,
                json=json,
                params=params,
                headers=headers,
                cookies=cookies,
                timeout=timeout,
                extensions=extensions,
            )
        except httpx.InvalidURL as refused:
            scrub_refused_url(refused, url)
            raise
        except UnicodeEncodeError as refused:
            raise unshown_value(refused) from None
        if operation is None:
            # (built and sent here, as httpx's own request() does: one call level fewer)
            return self.send(request, auth=auth, follow_redirects=follow_redirects)
        journal = begin_operation(self.journal, operation, request, idempotency_key)
        try:
            response = self.send(request, auth=auth, follow_redirects=follow_redirects)
        except ApiError as error:
            finish_operation(journal, operation, error)
            raise
        finally:
            # (the resumed run's mark is for this call only, not a later send of the request)
            request.extensions.pop(KEY_SENT_BEFORE_EXTENSION, None)
        finish_operation(journal, operation, response)
        return response

    @contextmanager
    def stream(
        self,
        method: str,
        url: httpx.URL | str,
        *,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
    ) -> Iterator[httpx.Response]:
        """Like ``request()``, but the body is left for the caller to read.

        Attempts are retried until a response's headers are judged final; the
        response is then yielded unread.
        """
        headers, extensions = with_call_options(
            headers,
            extensions,
            idempotency_key=idempotency_key,
            policy=policy,
            dependency=dependency,
        )
        if files:  # (as httpx: no files, no multipart body)
            headers = upload_headers(headers, None)
        check_typed_url(url)  # (httpx's stream() builds the request: see request())
        check_typed_headers(headers)
        with super().stream(
            method,
            url,
            content=content,
            data=data,
            files=files,
            json=json,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
        ) as response:
            yield response

    def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """httpx's ``send``; raises the call's ``ApiError`` if it failed for good."""
        if self.idempotency == "auto":
            add_auto_key(request)
        extensions = request.extensions
        if OPTIONS_EXTENSION in extensions:
            mark_stream(request, stream)  # options of the call's own
        else:  # the usual call (inline: every call comes through here)
            extensions[OPTIONS_EXTENSION] = STREAMED_OPTIONS if stream else READ_OPTIONS
        response = super().send(
            request, stream=stream, auth=auth, follow_redirects=follow_redirects
        )
        # The call's error, if it failed for good with a response (its report's, read
        # here as report_of does, without its checks: every call comes through here).
        report = response.extensions.get(OPTIONS_EXTENSION)
        if type(report) is CallReport and report.error is not None:
            response.close()
            raise report.error
        return response

    def get(
        self,
        url: httpx.URL | str,
        *,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
    ) -> httpx.Response:
        """Send a ``GET`` request (see ``request()``)."""
        return self.request(
            "GET",
            url,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
            idempotency_key=idempotency_key,
            policy=policy,
            dependency=dependency,
            operation=operation,
        )

    def options(
        self,
        url: httpx.URL | str,
        *,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
    ) -> httpx.Response:
        """Send a ``OPTIONS`` request (see ``request()``)."""
        return self.request(
            "OPTIONS",
            url,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
            idempotency_key=idempotency_key,
            policy=policy,
            dependency=dependency,
            operation=operation,
        )

    def head(
        self,
        url: httpx.URL | str,
        *,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
    ) -> httpx.Response:
        """Send a ``HEAD`` request (see ``request()``)."""
        return self.request(
            "HEAD",
            url,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
            idempotency_key=idempotency_key,
            policy=policy,
            dependency=dependency,
            operation=operation,
        )

    def post(
        self,
        url: httpx.URL | str,
        *,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
    ) -> httpx.Response:
        """Send a ``POST`` request (see ``request()``)."""
        return self.request(
            "POST",
            url,
            content=content,
            data=data,
            files=files,
            json=json,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
            idempotency_key=idempotency_key,
            policy=policy,
            dependency=dependency,
            operation=operation,
        )

    def put(
        self,
        url: httpx.URL | str,
        *,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
    ) -> httpx.Response:
        """Send a ``PUT`` request (see ``request()``)."""
        return self.request(
            "PUT",
            url,
            content=content,
            data=data,
            files=files,
            json=json,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
            idempotency_key=idempotency_key,
            policy=policy,
            dependency=dependency,
            operation=operation,
        )

    def patch(
        self,
        url: httpx.URL | str,
        *,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
    ) -> httpx.Response:
        """Send a ``PATCH`` request (see ``request()``)."""
        return self.request(
            "PATCH",
            url,
            content=content,
            data=data,
            files=files,
            json=json,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
            idempotency_key=idempotency_key,
            policy=policy,
            dependency=dependency,
            operation=operation,
        )

    def delete(
        self,
        url: httpx.URL | str,
        *,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
        idempotency_key: str | bool | None = None,
        policy: RetryPolicy | None = None,
        dependency: str | None = None,
        operation: str | None = None,
    ) -> httpx.Response:
        """Send a ``DELETE`` request (see ``request()``)."""
        return self.request(
            "DELETE",
            url,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
            idempotency_key=idempotency_key,
            policy=policy,
            dependency=dependency,
            operation=operation,
        )
