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

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Literal

import httpx

__all__ = ["BodyEnd", "BodyWatch"]

#: How a streamed body ended (see the module).
BodyEnd = Literal["complete", "broken", "abandoned"]


class BodyWatch(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response's stream that passes its chunks on and calls ``ended(how, exception)``
    once, as the caller's reading stops (see the module). ``ended`` must not raise."""

    def __init__(
        self,
        inner: httpx.SyncByteStream | httpx.AsyncByteStream,
        ended: Callable[[BodyEnd, Exception | None], None],
    ) -> None:
        self._inner = inner
        self._ended: Callable[[BodyEnd, Exception | None], None] | None = ended

    def __iter__(self) -> Iterator[bytes]:
        assert isinstance(self._inner, httpx.SyncByteStream)
        try:
            yield from self._inner
        except Exception as exc:  # (a consumer that stops early closes us: not broken)
            self._end("broken", exc)
            raise
        self._end("complete", None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        try:
            async for chunk in self._inner:
                yield chunk
        except Exception as exc:
            self._end("broken", exc)
            raise
        self._end("complete", None)

    def close(self) -> None:
        assert isinstance(self._inner, httpx.SyncByteStream)
        try:
            self._inner.close()
        finally:
            self._end("abandoned", None)

    async def aclose(self) -> None:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        try:
            await self._inner.aclose()
        finally:
            self._end("abandoned", None)

    def _end(self, how: BodyEnd, exc: Exception | None) -> None:
        """Tell the first end only: httpx closes a stream it has read to its end."""
        ended, self._ended = self._ended, None
        if ended is not None:
            ended(how, exc)
