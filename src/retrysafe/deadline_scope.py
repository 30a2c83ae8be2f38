"""``retrysafe.deadline(seconds)``: one shrinking deadline for every call inside.

The scope lives in a context variable: every retrysafe call made inside the
``with`` block, in this thread or in async tasks started inside it (they copy the
context), uses the tighter of its policy's deadline and the scope's. A thread
started inside it does not inherit it (a new thread starts with an empty context)
unless it runs in a copy: ``contextvars.copy_context().run`` or
``asyncio.to_thread``.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from types import TracebackType

from retrysafe.clock import Clock, checked_clock
from retrysafe.timing import Deadline

__all__ = ["DeadlineScope", "current_deadline", "deadline"]

_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "retrysafe_deadline", default=None
)


#: The innermost active deadline scope's deadline, or None outside any scope. (The
#: variable's own ``get``: every call asks, and a function around it would cost a frame.)
current_deadline: Callable[[], Deadline | None] = _current.get


class DeadlineScope:
    """A ``with`` / ``async with`` block sharing one deadline; nesting only tightens it."""

    __slots__ = ("_clock", "_seconds", "_token", "deadline")

    def __init__(self, seconds: float, clock: Clock | None = None) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(
                f"a deadline is a number of seconds, e.g. retrysafe.deadline(5); got {seconds!r}"
            )
        if math.isnan(seconds) or seconds < 0:
            raise ValueError(f"a deadline needs seconds >= 0, got {seconds!r}")
        self._seconds = seconds
        self._clock = clock if clock is None else checked_clock(clock)
        self._token: contextvars.Token[Deadline | None] | None = None
        self.deadline: Deadline | None = None

    def __enter__(self) -> Deadline:
        if self._token is not None:
            raise RuntimeError("a deadline scope cannot be entered twice; make a new one")
        own = Deadline.after(self._seconds, self._clock)
        self.deadline = own.tighter(_current.get())
        self._token = _current.set(self.deadline)
        return self.deadline

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)

    async def __aenter__(self) -> Deadline:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, traceback)


def deadline(seconds: float, *, clock: Clock | None = None) -> DeadlineScope:
    """Share one deadline of ``seconds`` among every call made inside the block::

    with retrysafe.deadline(5):
        client.get(a)   # these two together take at most 5 s,
        client.get(b)   # retries and waits included
    """
    return DeadlineScope(seconds, clock)
