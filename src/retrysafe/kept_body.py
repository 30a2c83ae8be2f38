"""A streamed call's body that retrysafe had to read: kept so the caller can read it again.

A streamed call (``client.stream()``, ``send(..., stream=True)``, or any request
through the drop-in transports, which cannot tell whether their caller streams)
hands the body over unread, unless the engine needs it first: a failure's body
is read for its verdict and its error's excerpt (a drop-in transport reads none
its headers settle: the one the call ends on is handed over unread), and so is a
success's when a rule reads it. httpx's ``read()`` keeps only the decoded body, so such a
response, handed back, would raise ``StreamConsumed`` from ``iter_raw()``,
where the same response from bare httpx streams its bytes as they came (a
gateway that forwards an upstream's error unchanged reads it that way).

So the shells read such a body through :func:`read_keeping_raw` (or
:func:`aread_keeping_raw`), which keeps the raw bytes as they pass, and the
drive hands the response back with :func:`unread`: ``iter_raw()`` then gives the
raw bytes, ``read()``, ``text`` and ``iter_bytes()`` the decoded body.

Only these bodies are kept twice, and only when the server encoded them
(``Content-Encoding``): an unencoded body's raw bytes are its decoded ones, so
``iter_raw()`` gives back the decoded body, with no second copy. A call that does not
stream reads its body once, as bare httpx does.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator
from typing import Final, cast

import httpx

from retrysafe.attempt_deadline import AttemptDeadlineReached, RunningCall

__all__ = [
    "BodyStart",
    "DRAINED_AT_MOST",
    "DRAIN_TIME_AT_MOST",
    "READ_PIECE",
    "RawKeepingStream",
    "adrain_or_close",
    "aread_asked",
    "aread_at_most",
    "aread_keeping_raw",
    "drain_or_close",
    "is_encoded",
    "mark_cut",
    "read_asked",
    "read_at_most",
    "read_keeping_raw",
    "unread",
    "was_cut",
]


class _WrappedStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response's stream standing in front of the one it came with (sync or async),
    which it closes when closed."""

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream) -> None:
        self._inner = inner

    def close(self) -> None:
        assert isinstance(self._inner, httpx.SyncByteStream)
        self._inner.close()

    async def aclose(self) -> None:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        await self._inner.aclose()


class RawKeepingStream(_WrappedStream):
    """A response's stream that passes its chunks on and, if ``keep``, keeps each as it
    was received."""

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream, keep: bool) -> None:
        super().__init__(inner)
        #: Whether the raw chunks differ from the decoded body, and so are kept.
        self.keep = keep
        #: The raw chunks passed on so far (none unless ``keep``).
        self.chunks: list[bytes] = []

    def __iter__(self) -> Iterator[bytes]:
        assert isinstance(self._inner, httpx.SyncByteStream)
        for chunk in self._inner:
            if self.keep:
                self.chunks.append(chunk)
            yield chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        async for chunk in self._inner:
            if self.keep:
                self.chunks.append(chunk)
            yield chunk


def is_encoded(content_encoding: str) -> bool:
    """Whether a body sent with this ``Content-Encoding`` value (empty: none) is encoded,
    so that its raw bytes are not its decoded ones."""
    return content_encoding.strip().lower() not in ("", "identity")


def _encoded(response: httpx.Response) -> bool:
    """Whether the server encoded the body of ``response`` (see :func:`is_encoded`)."""
    return is_encoded(response.headers.get("content-encoding", ""))


def read_keeping_raw(response: httpx.Response) -> None:
    """``response.read()``, keeping the raw bytes for :func:`unread`."""
    response.stream = RawKeepingStream(response.stream, keep=_encoded(response))
    response.read()


async def aread_keeping_raw(response: httpx.Response) -> None:
    """``await response.aread()``, keeping the raw bytes for :func:`unread`."""
    response.stream = RawKeepingStream(response.stream, keep=_encoded(response))
    await response.aread()


def read_asked(response: httpx.Response, streamed: bool, at_most: int | None = None) -> None:
    """Read the body the engine asked for (:class:`~retrysafe.decisions.ReadBody`): its
    raw bytes kept when the caller of a ``streamed`` call may read it again (see
    :func:`unread`); read plainly otherwise, as the caller's ``read()`` would. With
    ``at_most``, only that much of it (see :func:`read_at_most`)."""
    if at_most is not None:
        read_at_most(response, at_most)
    elif streamed:
        read_keeping_raw(response)
    else:
        response.read()


async def aread_asked(response: httpx.Response, streamed: bool, at_most: int | None = None) -> None:
    """:func:`read_asked`, for an async response."""
    if at_most is not None:
        await aread_at_most(response, at_most)
    elif streamed:
        await aread_keeping_raw(response)
    else:
        await response.aread()


def read_at_most(response: httpx.Response, at_most: int) -> None:
    """Read the decoded body up to ``at_most`` bytes, and close the rest unread: the
    response then holds the bytes read as its body (``content``), all of it if it was no
    longer (see :func:`was_cut`). For an error answer a streamed call raises on
    (:data:`~retrysafe.decisions.ERROR_BODY_READ_AT_MOST`): the error keeps far less,
    and the rest is not downloaded. Errors are the read's, as ``read()``'s.

    httpx decodes each piece as it arrives, whole: a compressed piece of 64 KiB may
    decode to far more (gzip, up to about a thousand times), held until it is cut here.
    """
    start = BodyStart(at_most)
    pieces = cast(Generator[bytes, None, None], response.iter_bytes())  # (closed below)
    try:
        for chunk in pieces:
            if not start.take(chunk):
                break
    finally:
        pieces.close()
    response.close()  # (read whole, already closed; else the rest goes unread)
    _hold(response, start)


async def aread_at_most(response: httpx.Response, at_most: int) -> None:
    """:func:`read_at_most`, for an async response."""
    start = BodyStart(at_most)
    pieces = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
    try:
        async for chunk in pieces:
            if not start.take(chunk):
                break
    finally:
        await pieces.aclose()
    await response.aclose()
    _hold(response, start)


#: How much of a body the shells for other clients ask for at a time in a read they
#: bound (:class:`BodyStart`): bytes.
READ_PIECE: Final = 64 * 1024


class BodyStart:
    """The start of a body read a piece at a time, kept up to ``at_most`` bytes: the
    bounded reads here and in the shells for other clients (requests, aiohttp) collect
    their pieces in one."""

    __slots__ = ("_pieces", "_room", "cut")

    def __init__(self, at_most: int) -> None:
        self._pieces: list[bytes] = []
        #: How many more bytes fit.
        self._room = at_most
        #: Whether the body went on past ``at_most`` bytes (only the start is kept).
        self.cut = False

    def take(self, piece: bytes) -> bool:
        """Keep what of the next ``piece`` fits: False once the body has gone past
        ``at_most`` bytes (read no more), True while it may still end within them."""
        if len(piece) > self._room:
            self._pieces.append(piece[: self._room])
            self._room = 0
            self.cut = True
            return False
        self._pieces.append(piece)
        self._room -= len(piece)
        return True

    @property
    def content(self) -> bytes:
        """The bytes kept."""
        return b"".join(self._pieces)


def _hold(response: httpx.Response, start: BodyStart) -> None:
    """Make the bytes read the response's body (httpx's own field, as ``read()`` sets)."""
    response._content = start.content
    if start.cut:
        mark_cut(response)


#: Responses whose body was cut (weakly held: gone with the response): httpx's, and
#: requests' read by the requests adapter.
_CUT: weakref.WeakSet[object] = weakref.WeakSet()


def mark_cut(response: object) -> None:
    """Note that ``response``'s body (an httpx or a requests response: any object a weak
    reference can be made to) holds only the start of the body it was sent with."""
    _CUT.add(response)


def was_cut(response: object) -> bool:
    """Whether ``response``'s body (``content``) is only the start of the body it was sent
    with, :func:`read_at_most` (or a shell for another client) having left the rest
    unread: a copy of it that leaves the process scrubs it as cut (see
    :meth:`~retrysafe.redact.Redactor.scrub_bytes`)."""
    return response in _CUT


#: The largest body of an answer the call sends again that is read rather than dropped
#: (bytes as sent, by its Content-Length, or counted as they come when it has none): read,
#: its connection serves the retry (closed unread, an HTTP/1.1 connection goes, and each
#: retry opens another: review90), and the answer can still be handed over if the call
#: ends before the retry (a refusal, a cooldown).
DRAINED_AT_MOST: Final = 64 * 1024
#: The longest a drain waits for that body (seconds), within the attempt's time: a small
#: body comes with its headers or soon after, and one that trickles or stalls (an outage's
#: error pages) must not hold every retry for the rest of its attempt (review92: a 3 s
#: deadline spent on drains, where the call used to retry at once).
DRAIN_TIME_AT_MOST: Final = 0.5


def _drain_ends_at(attempt_ends_at: float | None) -> float:
    """When a drain starting now must end (``time.monotonic()``): after at most
    :data:`DRAIN_TIME_AT_MOST`, and no later than the attempt's end (None: no end)."""
    ends_at = time.monotonic() + DRAIN_TIME_AT_MOST
    return ends_at if attempt_ends_at is None or attempt_ends_at > ends_at else attempt_ends_at


def drain_or_close(
    response: httpx.Response, streamed: bool, running: RunningCall, attempt_ends_at: float | None
) -> None:
    """Read the unread answer to an attempt the call sends again, if it is small (see
    :data:`DRAINED_AT_MOST`) and comes in time; else close it unread. Nothing is raised:
    the engine has judged the answer (a failed read leaves it closed unread, which the
    drive then does not hand over).

    In time: within :data:`DRAIN_TIME_AT_MOST` and the attempt's end (``attempt_ends_at``),
    set as ``running``'s (the call whose reads the network streams bound) while it
    drains. After, ``running`` has no attempt time and no lateness: a drain's read cut
    late is no attempt's outcome (review93)."""
    if response.is_stream_consumed and response.is_closed:
        return  # (read already, for a rule or a keyed answer's JSON: nothing to drain)
    running.attempt_ends_at = _drain_ends_at(attempt_ends_at)
    try:
        if _drainable(response, unknown_length=True):
            _stop_past_drain_limit(response)
            try:
                read_asked(response, streamed)
                return
            except (Exception, AttemptDeadlineReached):  # (a timeout, a reset: judged)
                pass
        with contextlib.suppress(httpx.TransportError):
            response.close()
    finally:
        running.attempt_ends_at = None
        running.late_by = 0.0


async def adrain_or_close(
    response: httpx.Response, streamed: bool, running: RunningCall, attempt_ends_at: float | None
) -> None:
    """:func:`drain_or_close`, for an async response: a read its time cuts (a cancel
    scope's, past the network streams' bound) is no outcome of the attempt either.

    On trio, a body of unknown length is closed unread: cut past the limit, its read would
    leave httpx's and httpcore's nested async generators unclosed, which trio warns of
    (ResourceWarning) as it collects them."""
    import anyio  # (not with the package: sync-only processes never need it)

    if response.is_stream_consumed and response.is_closed:
        return  # (read already, for a rule or a keyed answer's JSON: nothing to drain)
    ends_at = running.attempt_ends_at = _drain_ends_at(attempt_ends_at)
    try:
        if _drainable(response, unknown_length=_on_asyncio()):
            _stop_past_drain_limit(response)
            cancels = _cancels_asked()
            # (a timeout, a reset: the answer is judged already)
            with (
                anyio.move_on_after(max(0.0, ends_at - time.monotonic())),
                contextlib.suppress(Exception, AttemptDeadlineReached),
            ):
                await aread_asked(response, streamed)
            if _cancels_asked() > cancels:
                # The caller's cancel came as the drain's time ran out, and the scope took
                # it for its own (anyio before 4.16 on asyncio, its issue 1214): it stands.
                with contextlib.suppress(httpx.TransportError), anyio.CancelScope(shield=True):
                    await response.aclose()
                raise anyio.get_cancelled_exc_class()()
            if response.is_stream_consumed and response.is_closed:
                return
        with contextlib.suppress(httpx.TransportError), anyio.CancelScope(shield=True):
            await response.aclose()
    finally:
        running.attempt_ends_at = None
        running.late_by = 0.0


def _cancels_asked() -> int:
    """How many cancels of the running asyncio task are pending (``Task.cancelling()``); 0
    on another event loop (trio's cancels are scoped, never taken by the wrong scope),
    and before Python 3.11 (where retrysafe requires anyio 4.16, which has no such fault)."""
    task = _asyncio_task()
    # (Python 3.11 on: before it, a task has no count and a cancel taken is not seen)
    cancelling: Callable[[], int] | None = getattr(task, "cancelling", None)
    return 0 if cancelling is None else cancelling()


def _on_asyncio() -> bool:
    """Whether the running event loop is asyncio's (not trio's)."""
    return _asyncio_task() is not None


def _asyncio_task() -> object | None:
    """The running asyncio task; None on another event loop (trio)."""
    import asyncio  # (loaded already: an async drain runs on an event loop)

    try:
        return asyncio.current_task()
    except RuntimeError:  # (no asyncio loop running: trio)
        return None


def _drainable(response: httpx.Response, *, unknown_length: bool) -> bool:
    """Whether a drain may read ``response``'s body: it has none (an answer to a HEAD, a
    204 or a 304, whatever its Content-Length says), its Content-Length is at most
    :data:`DRAINED_AT_MOST`, or, if ``unknown_length``, it has none (chunked, or ended by
    closing the connection, as error pages often are: see
    :func:`_stop_past_drain_limit`)."""
    if response.status_code in (204, 304) or (
        response._request is not None and response._request.method == "HEAD"
    ):
        return True
    length = response.headers.get("content-length")
    if length is None:
        return unknown_length
    return length.isdigit() and int(length) <= DRAINED_AT_MOST


def _stop_past_drain_limit(response: httpx.Response) -> None:
    """Make the read of a body of unknown length stop (raise) once it passes
    :data:`DRAINED_AT_MOST` bytes: a drain then leaves the rest unread, as it does a body
    whose Content-Length says it is long."""
    if "content-length" not in response.headers:
        response.stream = _StopsPastDrainLimit(response.stream)


class _DrainLimitPassed(Exception):
    """A drained body of unknown length went on past :data:`DRAINED_AT_MOST` bytes."""


class _StopsPastDrainLimit(_WrappedStream):
    """A response's stream that raises :class:`_DrainLimitPassed` once more than
    :data:`DRAINED_AT_MOST` bytes have come (as sent: before any decoding), so that a
    drain leaves a long body of unknown length unread, as it does one whose
    Content-Length says it is long."""

    def __iter__(self) -> Iterator[bytes]:
        assert isinstance(self._inner, httpx.SyncByteStream)
        size = 0
        for chunk in self._inner:
            size += len(chunk)
            if size > DRAINED_AT_MOST:
                raise _DrainLimitPassed
            yield chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > DRAINED_AT_MOST:
                raise _DrainLimitPassed
            yield chunk


def unread(response: httpx.Response) -> None:
    """Make a body read by :func:`read_keeping_raw` readable again, from its raw bytes
    (nothing for any other response). Its decoded body stays: ``read()`` returns it."""
    stream = response.stream
    if type(stream) is RawKeepingStream and response.is_stream_consumed:
        raw = b"".join(stream.chunks) if stream.keep else response.content
        response.stream = httpx.ByteStream(raw)
        response.is_stream_consumed = False
        response.is_closed = False
