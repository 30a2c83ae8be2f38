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

So the frames of a shared connection are queued, in the order httpcore takes them, and
written by a task of the connection's own, all that is queued in one write: the task that
asked waits for its write, and if that task is cancelled, it leaves at once and the write goes
on. (The writing task runs while writes are queued, and ends when none is left.) A
write that fails marks the connection failed, as httpcore marks it when the failure
reaches it (no new request goes there, and the requests on it end), since the task that
asked may no longer be there to tell it, and every write queued behind it fails with it
at once: a write that times out ends the connection's other requests, as any failed
write does in httpcore. Each write runs under the longest write timeout httpcore passed
the writes it joins (httpx's, lowered to each attempt's time), so a socket the server
stops reading does not keep it for ever, and a caller with little time left does not
cut short the frames of one with more; with no timeout at all, closing the connection
or ending the event loop ends it. A write that outlasts the shortest of them retires
the connection: no new request goes there.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import sys
import time
from collections.abc import Iterable
from typing import Any

import httpcore

from retrysafe.attempt_deadline import SharedStream, connection_carrying

__all__ = ["WholeWrites"]


def _trio() -> Any:
    """trio, loaded by now: the event loop running is trio's."""
    return sys.modules["trio"]


def _is_cancel(error: BaseException) -> bool:
    """Whether ``error`` is asyncio's or trio's cancellation."""
    if isinstance(error, asyncio.CancelledError):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(error, trio.Cancelled)


def _ended_with_the_loop() -> Exception:
    """What a write's caller is told when the writing task was cancelled instead: the
    event loop is ending (nothing else cancels it)."""
    return httpcore.WriteError("the write was cancelled as the event loop ended")


def _limits(timeouts: Iterable[float | None]) -> tuple[float | None, float | None]:
    """The shortest and the longest of ``timeouts`` (None: no limit), the write
    timeouts of the writes one write joins.

    The write gets the longest: a write that times out fails the connection and every
    request on it, so it is not cut by the least patient caller's limit while another's
    frames ride with it (under the first's, a caller cut with milliseconds left failed
    the connection's other requests: carried from stop 61). Past the shortest, the
    connection is retired (see :meth:`WholeWrites.write`)."""
    shortest: float | None = None
    longest: float | None = 0.0
    for timeout in timeouts:
        if timeout is None:
            longest = None
            continue
        if shortest is None or timeout < shortest:
            shortest = timeout
        if longest is not None and timeout > longest:
            longest = timeout
    return shortest, longest


class _Written:
    """One queued write's outcome, which its caller waits for: None, or the error it
    failed with."""

    __slots__ = ("_asyncio", "_trio", "error")

    def __init__(self, on_trio: bool) -> None:
        self.error: Exception | None = None
        self._asyncio: asyncio.Future[None] | None = None
        self._trio: Any = None
        if on_trio:
            self._trio = _trio().Event()
        else:
            self._asyncio = asyncio.get_running_loop().create_future()

    def end(self, error: Exception | None) -> None:
        """The write is over, with ``error`` if it failed (its caller may be gone)."""
        self.error = error
        if self._trio is not None:
            self._trio.set()
        elif self._asyncio is not None and not self._asyncio.done():
            self._asyncio.set_result(None)

    async def wait(self) -> None:
        """Until the write is over; cancelled, the write goes on without the caller."""
        if self._trio is not None:
            await self._trio.wait()
        elif self._asyncio is not None:
            await self._asyncio  # (a cancel of the caller cancels this future only)


class WholeWrites:
    """The frame writes of the one async HTTP/2 connection ``stream`` carries, made by
    ``inner`` (httpcore's network stream) whole and in the order asked for, by a task of
    the connection's own (see the module's docstring)."""

    __slots__ = (
        "_failed",
        "_inner",
        "_queue",
        "_shortest",
        "_stream",
        "_task",
        "_under_way_since",
        "_writing",
    )

    def __init__(self, inner: httpcore.AsyncNetworkStream, stream: SharedStream) -> None:
        self._inner = inner
        self._stream = stream
        #: The writes asked for and not yet made, oldest first.
        self._queue: collections.deque[tuple[bytes, float | None, _Written]] = collections.deque()
        #: Whether the writing task runs.
        self._writing = False
        #: The asyncio writing task last started (held: the loop keeps only a weak one).
        self._task: asyncio.Task[None] | None = None
        #: The error a write failed with: every write after it fails with it.
        self._failed: Exception | None = None
        #: When the write under way started (``time.monotonic()``; None: none is), and
        #: the shortest write timeout among the writes it joins (None: no limit).
        self._under_way_since: float | None = None
        self._shortest: float | None = None

    async def write(self, buffer: bytes, timeout: float | None) -> None:
        """Queue ``buffer`` after every write asked for before it, and wait until it is
        written: a cancel of the caller ends its wait, not the write."""
        if self._failed is not None:
            raise self._failed
        since = self._under_way_since
        shortest = self._shortest
        if since is not None and shortest is not None and time.monotonic() - since > shortest:
            # The write under way has outlasted a caller's write timeout: the socket
            # takes little or nothing. It goes on, under the longest, but the connection
            # takes no new request (they would queue behind it, each for its whole time:
            # review87); the pool closes it once it is idle.
            self._retire_connection()
        on_trio = httpcore._synchronization.current_async_library() == "trio"
        written = _Written(on_trio)
        self._queue.append((buffer, timeout, written))
        if not self._writing:
            try:
                self._start_writing(on_trio)
            except BaseException:  # (no task could be made: the loop is ending)
                self._fail(_ended_with_the_loop())
                raise
        await written.wait()
        if written.error is not None:
            raise written.error

    def _start_writing(self, on_trio: bool) -> None:
        """Start the writing task, in a context of its own: it is the connection's, not
        the caller's whose write started it."""
        if on_trio:
            # (a system task: no nursery of the caller's is needed, none outlives it)
            _trio().lowlevel.spawn_system_task(self._write_queued, name="retrysafe HTTP/2 writes")
        else:
            loop = asyncio.get_running_loop()
            task = contextvars.Context().run(loop.create_task, self._write_queued())
            task.add_done_callback(self._writer_ended)
            self._task = task
        self._writing = True

    def _writer_ended(self, task: asyncio.Task[None]) -> None:
        """The asyncio writing task ``task`` ended. Cancelled before its first step (as
        by code that cancels every task), it never ran, and left the queue undrained
        (review83): its writes, and the connection, fail."""
        if task is not self._task:  # (another writer was started since: it is current)
            return
        self._writing = False
        if self._queue:
            self._fail(_ended_with_the_loop())

    async def _write_queued(self) -> None:
        """Write what is queued, in order, until nothing is left: all that is queued at
        once in one write, as httpcore, under its lock, took every frame waiting."""
        queue = self._queue
        try:
            while queue:
                # (all queued in one write: one a pass of the loop apart, behind a burst's
                # queue a request's HEADERS reached the server 50 to 400 ms late, trial88;
                # under the first's timeout, as httpcore's lock holder wrote all it took)
                taken = len(queue)
                buffer = b"".join(queued[0] for queued in queue)  # (one: itself, uncopied)
                self._shortest, timeout = _limits(queued[1] for queued in queue)
                self._under_way_since = time.monotonic()
                try:
                    await self._inner.write(buffer, timeout)
                except Exception as error:
                    self._fail(error)
                    return
                except BaseException as error:
                    if _is_cancel(error) or isinstance(error, (KeyboardInterrupt, SystemExit)):
                        raise
                    # (a network stream of the user's raising its own: escaping a trio
                    # system task, it would end the whole run; the write failed all the same)
                    failed = httpcore.WriteError(f"the connection's write failed: {error!r}")
                    failed.__cause__ = error
                    self._fail(failed)
                    return
                for _ in range(taken):
                    queue.popleft()[2].end(None)
        except BaseException:
            self._fail(_ended_with_the_loop())
            raise
        finally:
            self._writing = False
            self._under_way_since = None

    def _fail(self, error: Exception) -> None:
        """A write failed with ``error``: it, every write queued behind it and every
        write after it fail with it, and so does the connection."""
        self._failed = error
        while self._queue:
            self._queue.popleft()[2].end(error)
        self._fail_connection(error)

    def _retire_connection(self) -> None:
        """Let no new request onto the connection, as a cut request's open stream does
        (``attempt_deadline.retire``): the requests on it go on, and the pool closes it
        once it is idle."""
        try:
            connection = connection_carrying(self._stream)
            if connection is not None and hasattr(connection, "_connection_error"):
                connection._connection_error = True
        except Exception:  # (httpcore's insides changed: the connection stays in use)
            pass

    def _fail_connection(self, error: Exception) -> None:
        """Mark the connection failed, as httpcore marks it when a write's error reaches
        it: its next read or write raises ``error``, and it takes no new request."""
        try:
            connection = connection_carrying(self._stream)
            if connection is not None and hasattr(connection, "_write_exception"):
                connection._write_exception = error
                connection._connection_error = True
        except Exception:  # (httpcore's insides changed: its next write fails it anyway)
            pass
