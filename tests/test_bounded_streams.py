"""The network streams that bound every operation of an attempt by its end (attempt_deadline).

A write with bytes to send gets at most the attempt's time left, and none at all once it
has run out. An empty write (httpcore makes two for every GET: its empty body and the end
of the message) sends nothing, so it is handed on untouched: it costs no clock reading.
"""

from __future__ import annotations

import time

import httpcore
import pytest

from retrysafe.async_bounded_backend import AsyncBoundedStream
from retrysafe.attempt_deadline import current_call
from retrysafe.bounded_backend import BoundedStream


class _Call:
    """A running call whose attempt ends at ``attempt_ends_at`` (time.monotonic)."""

    def __init__(self, ends_in: float) -> None:
        self.attempt_ends_at: float | None = time.monotonic() + ends_in


class _Recorder(httpcore.NetworkStream):
    def __init__(self) -> None:
        self.writes: list[tuple[bytes, float | None]] = []

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.writes.append((buffer, timeout))


class _AsyncRecorder(httpcore.AsyncNetworkStream):
    def __init__(self) -> None:
        self.writes: list[tuple[bytes, float | None]] = []

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.writes.append((buffer, timeout))


def test_a_write_gets_at_most_the_attempts_time_left() -> None:
    inner = _Recorder()
    token = current_call.set(_Call(ends_in=1.0))
    try:
        BoundedStream(inner).write(b"GET / HTTP/1.1\r\n\r\n", timeout=5.0)
    finally:
        current_call.reset(token)
    [(_, timeout)] = inner.writes
    assert timeout is not None
    assert 0 < timeout <= 1.0


def test_a_write_after_the_attempts_end_sends_nothing() -> None:
    inner = _Recorder()
    token = current_call.set(_Call(ends_in=-0.1))
    try:
        with pytest.raises(httpcore.WriteTimeout):
            BoundedStream(inner).write(b"GET / HTTP/1.1\r\n\r\n", timeout=5.0)
    finally:
        current_call.reset(token)
    assert inner.writes == []


def test_an_empty_write_is_handed_on_as_it_came() -> None:
    inner = _Recorder()
    token = current_call.set(_Call(ends_in=-0.1))  # (even past the end: nothing is sent)
    try:
        BoundedStream(inner).write(b"", timeout=5.0)
    finally:
        current_call.reset(token)
    assert inner.writes == [(b"", 5.0)]


@pytest.mark.anyio
async def test_async_an_empty_write_is_handed_on_and_a_late_one_refused() -> None:
    inner = _AsyncRecorder()
    stream = AsyncBoundedStream(inner)
    token = current_call.set(_Call(ends_in=-0.1))
    try:
        await stream.write(b"", timeout=5.0)
        with pytest.raises(httpcore.WriteTimeout):
            await stream.write(b"GET / HTTP/1.1\r\n\r\n", timeout=5.0)
    finally:
        current_call.reset(token)
    assert inner.writes == [(b"", 5.0)]
