"""RetryTransport and AsyncRetryTransport: the I/O shells around the engine.

They wrap any httpx transport. Per request they make one
:class:`~retrysafe.drive.Drive` (the engine plus the governor, effects and
contexts) and then only send attempts, read bodies and sleep (each holds a
send loop that does this: send_loop.py, async_send_loop.py). The two differ in
nothing else; there is no retry logic here.

Drop-in use keeps httpx's behaviour: the final response is returned whatever
its status, the body of a success reaches httpx unbuffered (so streaming works),
and a final transport failure re-raises httpx's own exception::

    client = httpx.Client(transport=retrysafe.RetryTransport())
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import NoReturn, TypeVar

import httpx

from retrysafe.async_send_loop import AsyncSendLoop
from retrysafe.call_options import OPTIONS_EXTENSION, CallOptions
from retrysafe.clock import Clock
from retrysafe.governor import Governor
from retrysafe.observe import EventHook
from retrysafe.policy import RetryPolicy
from retrysafe.redact import redact_httpx_logs
from retrysafe.request_facts import DependencyNamer
from retrysafe.send_loop import AsyncSender, Sender, SendLoop
from retrysafe.shell_settings import ShellSettings

__all__ = ["OPTIONS_EXTENSION", "AsyncRetryTransport", "CallOptions", "RetryTransport"]

_SyncShell = TypeVar("_SyncShell", bound="RetryTransport")
_AsyncShell = TypeVar("_AsyncShell", bound="AsyncRetryTransport")


def _not_a_transport(given: object, *, sync: bool) -> str:
    """The message for a ``transport=`` that cannot send a request the way its shell does."""
    if sync:
        needs, example, other = "handle_request()", "httpx.HTTPTransport()", "handle_async_request"
    else:
        needs, example, other = (
            "handle_async_request()",
            "httpx.AsyncHTTPTransport()",
            "handle_request",
        )
    if _from_httpx2(given):
        return (
            f"transport must be an httpx transport, not httpx2's {type(given).__name__}: "
            + _httpx_only(sync=sync)
        )
    kind = "an async" if sync else "a sync"
    hint = f" ({kind} transport: it has {other}() instead)" if hasattr(given, other) else ""
    return (
        f"transport must be an httpx transport with {needs}, e.g. {example}; "
        f"got {type(given).__name__}{hint}"
    )


def _httpx_only(*, sync: bool) -> str:
    """What a user of the openai SDK 3.x, which is built on httpx2 (a fork of httpx), is
    told when an httpx2 client or transport meets retrysafe, which runs on httpx."""
    if sync:
        sdk, client, shell = "OpenAI", "httpx.Client", "RetryTransport"
    else:
        sdk, client, shell = "AsyncOpenAI", "httpx.AsyncClient", "AsyncRetryTransport"
    own = "retrysafe.Client()" if sync else "retrysafe.AsyncClient()"
    return (
        "retrysafe runs on httpx, not httpx2 (which the openai SDK 3.x uses by default): give "
        f"the SDK an httpx client, e.g. openai.{sdk}(http_client={client}("
        f"transport=retrysafe.{shell}())) or http_client={own} "
        "(see retrysafe's docs/clients.md)"
    )


def _from_httpx2(given: object) -> bool:
    """Whether ``given`` (a transport, a request) is httpx2's: its class or one it derives
    from is defined there (the openai SDK's own transports derive from httpx2's)."""
    return any(
        kind.__module__.partition(".")[0] in ("httpx2", "httpcore2") for kind in type(given).__mro__
    )


def _not_an_httpx_request(request: object, *, sync: bool) -> TypeError:
    """The error for a request that is not an ``httpx.Request`` (an httpx2 client's)."""
    kind = f"{type(request).__module__}.{type(request).__qualname__}"
    if _from_httpx2(request):
        return TypeError(
            f"a retrysafe transport sends httpx requests, not {kind}: {_httpx_only(sync=sync)}"
        )
    return TypeError(f"a retrysafe transport sends httpx.Request objects, not {kind}")


class _Shell:
    """What both shells expose of the send loop they hand each request to."""

    _loop: SendLoop | AsyncSendLoop

    @property
    def settings(self) -> ShellSettings:
        """Everything this transport was configured with (one frozen value)."""
        return self._loop.settings

    @settings.setter
    def settings(self, settings: ShellSettings) -> None:
        self._loop.settings = settings

    @property
    def policy(self) -> RetryPolicy:
        """The default policy of this transport's calls."""
        return self.settings.policy

    @property
    def governor(self) -> Governor:
        """The load protection this transport's calls share."""
        return self.settings.governor


class RetryTransport(_Shell, httpx.BaseTransport):
    """Retries requests on any sync httpx transport, per the policy.

    Args:
        transport: the transport that sends each attempt (default ``httpx.HTTPTransport()``).
        policy: how to retry; a request may override it via ``CallOptions``.
        clock: time, sleep and randomness (default the system clock).
        hooks: called with every :class:`~retrysafe.RetryEvent`.
        dependency: the name calls are grouped under for load protection: a string, or a
            callable naming each request (e.g. ``dependency_by_path(1)``); default each
            URL's origin.
        raise_errors: raise :class:`~retrysafe.ApiError` instead of httpx's exceptions when
            no response came back (``retrysafe.Client`` sets this). Without it, a call
            refused before anything was sent raises retrysafe's error re-typed as an httpx
            exception too (:mod:`retrysafe.transport_errors`).
        governor: the load protection (retry budget, circuit breaker, cooldowns) per
            dependency; default a new ``Governor()``. Share one to share the state;
            ``Governor(GovernorSettings.off())`` switches it off.
        deadline_header: if set, each attempt carries this header with the seconds the
            server has to answer (e.g. ``"Request-Timeout"``), so nested services can
            share one deadline (see ``retrysafe.DeadlineMiddleware``).

    On httpx's own ``HTTPTransport`` every byte of an attempt, from connect to the
    end of its body, is bounded by the attempt's time (see
    :mod:`retrysafe.attempt_deadline`); over HTTP/2 a timed-out attempt cancels only
    its own stream.
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | DependencyNamer | None = None,
        raise_errors: bool = False,
        governor: Governor | None = None,
        deadline_header: str | None = None,
    ) -> None:
        settings = ShellSettings.build(
            policy=policy,
            clock=clock,
            governor=governor,
            hooks=hooks,
            dependency=dependency,
            raise_errors=raise_errors,
            deadline_header=deadline_header,
        )
        if transport is None:
            transport = httpx.HTTPTransport()
        elif not callable(getattr(transport, "handle_request", None)) or _from_httpx2(transport):
            raise TypeError(_not_a_transport(transport, sync=True))
        self._loop: SendLoop = SendLoop(settings, transport)
        redact_httpx_logs()

    @property
    def transport(self) -> Sender:
        """The transport that sends each attempt (set it to send through another)."""
        return self._loop.transport

    @transport.setter
    def transport(self, transport: Sender) -> None:
        self._loop = SendLoop(self.settings, transport)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(request, httpx.Request):
            raise _not_an_httpx_request(request, sync=True)  # (an httpx2 client's)
        return self._loop.send(request)

    async def handle_async_request(self, request: httpx.Request) -> NoReturn:
        """Not for an ``httpx.AsyncClient``: says which transport is (without it, the
        client failed with an ``AttributeError`` naming this method)."""
        raise TypeError(
            "retrysafe.RetryTransport is for httpx.Client; give an httpx.AsyncClient "
            "retrysafe.AsyncRetryTransport (the same arguments)"
        )

    def close(self) -> None:
        self.transport.close()

    def __enter__(self: _SyncShell) -> _SyncShell:
        # httpx's client enters its transport as it is entered; the one wrapped here is
        # entered too (a custom transport may set itself up there).
        enter = getattr(self.transport, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        leave = getattr(self.transport, "__exit__", None)
        if leave is not None:
            leave(exc_type, exc_value, traceback)  # (httpx's own close as they leave)
        else:
            self.transport.close()

    def __repr__(self) -> str:
        return f"RetryTransport({self.transport!r}, policy={self.policy!r})"


class AsyncRetryTransport(_Shell, httpx.AsyncBaseTransport):
    """Retries requests on any async httpx transport, on asyncio or trio.

    Same arguments as :class:`RetryTransport`; the default transport is
    ``httpx.AsyncHTTPTransport()``. Each attempt (headers, and the body when the
    call does not stream) ends at the attempt's timeout (plus a small grace, see
    ``attempt_plan.hard_end_after``): on httpx's own transport its network reads are bounded (over
    HTTP/2 only the attempt's own stream ends); any other transport runs under a
    time limit.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value, safe as default
        clock: Clock | None = None,
        hooks: Sequence[EventHook] = (),
        dependency: str | DependencyNamer | None = None,
        raise_errors: bool = False,
        governor: Governor | None = None,
        deadline_header: str | None = None,
    ) -> None:
        settings = ShellSettings.build(
            policy=policy,
            clock=clock,
            governor=governor,
            hooks=hooks,
            dependency=dependency,
            raise_errors=raise_errors,
            deadline_header=deadline_header,
        )
        if transport is None:
            transport = httpx.AsyncHTTPTransport()
        elif not callable(getattr(transport, "handle_async_request", None)) or _from_httpx2(
            transport
        ):
            raise TypeError(_not_a_transport(transport, sync=False))
        self._loop: AsyncSendLoop = AsyncSendLoop(settings, transport)
        redact_httpx_logs()

    @property
    def transport(self) -> AsyncSender:
        """The transport that sends each attempt (set it to send through another)."""
        return self._loop.transport

    @transport.setter
    def transport(self, transport: AsyncSender) -> None:
        self._loop = AsyncSendLoop(self.settings, transport)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(request, httpx.Request):
            raise _not_an_httpx_request(request, sync=False)  # (an httpx2 client's)
        return await self._loop.send(request)

    def handle_request(self, request: httpx.Request) -> NoReturn:
        """Not for an ``httpx.Client``: says which transport is (as
        :meth:`RetryTransport.handle_async_request`)."""
        raise TypeError(
            "retrysafe.AsyncRetryTransport is for httpx.AsyncClient; give an httpx.Client "
            "retrysafe.RetryTransport (the same arguments)"
        )

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self: _AsyncShell) -> _AsyncShell:
        # (as RetryTransport.__enter__)
        enter = getattr(self.transport, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        leave = getattr(self.transport, "__aexit__", None)
        if leave is not None:
            await leave(exc_type, exc_value, traceback)
        else:
            await self.transport.aclose()

    def __repr__(self) -> str:
        return f"AsyncRetryTransport({self.transport!r}, policy={self.policy!r})"
