"""The writes of an async HTTP/2 connection's frames, each made whole and in order even
when the task that asked for it is cancelled meanwhile.

httpcore takes every frame waiting in h2 (the request's HEADERS, and whatever other
streams queued: their HEADERS, resets, window updates) and then awaits the network
write. h2 counts those frames sent as they are taken. A cancel landing in the write (a
caller's, or an attempt's end) lost them: on asyncio it lands in the write's first
pause, before any byte is handed to the socket; on TLS, after the frames were
encrypted; on trio, possibly halfway. The server's header compression table then
differed from the client's, so the next request on the connection arrived garbled or
was refused; a reset of the cancelled stream reached a server that had never seen the
stream; a record cut short broke TLS. Each way the server ended the connection, and
every request on it failed with it (trial86: 44 connections in 24 stress runs; plain
httpx alike).

So each write of a shared connection's frames runs in a task of its own, after the one
before it: the task that asked waits for it, and if that task is cancelled, it leaves at
once and the write goes on. A write that fails marks the connection failed, as httpcore
marks it when the failure reaches it (no new request goes there, and the requests on it
end), since the task that asked may no longer be there to tell it: a write that times out
after its caller was cut ends the connection's other requests, as any failed write does
in httpcore. The write runs under the write timeout httpcore passes it (httpx's, lowered
to the attempt's time), so a socket the server stops reading does not keep it for ever;
with no timeout at all, closing the connection or ending the event loop ends it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import httpcore

from retrysafe.attempt_deadline import SharedStream, connection_carrying

__all__ = ["WholeWrites"]

#: Waits until a write is over (whichever way it ended).
_Over = Callable[[], Coroutine[Any, Any, None]]


def _is_cancel(error: BaseException) -> bool:
    """Whether ``error`` is asyncio's or trio's cancellation."""
    if isinstance(error, asyncio.CancelledError):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(error, trio.Cancelled)


def _ended_with_the_loop() -> Exception:
    """What a write's caller is told when the write's task was cancelled instead: the
    event loop is ending (nothing else cancels it)."""
    return httpcore.WriteError("the write was cancelled as the event loop ended")


class WholeWrites:
    """The frame writes of the one async HTTP/2 connection ``stream`` carries, made by
    ``inner`` (httpcore's network stream) whole and in order, each in a task of its own
    (see the module's docstring)."""

    __slots__ = ("_failed", "_inner", "_previous", "_stream")

    def __init__(self, inner: httpcore.AsyncNetworkStream, stream: SharedStream) -> None:
        self._inner = inner
        self._stream = stream
        #: Waits for the last write asked for to be over; None before the first.
        self._previous: _Over | None = None
        #: The error a write failed with: every write after it fails with it.
        self._failed: Exception | None = None

    async def write(self, buffer: bytes, timeout: float | None) -> None:
        """Write ``buffer`` after every write asked for before it, in a task of its own:
        a cancel of the caller ends its wait, not the write."""
        previous = self._previous
        if httpcore._synchronization.current_async_library() == "trio":
            error = await self._in_trio_task(previous, buffer, timeout)
        else:
            error = await self._in_asyncio_task(previous, buffer, timeout)
        if error is not None:
            raise error

    async def _in_asyncio_task(
        self, previous: _Over | None, buffer: bytes, timeout: float | None
    ) -> Exception | None:
        loop = asyncio.get_running_loop()
        # (the caller waits on a future of its own, which the task fills as it ends: a
        # cancel of the caller cancels that future, not the task, and the caller resumes
        # in the loop's next pass, not two passes on as through asyncio.wait)
        written: asyncio.Future[Exception | None] = loop.create_future()

        async def write() -> None:
            try:
                error = await self._in_turn(previous, buffer, timeout)
            except BaseException:
                if not written.done():
                    written.set_result(_ended_with_the_loop())
                raise
            if not written.done():
                written.set_result(error)

        task = loop.create_task(write())

        async def over() -> None:
            if not task.done():
                await asyncio.wait((task,))

        self._previous = over
        return await written

    async def _in_trio_task(
        self, previous: _Over | None, buffer: bytes, timeout: float | None
    ) -> Exception | None:
        import trio

        done = trio.Event()
        outcome: list[Exception | None] = []

        async def write() -> None:
            try:
                outcome.append(await self._in_turn(previous, buffer, timeout))
            finally:
                done.set()

        async def over() -> None:
            if not done.is_set():
                await done.wait()

        self._previous = over
        # (a system task: no nursery of the caller's is needed, and none outlives it)
        trio.lowlevel.spawn_system_task(write, name="retrysafe HTTP/2 write")
        await done.wait()  # (cancelled, it leaves the task running)
        return outcome[0] if outcome else _ended_with_the_loop()

    async def _in_turn(
        self, previous: _Over | None, buffer: bytes, timeout: float | None
    ) -> Exception | None:
        """Write ``buffer`` once the write before it is over; the error it failed with
        (or the one an earlier write failed with), if any."""
        if previous is not None:
            await previous()
        if self._failed is None:
            try:
                await self._inner.write(buffer, timeout)
            except Exception as error:
                self._fail(error)
            except BaseException as error:
                if _is_cancel(error) or isinstance(error, (KeyboardInterrupt, SystemExit)):
                    raise
                # (a network stream of the user's raising its own: escaping a trio system
                # task, it would end the whole run; the write failed all the same)
                failed = httpcore.WriteError(f"the connection's write failed: {error!r}")
                failed.__cause__ = error
                self._fail(failed)
        return self._failed

    def _fail(self, error: Exception) -> None:
        """Note that a write failed with ``error``: every write after it fails with it."""
        self._failed = error
        self._fail_connection(error)

    def _fail_connection(self, error: Exception) -> None:
        """Mark the connection failed, as httpcore marks it when a write's error reaches
        it: its next read or write raises ``error``, and it takes no new request."""
        connection = connection_carrying(self._stream)
        if connection is not None and hasattr(connection, "_write_exception"):
            connection._write_exception = error
            connection._connection_error = True
