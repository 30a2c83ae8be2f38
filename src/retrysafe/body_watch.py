"""How a streamed success's body ended, for whoever listens.

A streamed call (``client.stream(...)``, ``send(..., stream=True)``) is over, for
retrysafe's decisions, once its headers are judged a success: the body is the
caller's to read, and retrysafe can neither retry nor resume it. Its telemetry
(the ``success`` event, the call's duration) ends there too. So that a stream
cut halfway, or one the caller stops reading, is not taken for one that came
whole, a call someone listens to (a hook, the log at DEBUG, a tracing
instrument) hands the body over through a :class:`BodyWatch`, which tells once,
when the caller's reading stops, how the body ended:

- ``"complete"``: read to its end;
- ``"broken"``: a read raised (the server cut it, a read timed out): the caller
  got that exception;
- ``"abandoned"``: closed before its end (the caller stopped reading, or left).

Only listened-to streamed calls are watched: for the others nothing is wrapped,
and a body costs what it costs in bare httpx.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Literal

import httpx

if TYPE_CHECKING:
    from retrysafe.attempt_deadline import SharedStream

__all__ = [
    "DRAIN_BYTES",
    "DRAIN_SECONDS",
    "STREAMED_TYPES",
    "BodyEnd",
    "BodyWatch",
    "drainable",
    "sent_as_made",
]

#: How a streamed body ended (see the module).
BodyEnd = Literal["complete", "broken", "abandoned"]


class BodyWatch(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response's stream that passes its chunks on and calls ``ended(how, exception)``
    once, as the caller's reading stops (see the module). ``ended`` must not raise."""

    def __init__(
        self,
        inner: httpx.SyncByteStream | httpx.AsyncByteStream,
        ended: Callable[[BodyEnd, Exception | None], None],
        *,
        drains: bool = False,
    ) -> None:
        self._inner = inner
        self._ended: Callable[[BodyEnd, Exception | None], None] | None = ended
        #: Whether close() may read what little is left (see :meth:`close`).
        self._drains = drains
        self._chunks: Iterator[bytes] | None = None
        self._achunks: AsyncIterator[bytes] | None = None

    def __iter__(self) -> Iterator[bytes]:
        assert isinstance(self._inner, httpx.SyncByteStream)
        chunks = self._chunks = iter(self._inner)
        try:
            # (a loop, not ``yield from``: closing this generator must not close ``chunks``,
            # which close() may read on from where the reader stopped)
            for chunk in chunks:  # noqa: UP028
                yield chunk
        except Exception as exc:
            self._end("broken", exc)
            raise
        except GeneratorExit:  # (a consumer that stops early closes us: not broken)
            raise
        except BaseException:
            # A read interrupted (KeyboardInterrupt, a green thread's timeout) ended
            # ``chunks`` with it: there is no rest for close() to drain, and an
            # empty rest must not read as the body's end.
            self._chunks = None
            raise
        self._end("complete", None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        chunks = self._achunks = self._inner.__aiter__()
        try:
            async for chunk in chunks:  # (as in __iter__: aclose() may read on)
                yield chunk
        except Exception as exc:
            self._end("broken", exc)
            raise
        except GeneratorExit:
            raise
        except BaseException:  # (cancelled in a read: see __iter__)
            self._achunks = None
            raise
        self._end("complete", None)

    def close(self) -> None:
        """Close the body; ``abandoned`` unless it was read to its end.

        With ``drains`` (a sync body over retrysafe's own network streams), what
        is left is read first if it comes at once: :data:`DRAIN_BYTES` at most, within
        :data:`DRAIN_SECONDS`. A reader that stops at its protocol's own end marker (the
        sync openai SDK closes a stream at its ``[DONE]`` event, before the chunked
        body's last bytes) has read the whole body; one that leaves in the middle of a
        stream still flowing has not."""
        assert isinstance(self._inner, httpx.SyncByteStream)
        try:
            chunks = self._chunks
            if self._drains and self._ended is not None and chunks is not None and _drained(chunks):
                self._end("complete", None)
        finally:
            try:
                self._inner.close()
            finally:
                self._end("abandoned", None)

    async def aclose(self) -> None:
        """Close the body; ``abandoned`` unless it was read to its end. With ``drains``,
        what is left is read first if it comes at once, as :meth:`close` does, bounded
        by a cancel scope (an HTTP/2 stream's end, too, may still be on its way)."""
        assert isinstance(self._inner, httpx.AsyncByteStream)
        try:
            chunks = self._achunks
            if (
                self._drains
                and self._ended is not None
                and chunks is not None
                and await _adrained(chunks)
            ):
                self._end("complete", None)
        finally:
            try:
                await self._inner.aclose()
            finally:
                self._end("abandoned", None)

    def _end(self, how: BodyEnd, exc: Exception | None) -> None:
        """Tell the first end only: httpx closes a stream it has read to its end."""
        ended, self._ended = self._ended, None
        if ended is not None:
            ended(how, exc)


#: The media types of a body sent as it is made (events, JSON lines): through a drop-in
#: transport, which cannot tell whether httpx will read a body or stream it, only a body
#: of one of these is followed (see :func:`sent_as_made`).
STREAMED_TYPES: Final = frozenset(
    {"text/event-stream", "application/x-ndjson", "application/jsonl", "application/jsonlines"}
)


def sent_as_made(response: httpx.Response) -> bool:
    """Whether ``response``'s body is one sent as it is made (:data:`STREAMED_TYPES`)."""
    media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media in STREAMED_TYPES


def drainable(response: httpx.Response) -> bool:
    """Whether ``response``'s body may read its rest as it is closed (see
    :meth:`BodyWatch.close`): an async body from the network, HTTP/1.1 or HTTP/2 (a cancel
    scope bounds its reads); a sync one over retrysafe's own network streams, whose reads
    the drain can bound. Over HTTP/2 such a read takes its turn on a connection other
    threads' requests share: it waits for that turn, and reads, within the drain's bound,
    and a read cut there ends only the drain (httpcore keeps the connection), so the
    others' requests go on."""
    import sys

    stream = response.extensions.get("network_stream")
    if isinstance(response.stream, httpx.AsyncByteStream):
        return stream is not None and response.http_version in ("HTTP/1.1", "HTTP/2")
    bounded = sys.modules.get("retrysafe.bounded_backend")  # (loaded if such a stream is)
    return (
        bounded is not None
        and isinstance(stream, bounded.BoundedStream)
        and response.http_version in ("HTTP/1.1", "HTTP/2")
    )


#: How much of a body's rest :meth:`BodyWatch.close` reads, at most, to find its end.
DRAIN_BYTES: Final = 65536
#: How long it reads for, at most (a body still flowing is left, as abandoned).
DRAIN_SECONDS: Final = 0.025


class _Draining:
    """The running call, as the network streams see it, while a closing body's rest is
    read: every read ends by ``attempt_ends_at`` (see ``attempt_deadline.time_left``)."""

    attempt_sent_at: float | None = None
    shared_stream: SharedStream | None = None
    late_by = 0.0

    def __init__(self, ends_at: float) -> None:
        self.attempt_ends_at: float | None = ends_at
        self.caller_timeouts: dict[str, Any] = {}


def _drained(chunks: Iterator[bytes]) -> bool:
    """Whether the rest of ``chunks`` came, to its end, within the drain's bounds."""
    from retrysafe.attempt_deadline import AttemptDeadlineReached, current_call

    token = current_call.set(_Draining(time.monotonic() + DRAIN_SECONDS))
    try:
        read = 0
        for chunk in chunks:
            read += len(chunk)
            if read > DRAIN_BYTES:
                return False
        return True
    except (Exception, AttemptDeadlineReached):  # (timed out, broke off: not known whole)
        return False
    finally:
        current_call.reset(token)


async def _adrained(chunks: AsyncIterator[bytes]) -> bool:
    """The async :func:`_drained`: its reads are bounded by a cancel scope (asyncio and
    trio alike), outside any attempt (a read the scope cuts is not the attempt's)."""
    import anyio

    from retrysafe.attempt_deadline import current_call

    token = current_call.set(None)
    try:
        with anyio.move_on_after(DRAIN_SECONDS):
            read = 0
            async for chunk in chunks:
                read += len(chunk)
                if read > DRAIN_BYTES:
                    return False
            return True
    except Exception:  # (broke off: not known whole)
        return False
    finally:
        current_call.reset(token)
    return False
