"""What the shells for other HTTP clients (requests, aiohttp) share around the engine.

The engine and :class:`~retrysafe.drive.Drive` read requests and responses as httpx
values (classification rules take an ``httpx.Response``). A shell for another client
hands them a *view*: an ``httpx.Request`` or ``httpx.Response`` holding the method,
URL, headers and (once read) body of the real one, and nothing else; the view is never
sent. Building one costs a few microseconds, against hundreds per call in the
clients themselves (``benchmarks/client_overhead.py`` prints the total).

Also here: the redirect trail that lets every hop of a redirect chain followed by the
other client share one deadline and one retry allowance (as httpx's hops do through
the request's extensions), and :func:`adopt_error`, which re-types a retrysafe error
so that it also belongs to the other client's exception tree.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import urldefrag

import httpx

from retrysafe.drive import OPTIONS_EXTENSION, CallOptions
from retrysafe.errors import ApiError
from retrysafe.policy import RetryPolicy

__all__ = [
    "RedirectTrail",
    "adopt_error",
    "request_view",
    "response_view",
]

#: Where Drive leaves a redirect chain for the next hop (see retrysafe.drive).
_CHAIN_EXTENSION = "retrysafe.chain"


class _OneShotBody(httpx.SyncByteStream):
    """Marks a view whose real body cannot be sent again (a generator, a file being read)."""

    def __iter__(self) -> Iterator[bytes]:
        raise RuntimeError("a request view is never sent")  # pragma: no cover - never sent


class _UnreadBody(httpx.SyncByteStream):
    """The body of a response view whose real body has not been read (yet)."""

    def __iter__(self) -> Iterator[bytes]:
        raise httpx.StreamConsumed()  # pragma: no cover - views are read with content=


_REPLAYABLE = httpx.ByteStream(b"")
_ONE_SHOT = _OneShotBody()
_UNREAD = _UnreadBody()

_STREAMED_OPTIONS = CallOptions(stream=True)
_READ_OPTIONS = CallOptions()


def one_copy_at_a_time(policy: RetryPolicy, shell: str) -> RetryPolicy:
    """``policy``, if it does not hedge: these shells send one copy of a request at a
    time, so a hedging policy is refused with what to use instead (not silently run
    without its hedges)."""
    if policy.hedge_after is not None:
        raise ValueError(
            f"{shell} does not send hedged copies; give it a policy with hedge_after=None, "
            "or send hedged requests through retrysafe.Client / retrysafe.RetryTransport"
        )
    return policy


def request_view(
    method: str,
    url: str,
    headers: Iterable[tuple[str, str]] | Mapping[str, str],
    *,
    replayable: bool,
    stream: bool,
    chain: object | None = None,
) -> httpx.Request:
    """An ``httpx.Request`` standing for another client's request, for the engine.

    ``replayable``: the real body can be sent again byte for byte (bytes, or none);
    ``stream``: the caller reads the body itself, so retries end at the headers;
    ``chain``: the redirect chain this request continues (from :class:`RedirectTrail`).
    """
    extensions: dict[str, Any] = {OPTIONS_EXTENSION: _STREAMED_OPTIONS if stream else _READ_OPTIONS}
    if chain is not None:
        extensions[_CHAIN_EXTENSION] = chain
    return httpx.Request(
        method,
        url,
        headers=headers,  # type: ignore[arg-type]  # Iterable of pairs: httpx takes any
        stream=_REPLAYABLE if replayable else _ONE_SHOT,
        extensions=extensions,
    )


def response_view(
    status: int, headers: Iterable[tuple[str, str]], body: bytes | None, policy: RetryPolicy
) -> httpx.Response:
    """An ``httpx.Response`` standing for another client's response, for the engine.

    ``body`` is the real body as the client decoded it (None: not read yet, so a rule
    reading it gets ``httpx.ResponseNotRead`` and the engine asks for it first). A
    success that ``policy`` judges by its status alone (no rules) gets no body: nothing
    reads it, and copying it in is most of a view's cost. The ``Content-Encoding``
    header is left out: the body is already decoded.
    """
    kept = [(name, value) for name, value in headers if name.lower() != "content-encoding"]
    if body is None or (status < 400 and not policy.rules):
        return httpx.Response(status, headers=kept, stream=_UNREAD)
    return httpx.Response(status, headers=kept, content=body)


def chain_of(view: httpx.Request) -> object | None:
    """The redirect chain Drive left on ``view`` when its response was a redirect."""
    return view.extensions.get(_CHAIN_EXTENSION)


class RedirectTrail:
    """Carries a redirect chain from one hop to the next within one thread or task.

    The other client follows redirects above the shell, one request per hop, with no
    place to carry state between them; so when a hop ends in a redirect, the shell
    leaves the chain here with the URL the redirect points to, and the next request
    in the same context to exactly that URL continues the chain. Any other request
    drops it.
    """

    def __init__(self, name: str) -> None:
        self._pending: contextvars.ContextVar[tuple[str, object] | None] = contextvars.ContextVar(
            name, default=None
        )

    def leave(self, view: httpx.Request, target: str | None) -> None:
        """After a hop: leave its chain (if it was a redirect) for the hop to ``target``."""
        chain = chain_of(view)
        if chain is not None and target is not None:
            self._pending.set((_comparable(target), chain))
        elif self._pending.get() is not None:
            self._pending.set(None)

    def take(self, url: str) -> object | None:
        """Before a request: the chain it continues, if it is the redirect's next hop."""
        pending = self._pending.get()
        if pending is None:
            return None
        self._pending.set(None)
        target, chain = pending
        return chain if _comparable(url) == target else None


def _comparable(url: str) -> str:
    return urldefrag(url)[0]


_Error = TypeVar("_Error", bound=ApiError)


def adopt_error(error: ApiError, kinds: Mapping[type[ApiError], type[_Error]]) -> ApiError:
    """``error`` re-typed as the class ``kinds`` maps its exact class to.

    The new class subclasses retrysafe's (same name, same fields, same message) and an
    exception of the other client, so both ``except retrysafe.ServerError`` and, say,
    ``except requests.HTTPError`` catch it. An unmapped class comes back as it is.
    """
    target = kinds.get(type(error))
    if target is None or type(error) is target or not issubclass(target, type(error)):
        return error  # unmapped (a subclass of the caller's own): keep it as it is
    adopted = target.__new__(target)
    BaseException.__init__(adopted, *error.args)
    adopted.__dict__.update(error.__dict__)
    return adopted
