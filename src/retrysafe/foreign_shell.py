"""What the shells for other HTTP clients (requests, aiohttp) share around the engine.

The engine and :class:`~retrysafe.drive.Drive` read requests and responses as httpx
values (classification rules take an ``httpx.Response``). A shell for another client
hands them a *view*: an ``httpx.Request`` or ``httpx.Response`` holding the method,
URL, headers and (once read) body of the real one, and nothing else; the view is never
sent. A view is built for every attempt, so its two costly parts are built here on
short paths that give exactly what httpx's own parsing would (:func:`view_url`,
:func:`view_headers`): parsing the URL alone was most of what these shells added to
a call (``benchmarks/client_overhead.py`` prints the total).

Also here: the redirect trail that lets every hop of a redirect chain followed by the
other client share one deadline and one retry allowance (as httpx's hops do through
the request's extensions), and :func:`adopt_error`, which re-types a retrysafe error
so that it also belongs to the other client's exception tree.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Literal, NamedTuple, TypeVar
from urllib.parse import urldefrag

import httpx
from httpx._urlparse import (
    FRAG_SAFE,
    MAX_URL_LENGTH,
    PATH_SAFE,
    QUERY_SAFE,
    UNRESERVED_CHARACTERS,
    URL_REGEX,
    ParseResult,
    normalize_path,
    quote,
    urlparse,
)

from retrysafe.call_options import OPTIONS_EXTENSION, CallOptions
from retrysafe.errors import ApiError
from retrysafe.policy import RetryPolicy
from retrysafe.redact import BODY_SCAN_LIMIT
from retrysafe.request_facts import idempotency_key_of

__all__ = [
    "RedirectTrail",
    "TraceHeaders",
    "adopt_error",
    "body_bytes",
    "request_view",
    "response_view",
    "view_headers",
    "view_url",
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


def idempotency_mode(mode: object) -> Literal["off", "auto"]:
    """The shell's ``idempotency`` setting, checked: ``"off"``, or ``"auto"`` (a new key
    on every POST and PATCH that has none)."""
    if mode == "off" or mode == "auto":
        return "off" if mode == "off" else "auto"
    raise ValueError(
        f"idempotency must be 'off' or 'auto' (a key on every POST and PATCH), got {mode!r}"
    )


def one_copy_at_a_time(policy: RetryPolicy, shell: str) -> RetryPolicy:
    """``policy``, if it does not hedge: these shells send one copy of a request at a
    time, so a hedging policy is refused with what to use instead (not silently run
    without its hedges)."""
    # (a policy of the wrong type is refused by ShellSettings.build, with its own message)
    if isinstance(policy, RetryPolicy) and policy.hedge_after is not None:
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
    content: bytes | None = None,
) -> httpx.Request:
    """An ``httpx.Request`` standing for another client's request, for the engine.

    ``replayable``: the real body can be sent again byte for byte (bytes, or none);
    ``stream``: the caller reads the body itself, so retries end at the headers;
    ``chain``: the redirect chain this request continues (from :class:`RedirectTrail`);
    ``content``: the real body, when the client holds it as bytes: the stand-in holds it
    too, so that its secret fields are scrubbed from an error's body and message as on
    httpx (a server may echo the request it refused).
    """
    extensions: dict[str, Any] = {OPTIONS_EXTENSION: _STREAMED_OPTIONS if stream else _READ_OPTIONS}
    if chain is not None:
        extensions[_CHAIN_EXTENSION] = chain
    # What httpx.Request(method, url, headers=..., stream=..., extensions=...) sets,
    # without parsing and copying again what view_url and view_headers just built.
    view = httpx.Request.__new__(httpx.Request)
    view.method = method.upper()
    view.url = view_url(url)
    view.headers = view_headers(headers.items() if isinstance(headers, Mapping) else headers)
    view.extensions = extensions
    if content:
        view.stream = httpx.ByteStream(content)
        view._content = content  # (read, as httpx's Request(content=...) is)
    else:
        view.stream = _REPLAYABLE if replayable else _ONE_SHOT
    return view


def body_bytes(body: object) -> bytes | None:
    """``body`` for the stand-in to hold (see :func:`request_view`): bytes as they are;
    text, as requests holds a form, encoded when short enough to be read for secrets at
    all (:data:`~retrysafe.redact.BODY_SCAN_LIMIT`); else None (a file, a generator, a
    buffer: nothing is copied for it, and the stand-in keeps its one-shot marker)."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str) and len(body) <= BODY_SCAN_LIMIT:
        return body.encode("utf-8")
    return None


class TraceHeaders:
    """The headers a call instrument writes on a stand-in request for each attempt (its
    trace's context: ``traceparent`` and the like), which the real request must carry.

    Made from the stand-in as it was built; :meth:`copy_onto` sets what is new on it
    since on the real request's headers.
    """

    __slots__ = ("_built",)

    def __init__(self, view: httpx.Request) -> None:
        self._built = frozenset(view.headers.raw)

    def copy_onto(self, view: httpx.Request, headers: MutableMapping[str, str]) -> None:
        """Set the headers on ``view`` it was not built with onto ``headers`` (the real
        request's; each replaces the value an earlier attempt set)."""
        for name, value in view.headers.raw:
            if (name, value) not in self._built:
                headers[name.decode("latin-1")] = value.decode("latin-1")


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
    kept = view_headers(headers, dropping=_CONTENT_ENCODING)
    if body is None or (status < 400 and not policy.rules):
        return _unread_response(status, kept)
    return httpx.Response(status, headers=kept, content=body)


def _unread_response(status: int, headers: httpx.Headers) -> httpx.Response:
    """``httpx.Response(status, headers=headers, stream=_UNREAD)``, made for every
    attempt: the same attributes, set without copying ``headers`` again."""
    view = httpx.Response.__new__(httpx.Response)
    view.status_code = status
    view.headers = headers
    view._request = None
    view.next_request = None
    view.extensions = {}
    view.history = []
    view.is_closed = False
    view.is_stream_consumed = False
    view.default_encoding = "utf-8"
    view.stream = _UNREAD
    view._num_bytes_downloaded = 0
    return view


#: Parsed origins (scheme, userinfo, host, port) by the URL's raw ``scheme`` and
#: ``authority``: a client calls few origins, and checking a host (IDNA, IP address
#: syntax) is most of httpx's parse. Bounded: cleared when it grows past _ORIGINS_KEPT.
_origins: dict[tuple[str, str], tuple[str, str, str, int | None]] = {}
_ORIGINS_KEPT = 256


def view_url(url: str) -> httpx.URL:
    """``httpx.URL(url)``, for the absolute URLs of real requests, parsed for less.

    httpx parses every component on every call; here the origin's parse is kept per
    origin, and the path, query and fragment take httpx's own normalising and quoting
    functions, which return a text with nothing to escape as it is, at once. Anything
    else (no scheme or host, control characters, too long, malformed) goes to
    ``httpx.URL`` itself, which parses or rejects it as it always has. The result
    equals httpx's parse component for component (``tests/clients/test_views.py``).
    """
    if len(url) > MAX_URL_LENGTH or not url.isprintable():
        return httpx.URL(url)  # (httpx rejects ASCII control characters in a URL)
    match = URL_REGEX.match(url)
    assert match is not None  # it matches any text
    scheme, authority, path, query, fragment = match.group(
        "scheme", "authority", "path", "query", "fragment"
    )
    if not scheme or not authority:
        return httpx.URL(url)
    origin = _origins.get((scheme, authority))
    if origin is None:
        try:
            parsed = urlparse(f"{scheme}://{authority}")
        except httpx.InvalidURL:
            return httpx.URL(url)  # raises the error httpx gives for the whole URL
        origin = parsed[:4]
        if len(_origins) >= _ORIGINS_KEPT:
            _origins.clear()
        _origins[(scheme, authority)] = origin
    view = httpx.URL.__new__(httpx.URL)
    view._uri_reference = ParseResult(
        *origin,
        _quoted(normalize_path(path), PATH_SAFE),
        None if query is None else _quoted(query, QUERY_SAFE),
        None if fragment is None else _quoted(fragment, FRAG_SAFE),
    )
    return view


def _quoted(text: str, safe: str) -> str:
    """httpx's ``quote(text, safe)``: a text with no ``%`` and nothing to escape comes
    back as it is (the first thing ``quote`` would find, after two more calls)."""
    if "%" not in text and not text.rstrip(_KEPT[safe]):
        return text
    return quote(text, safe=safe)


#: The characters httpx leaves unescaped, by the ``safe`` set of each component.
_KEPT = {safe: UNRESERVED_CHARACTERS + safe for safe in (PATH_SAFE, QUERY_SAFE, FRAG_SAFE)}


_CONTENT_ENCODING = b"content-encoding"


def view_headers(
    pairs: Iterable[tuple[str, str]], *, dropping: bytes | None = None
) -> httpx.Headers:
    """``httpx.Headers(pairs)`` (less the header named ``dropping``, lower case).

    httpx normalises each name and value through two function calls and type checks;
    the usual pairs of text are encoded here in one loop instead, to the same
    (name, lower-cased name, value) bytes. Any other pair (bytes, a non-ASCII text)
    takes a slower loop (so ``pairs`` must be iterable twice, as a mapping's
    ``items()`` is).
    """
    triples: list[tuple[bytes, bytes, bytes]] = []
    try:
        for name, value in pairs:
            raw = name.encode("ascii")
            lowered = raw.lower()
            if lowered != dropping:
                triples.append((raw, lowered, value.encode("ascii")))
    except (AttributeError, UnicodeEncodeError):
        return _slow_headers(pairs, dropping)
    headers = httpx.Headers()
    headers._list = triples
    return headers


def _slow_headers(pairs: Iterable[tuple[str, str]], dropping: bytes | None) -> httpx.Headers:
    """The view of pairs the fast loop could not encode: bytes, or text beyond ASCII.

    The view is only read (to classify, to find a key), never sent: the other client
    sends its own headers. So a text value is kept as the bytes it most likely came
    from or goes out as: latin-1 (http.client's reading of a response, and how it
    sends a request header), else UTF-8 (aiohttp keeps undecodable bytes as
    surrogates).
    """
    triples: list[tuple[bytes, bytes, bytes]] = []
    for name, value in pairs:
        raw = _header_bytes(name)
        lowered = raw.lower()
        if lowered != dropping:
            triples.append((raw, lowered, _header_bytes(value)))
    headers = httpx.Headers()
    headers._list = triples
    return headers


def _header_bytes(text: str | bytes) -> bytes:
    """A header name or value as bytes (see _slow_headers)."""
    if isinstance(text, bytes):
        return text
    if not isinstance(text, str):  # (as httpx.Headers refuses it)
        raise TypeError(f"Header value must be str or bytes, not {type(text)}")
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")


def in_place_of(original: BaseException, failure: Exception) -> Exception:
    """``failure`` (the httpx exception the engine knows) standing for ``original``, with
    the original's class name in its message and nothing else of it: not its message,
    repr or ``__cause__``, which a traceback prints and which can hold the URL with its
    query and the request's headers."""
    message = failure.args[0] if failure.args else str(failure)
    failure.args = (f"{message} ({type(original).__name__})",)
    failure.__cause__ = None
    failure.__suppress_context__ = True
    return failure


def chain_of(view: httpx.Request) -> object | None:
    """The redirect chain Drive left on ``view`` when its response was a redirect."""
    return view.extensions.get(_CHAIN_EXTENSION)


#: How soon after a redirect its next hop must start to continue the chain. requests and
#: aiohttp follow at once (after reading the redirect's body); a request the caller makes
#: later to the same URL, e.g. polling a 303's Location, is a call of its own.
FOLLOW_WITHIN = 1.0


class RedirectTrail:
    """Carries a redirect chain from one hop to the next within one thread or task.

    The other client follows redirects above the shell, one request per hop, with no
    place to carry state between them; so when a hop ends in a redirect, the shell
    leaves the chain here with the URL the redirect points to, and the next request
    in the same context to exactly that URL, made within :data:`FOLLOW_WITHIN`
    seconds, continues the chain (and its deadline, even if it has run out). Any other
    request drops it and starts afresh.
    """

    def __init__(self, name: str) -> None:
        self._pending: contextvars.ContextVar[_Hop | None] = contextvars.ContextVar(
            name, default=None
        )

    def leave(self, view: httpx.Request, target: str | None) -> None:
        """After a hop: leave its chain (if it was a redirect) for the hop to ``target``,
        with the hop's method and idempotency key."""
        chain = chain_of(view)
        if chain is not None and target is not None:
            self._pending.set(
                _Hop(
                    _comparable(target),
                    chain,
                    time.monotonic(),
                    view.method,
                    idempotency_key_of(view),
                )
            )
        elif self._pending.get() is not None:
            self._pending.set(None)

    def take(self, url: str, method: str) -> tuple[object | None, str | None]:
        """Before a request: the chain it continues, if it is the redirect's next hop;
        and, when it repeats the hop's method (a 307 or 308), the idempotency key the
        hop carried: one write, one key, however many hops it takes."""
        pending = self._pending.get()
        if pending is None:
            return None, None
        self._pending.set(None)
        if _comparable(url) != pending.target or time.monotonic() - pending.left_at > FOLLOW_WITHIN:
            return None, None
        # (a chain with no time left is continued too: the hop then fails at once with
        # DeadlineExceeded, where starting afresh would give it a whole new deadline)
        return pending.chain, pending.key if method == pending.method else None


class _Hop(NamedTuple):
    """A redirect's hop, left for the next: where it points, the chain, when it was left,
    and the method and key it was sent with."""

    target: str
    chain: object
    left_at: float
    method: str
    key: str | None


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
