"""The network streams that bound every operation of an attempt by its end (attempt_deadline).

A write with bytes to send gets at most the attempt's time left, and none at all once it
has run out; so does a TLS handshake (zero then, never a negative timeout, which a socket
refuses). A connect with no time left is not tried: the time went on waiting for a
connection, a pool timeout. An empty write (httpcore makes two for every GET: its empty body
and the end of the message) sends nothing, so it is handed on untouched: it costs no
clock reading.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import weakref

import httpcore
import pytest
from httpcore._backends.sync import TLSinTLSStream

from retrysafe.async_bounded_backend import (
    AsyncBoundedBackend,
    AsyncBoundedStream,
    _AsyncStreamSlots,
)
from retrysafe.attempt_deadline import AttemptDeadlineReached, HeadersNoted, current_call
from retrysafe.bounded_backend import (
    H2_PREFACE,
    BoundedBackend,
    BoundedStream,
    _NumberedInTurn,
    _Opening,
    _StreamSlots,
    _TurnToRead,
)


class _Call:
    """A running call whose attempt ends at ``attempt_ends_at`` (time.monotonic)."""

    def __init__(self, ends_in: float) -> None:
        self.attempt_ends_at: float | None = time.monotonic() + ends_in
        self.attempt_sent_at: float | None = None


class _Recorder(httpcore.NetworkStream):
    """Records every write and read; a read finds the response's bytes waiting."""

    def __init__(self) -> None:
        self.writes: list[tuple[bytes, float | None]] = []
        self.reads: list[float | None] = []

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.reads.append(timeout)
        return b"HTTP/1.1 200 OK\r\n"

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.writes.append((buffer, timeout))


class _AsyncRecorder(httpcore.AsyncNetworkStream):
    def __init__(self) -> None:
        self.writes: list[tuple[bytes, float | None]] = []
        self.reads: list[float | None] = []

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.reads.append(timeout)
        return b"HTTP/1.1 200 OK\r\n"

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


def test_the_first_write_notes_when_the_request_went_out() -> None:
    """What the breaker learns of the attempt starts there: the time before it went on
    waiting for a connection (see Drive._time_queued). An empty write sends nothing."""
    call = _Call(ends_in=1.0)
    token = current_call.set(call)
    try:
        stream = BoundedStream(_Recorder())
        stream.write(b"", timeout=5.0)
        assert call.attempt_sent_at is None
        before = time.monotonic()
        stream.write(b"GET / HTTP/1.1\r\n", timeout=5.0)
        sent_at = call.attempt_sent_at
        stream.write(b"\r\n", timeout=5.0)
    finally:
        current_call.reset(token)
    assert sent_at is not None
    assert before <= sent_at <= time.monotonic()
    assert call.attempt_sent_at == sent_at, "the first write's time, kept"


@pytest.mark.anyio
async def test_async_a_write_gets_at_most_the_attempts_time_left() -> None:
    inner = _AsyncRecorder()
    token = current_call.set(_Call(ends_in=1.0))
    try:
        await AsyncBoundedStream(inner).write(b"GET / HTTP/1.1\r\n\r\n", timeout=5.0)
    finally:
        current_call.reset(token)
    [(_, timeout)] = inner.writes
    assert timeout is not None
    assert 0 < timeout <= 1.0


def test_a_write_after_the_attempts_end_sends_nothing() -> None:
    """Nothing written yet: the attempt's time went on waiting for the (kept-alive)
    connection, a pool timeout, never sent. Part of the request written already: a write
    timeout, maybe sent."""
    inner = _Recorder()
    call = _Call(ends_in=-0.1)
    token = current_call.set(call)
    try:
        with pytest.raises(httpcore.PoolTimeout, match="max_connections"):
            BoundedStream(inner).write(b"GET / HTTP/1.1\r\n\r\n", timeout=5.0)
        call.attempt_sent_at = time.monotonic() - 0.2  # (its headers went out before)
        with pytest.raises(httpcore.WriteTimeout):
            BoundedStream(inner).write(b"the body", timeout=5.0)
    finally:
        current_call.reset(token)
    assert inner.writes == []


def test_a_read_after_the_attempts_end_reads_nothing_even_with_bytes_waiting() -> None:
    """Bytes already waiting do not carry an attempt past its end: no read is made (a
    zero timeout would still hand them over) and the attempt ends as a trickle does."""
    inner = _Recorder()
    token = current_call.set(_Call(ends_in=-0.1))
    try:
        with pytest.raises(AttemptDeadlineReached) as reached:
            BoundedStream(inner).read(4096, timeout=5.0)
    finally:
        current_call.reset(token)
    assert inner.reads == []
    assert reached.value.stalled is False


def test_a_read_gets_at_most_the_attempts_time_left() -> None:
    inner = _Recorder()
    token = current_call.set(_Call(ends_in=1.0))
    try:
        BoundedStream(inner).read(4096, timeout=5.0)
    finally:
        current_call.reset(token)
    [timeout] = inner.reads
    assert timeout is not None
    assert 0 < timeout <= 1.0


@pytest.mark.anyio
async def test_async_a_late_read_reads_nothing_and_a_timely_one_gets_the_time_left() -> None:
    inner = _AsyncRecorder()
    token = current_call.set(_Call(ends_in=-0.1))
    try:
        with pytest.raises(AttemptDeadlineReached) as reached:
            await AsyncBoundedStream(inner).read(4096, timeout=5.0)
    finally:
        current_call.reset(token)
    assert inner.reads == []
    assert reached.value.stalled is False
    token = current_call.set(_Call(ends_in=1.0))
    try:
        await AsyncBoundedStream(inner).read(4096, timeout=5.0)
    finally:
        current_call.reset(token)
    [timeout] = inner.reads
    assert timeout is not None
    assert 0 < timeout <= 1.0


class _TimingCall(_Call):
    """A running call as a read that times out sees it: whose read limit it was, and
    where to say how late the read ended."""

    def __init__(self, ends_in: float) -> None:
        super().__init__(ends_in)
        self.caller_timeouts: dict[str, object] = {"read": 0.1}
        self.late_by = 0.0


class _LateTimeout(httpcore.NetworkStream):
    """A read that times out only after ``seconds``: its process was busy past the limit."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        time.sleep(self.seconds)
        raise httpcore.ReadTimeout("timed out")

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        pass


def _late_by_after(inner: httpcore.NetworkStream, timeout: float) -> tuple[float, float]:
    """How late the call is told a read of ``inner`` under ``timeout`` ended, and how long
    the read took in all."""
    call = _TimingCall(ends_in=5.0)
    token = current_call.set(call)
    started = time.monotonic()
    try:
        with pytest.raises(AttemptDeadlineReached):
            BoundedStream(inner).read(4096, timeout=timeout)
    finally:
        took = time.monotonic() - started
        current_call.reset(token)
    return call.late_by, took


def test_a_read_that_times_out_late_tells_the_call_how_late_past_its_limit() -> None:
    """A 0.1 s read that ends 0.3 s in ended 0.2 s past its limit (and no more than it took,
    less the limit): the call is told, for the breaker to weigh the timeout by the time
    the server had. One that times out in its time was not late at all."""
    late, took = _late_by_after(_LateTimeout(0.3), timeout=0.1)
    assert 0.2 <= late <= took - 0.1 + 0.001
    assert _late_by_after(_LateTimeout(0.0), timeout=0.1)[0] == 0.0


class _TLSinTLSLateTimeout(TLSinTLSStream):
    """httpcore's TLS-in-TLS stream (HTTPS through an HTTPS proxy), which gives each recv
    of a read the whole timeout: a read that times out 0.3 s in may have been fed by the
    server all along."""

    def __init__(self) -> None:  # (no sockets: only the read matters here)
        pass

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        time.sleep(0.3)
        raise httpcore.ReadTimeout("timed out")


def test_a_read_whose_timeout_is_per_recv_tells_no_lateness() -> None:
    """Its read may outlast its timeout with the process on time (review86: a server
    sending a TLS record piece by piece for 1 s gave a lateness of 1 s, and the breaker
    weighed the timeout as 0.1 s): nothing is told."""
    assert _late_by_after(_TLSinTLSLateTimeout(), timeout=0.1)[0] == 0.0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # (an asyncio loop to hold up)
async def test_async_a_read_over_a_socket_that_a_stuck_event_loop_ended_late_says_so() -> None:
    """Over a real socket to a server that says nothing: a 0.1 s read, while the event loop
    is stuck for 0.3 s (a callback that blocks), ends past its limit, and the call is
    told by how much."""
    import anyio

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    inner = await httpcore.AnyIOBackend().connect_tcp("127.0.0.1", port)
    call = _TimingCall(ends_in=5.0)
    token = current_call.set(call)
    started = time.monotonic()
    try:
        import asyncio

        asyncio.get_running_loop().call_later(0.02, time.sleep, 0.3)
        with pytest.raises(AttemptDeadlineReached):
            await AsyncBoundedStream(inner).read(4096, timeout=0.1)
    finally:
        took = time.monotonic() - started
        current_call.reset(token)
        await inner.aclose()
        await listener.aclose()
    assert 0.15 <= call.late_by <= took - 0.1 + 0.001


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
    call = _Call(ends_in=-0.1)
    token = current_call.set(call)
    try:
        await stream.write(b"", timeout=5.0)
        with pytest.raises(httpcore.PoolTimeout):  # (nothing sent yet)
            await stream.write(b"GET / HTTP/1.1\r\n\r\n", timeout=5.0)
        call.attempt_sent_at = time.monotonic() - 0.2
        with pytest.raises(httpcore.WriteTimeout):
            await stream.write(b"the body", timeout=5.0)
    finally:
        current_call.reset(token)
    assert inner.writes == [(b"", 5.0)]


class _Connector(httpcore.NetworkBackend):
    """Records the timeout of every connect and TLS handshake; its streams record too.
    With ``times_out``, a TCP connect times out (a server not taking connections)."""

    def __init__(self, *, times_out: bool = False) -> None:
        self.timeouts: list[float | None] = []
        self.times_out = times_out

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.NetworkStream:
        self.timeouts.append(timeout)
        if self.times_out:
            raise httpcore.ConnectTimeout("timed out")
        return _Handshaker(self)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: object = None
    ) -> httpcore.NetworkStream:
        self.timeouts.append(timeout)
        return _Handshaker(self)


class _Handshaker(_Recorder):
    def __init__(self, backend: _Connector) -> None:
        super().__init__()
        self._backend = backend

    def start_tls(
        self, ssl_context: object, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        self._backend.timeouts.append(timeout)
        return _Handshaker(self._backend)


class _AsyncConnector(httpcore.AsyncNetworkBackend):
    def __init__(self, *, times_out: bool = False) -> None:
        self.timeouts: list[float | None] = []
        self.times_out = times_out

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.AsyncNetworkStream:
        self.timeouts.append(timeout)
        if self.times_out:
            raise httpcore.ConnectTimeout("timed out")
        return _AsyncRecorder()

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: object = None
    ) -> httpcore.AsyncNetworkStream:
        self.timeouts.append(timeout)
        return _AsyncRecorder()


def test_a_connect_and_its_handshake_get_at_most_the_attempts_time_left() -> None:
    """Each, over TCP or a Unix socket, within the attempt's time."""
    inner = _Connector()
    token = current_call.set(_Call(ends_in=1.0))
    try:
        stream = BoundedBackend(inner).connect_tcp("127.0.0.1", 80, timeout=5.0)
        tls = stream.start_tls(None, "example.com", timeout=5.0)
        BoundedBackend(inner).connect_unix_socket("/run/api.sock", timeout=5.0)
    finally:
        current_call.reset(token)
    assert len(inner.timeouts) == 3
    for timeout in inner.timeouts:
        assert timeout is not None
        assert 0 < timeout <= 1.0
    # (the stream the handshake gives back is bounded too)
    assert isinstance(tls, BoundedStream)


def test_a_handshake_after_the_attempts_time_ran_out_is_not_tried() -> None:
    """The connect took the attempt's time: the handshake is a connect timeout, not
    tried (given no time, the ssl module refused it with a ValueError httpx does not
    know)."""
    inner = _Connector()
    token = current_call.set(_Call(ends_in=1.0))
    try:
        stream = BoundedBackend(inner).connect_tcp("127.0.0.1", 80, timeout=5.0)
        current_call.get().attempt_ends_at = time.monotonic() - 0.1  # type: ignore[union-attr]
        with pytest.raises(httpcore.ConnectTimeout, match="TLS handshake"):
            stream.start_tls(None, "example.com", timeout=5.0)
    finally:
        current_call.reset(token)
    assert len(inner.timeouts) == 1, "only the connect"


@pytest.mark.parametrize(("ends_in", "raised"), [(0.04, httpcore.PoolTimeout), (1.0, None)])
def test_a_connect_timeout_with_under_half_its_time_left_is_the_pools(
    ends_in: float, raised: type[Exception] | None
) -> None:
    """A connect given 0.04 s of its 1 s, the rest spent by the attempt waiting for a
    connection, that times out: the client's queue ran it out (a pool timeout, no
    evidence against the server). Given its whole time, it is the server's."""
    inner = _Connector(times_out=True)
    token = current_call.set(_Call(ends_in=ends_in))
    try:
        with pytest.raises(raised or httpcore.ConnectTimeout) as caught:
            BoundedBackend(inner).connect_tcp("127.0.0.1", 80, timeout=1.0)
    finally:
        current_call.reset(token)
    assert type(caught.value) is (raised or httpcore.ConnectTimeout)


@pytest.mark.anyio
async def test_async_a_connect_timeout_with_under_half_its_time_left_is_the_pools() -> None:
    token = current_call.set(_Call(ends_in=0.04))
    try:
        with pytest.raises(httpcore.PoolTimeout):
            await AsyncBoundedBackend(_AsyncConnector(times_out=True)).connect_tcp(
                "::1", 80, timeout=1.0
            )
    finally:
        current_call.reset(token)


def test_a_connect_with_no_time_left_is_a_pool_timeout_and_is_not_tried() -> None:
    """The attempt's time went on waiting for a connection (a full pool): nothing is sent,
    and the server, never asked, is not blamed with a connect timeout."""
    inner = _Connector()
    token = current_call.set(_Call(ends_in=-0.01))
    try:
        with pytest.raises(httpcore.PoolTimeout, match="max_connections"):
            BoundedBackend(inner).connect_tcp("127.0.0.1", 80, timeout=5.0)
        with pytest.raises(httpcore.PoolTimeout):
            BoundedBackend(inner).connect_unix_socket("/run/api.sock", timeout=5.0)
    finally:
        current_call.reset(token)
    assert inner.timeouts == []


@pytest.mark.anyio
async def test_async_a_connect_gets_at_most_the_attempts_time_left() -> None:
    inner = _AsyncConnector()
    token = current_call.set(_Call(ends_in=1.0))
    try:
        await AsyncBoundedBackend(inner).connect_tcp("127.0.0.1", 80, timeout=5.0)
        await AsyncBoundedBackend(inner).connect_unix_socket("/run/api.sock", timeout=5.0)
    finally:
        current_call.reset(token)
    assert len(inner.timeouts) == 2
    for timeout in inner.timeouts:
        assert timeout is not None
        assert 0 < timeout <= 1.0


@pytest.mark.anyio
async def test_async_a_connect_with_no_time_left_is_a_pool_timeout_and_is_not_tried() -> None:
    inner = _AsyncConnector()
    token = current_call.set(_Call(ends_in=-0.01))
    try:
        with pytest.raises(httpcore.PoolTimeout):
            await AsyncBoundedBackend(inner).connect_tcp("127.0.0.1", 80, timeout=5.0)
        with pytest.raises(httpcore.PoolTimeout):
            await AsyncBoundedBackend(inner).connect_unix_socket("/run/api.sock", timeout=5.0)
    finally:
        current_call.reset(token)
    assert inner.timeouts == []


class _Connection:
    """Stands for httpcore's HTTP/2 connection (no h2 state: nothing to retire)."""


def test_a_thread_that_read_before_waits_for_a_free_stream_no_longer_than_its_time() -> None:
    """Only the thread reading for everyone right now (the server lowered its limit)
    takes a stream slot back with no time limit. Once its read is over, a request of
    that same thread waits for a free stream no longer than its attempt has left."""
    semaphore = threading.Semaphore(0)  # (every stream taken)
    turn = _TurnToRead(BoundedStream(_Recorder()))
    connection = _Connection()
    slots = _StreamSlots(semaphore, turn, connection)
    outcome: list[object] = []

    def request() -> None:
        with turn:
            pass  # (this thread read for everyone before)
        token = current_call.set(_Call(ends_in=0.2))
        started = time.monotonic()
        try:
            slots.acquire()
            outcome.append("acquired")
        except httpcore.PoolTimeout as error:
            outcome.append(error)
        finally:
            current_call.reset(token)
        outcome.append(time.monotonic() - started)

    thread = threading.Thread(target=request, daemon=True)
    thread.start()
    thread.join(1.5)
    semaphore.release()  # (lets a thread that waited without limit go)
    thread.join(1.0)
    assert isinstance(outcome[0], httpcore.PoolTimeout), outcome
    assert outcome[1] < 0.2 + 0.5


def test_the_thread_reading_for_everyone_takes_slots_back_at_once_owing_those_not_free() -> None:
    """The server lowered its limit: httpcore, reading for everyone, takes slots back.
    It must not wait there (every request waits for its turn to read meanwhile, the
    ones whose streams would close too): a free slot is taken, one not free is owed,
    and the next streams to close pay what is owed before any slot comes free."""
    semaphore = threading.Semaphore(1)  # (one free; the rest are open streams)
    turn = _TurnToRead(BoundedStream(_Recorder()))
    slots = _StreamSlots(semaphore, turn, _Connection())
    token = current_call.set(_Call(ends_in=-0.1))  # (the reader's own time is over)
    try:
        with turn:
            started = time.monotonic()
            slots.acquire()  # free: taken
            slots.acquire()  # none free: owed
            slots.acquire()
            took = time.monotonic() - started
    finally:
        current_call.reset(token)
    assert took < 0.1
    assert slots.owed == 2
    slots.release()
    slots.release()  # (two streams closed: the debt is paid)
    assert not semaphore.acquire(blocking=False)
    slots.release()  # (a third: a slot comes free)
    assert semaphore.acquire(blocking=False)


def test_turns_to_read_go_in_the_order_they_were_asked() -> None:
    """A reader that read another request's answer asks for the turn again at once: the
    request that was waiting goes first (it finds its answer read, and need not wait
    out the reader's next read)."""
    turn = _TurnToRead(BoundedStream(_Recorder()))
    order: list[str] = []
    b_waits = threading.Event()

    def b() -> None:
        b_waits.set()
        with turn:
            order.append("b")

    with turn:
        other = threading.Thread(target=b, daemon=True)
        other.start()
        b_waits.wait(5)
        deadline = time.monotonic() + 5
        while not turn._waiting and time.monotonic() < deadline:
            time.sleep(0.001)
    with turn:  # (at once again, as httpcore's reader does)
        order.append("a again")
    other.join(5)
    assert order == ["b", "a again"]


def test_a_wait_for_the_turn_that_runs_out_leaves_the_line_and_the_next_one_still_goes() -> None:
    turn = _TurnToRead(BoundedStream(_Recorder()))
    outcomes: list[str] = []

    def wait_for_turn(ends_in: float | None, name: str) -> None:
        token = current_call.set(_Call(ends_in=ends_in)) if ends_in is not None else None
        try:
            with turn:
                outcomes.append(f"{name} read")
        except AttemptDeadlineReached:
            outcomes.append(f"{name} ran out")
        finally:
            if token is not None:
                current_call.reset(token)

    with turn:
        short = threading.Thread(target=wait_for_turn, args=(0.1, "short"), daemon=True)
        short.start()
        short.join(5)
        patient = threading.Thread(target=wait_for_turn, args=(None, "patient"), daemon=True)
        patient.start()
        deadline = time.monotonic() + 5
        while not turn._waiting and time.monotonic() < deadline:
            time.sleep(0.001)
    patient.join(5)
    assert outcomes == ["short ran out", "patient read"]
    assert not turn._held
    assert not turn._waiting


class _Interrupted(BaseException):
    """What a signal handler raises in the main thread (a Ctrl-C's KeyboardInterrupt)."""


def test_a_wait_for_the_turn_ended_by_a_signal_leaves_the_line() -> None:
    """A signal's exception (Ctrl-C) raised while the main thread waits for the turn:
    the waiter is out of the line, so the turn is not handed to nobody (every request
    on the connection then waited for it, a body read after its call for ever)."""
    turn = _TurnToRead(BoundedStream(_Recorder()))
    release_holder = threading.Event()
    holding = threading.Event()

    def holder() -> None:
        with turn:
            holding.set()
            release_holder.wait(5)

    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        other = threading.Thread(target=holder, daemon=True)
        other.start()
        holding.wait(5)
        main = threading.get_ident()

        def send_signal_once_waiting() -> None:
            deadline = time.monotonic() + 5
            while not turn._waiting and time.monotonic() < deadline:
                time.sleep(0.001)
            signal.pthread_kill(main, signal.SIGUSR1)

        threading.Thread(target=send_signal_once_waiting, daemon=True).start()
        with pytest.raises(_Interrupted), turn:
            pass
    finally:
        signal.signal(signal.SIGUSR1, previous)
        release_holder.set()
    other.join(5)
    assert not turn._waiting
    assert not turn._held
    got: list[str] = []

    def later() -> None:
        with turn:
            got.append("read")

    reader = threading.Thread(target=later, daemon=True)
    reader.start()
    reader.join(2)
    assert got == ["read"]


def test_a_turn_handed_over_as_the_waits_time_runs_out_is_passed_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The turn reaches a waiter at the moment its time runs out: it passes the turn to
    the next one in line rather than keep it."""
    import retrysafe.bounded_backend as bounded_backend
    from retrysafe.compiled import is_compiled

    if is_compiled():
        pytest.skip("the compiled module calls its own _acquired_in_time: no patch reaches it")
    turn = _TurnToRead(BoundedStream(_Recorder()))
    outcomes: list[str] = []

    def handed_then_out_of_time(ticket: threading.Lock) -> bool:
        ticket.acquire(timeout=5)  # (handed the turn...)
        return False  # (... as its time ran out)

    def waiter() -> None:
        try:
            with turn:
                outcomes.append("late waiter read")
        except AttemptDeadlineReached:
            outcomes.append("late waiter ran out")

    def patient() -> None:
        with turn:
            outcomes.append("patient read")

    with turn:
        monkeypatch.setattr(bounded_backend, "_acquired_in_time", handed_then_out_of_time)
        late = threading.Thread(target=waiter, daemon=True)
        late.start()
        while not turn._waiting:
            time.sleep(0.001)
        monkeypatch.undo()
        second = threading.Thread(target=patient, daemon=True)
        second.start()
        while len(turn._waiting) < 2:
            time.sleep(0.001)
    late.join(5)
    second.join(5)
    assert outcomes == ["late waiter ran out", "patient read"]
    assert not turn._held


def test_async_a_slot_that_comes_back_while_slots_are_owed_pays_them_first() -> None:
    """asyncio: a closed stream's slot handed to a waiting request whose task is then
    cancelled goes back by anyio's own release, past the slots' (which pays what is
    owed). A new request must still find no slot over the server's lowered limit."""
    import asyncio

    async def scenario() -> tuple[int, bool]:
        semaphore = httpcore._synchronization.AsyncSemaphore(3)
        slots = _AsyncStreamSlots(semaphore, _Connection())
        for _ in range(3):
            await slots.acquire()  # (three streams open: the limit)
        waiter = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0)  # (a fourth request waits for a stream)
        await slots.release()  # (a stream closes: its slot goes to the waiter)
        slots.taking_back = True  # (the server lowers its limit to one, in that turn)
        await slots.acquire()
        await slots.acquire()
        slots.taking_back = False
        waiter.cancel()  # (the waiting request's attempt is cut: its slot goes back)
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        owed = slots.owed
        try:
            await asyncio.wait_for(slots.acquire(), 0.2)
        except asyncio.TimeoutError:  # (not TimeoutError before Python 3.11)
            return owed, False
        return owed, True

    owed, got_one = asyncio.run(scenario())
    assert owed == 2
    assert not got_one  # (two streams are open against a limit of one)


class _StreamNumbers:
    """Stands for h2's state: the next stream number is the highest opened one's next,
    and a stream opens as its HEADERS are sent."""

    def __init__(self) -> None:
        self.highest = -1

    def get_next_available_stream_id(self) -> int:
        return self.highest + 2

    def send_headers(self, stream_id: int, headers: object) -> None:
        self.highest = max(self.highest, stream_id)


def test_two_threads_opening_streams_at_once_get_two_stream_numbers() -> None:
    """httpcore takes a stream's number and sends its HEADERS apart, without a lock: two
    threads took the same number, and the second's refused HEADERS closed the first's
    stream (trial80: a bare KeyError). The connection's opening turn runs from the
    number to the HEADERS."""
    state = _StreamNumbers()
    opening = _Opening(_Connection())
    number = _NumberedInTurn(state.get_next_available_stream_id, opening)
    headers = HeadersNoted(state.send_headers, _Connection())
    headers.opening = opening
    first_numbered = threading.Event()
    second_asked = threading.Event()
    numbers: list[int] = []

    def first() -> None:
        numbers.append(number())
        first_numbered.set()
        second_asked.wait(5)
        time.sleep(0.05)  # (the second thread is asking for its number meanwhile)
        headers(numbers[0], [])

    def second() -> None:
        first_numbered.wait(5)
        second_asked.set()
        numbers.append(number())
        headers(numbers[1], [])

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert numbers == [1, 3]


def test_after_h2_refuses_headers_no_request_is_sent_on_that_connection() -> None:
    """h2 may have fed the headers before an invalid one to its header compression, so
    the server's table and the client's disagree: a request already waiting on the
    connection is handed back to the pool, which sends it on another (review77: the
    server could not decode it), and the connection takes no new request."""
    import h2.exceptions

    sent: list[object] = []

    def send_headers(stream_id: int, headers: list[tuple[str, str]]) -> None:
        if ("te", "gzip") in headers:
            raise h2.exceptions.ProtocolError("Invalid value for TE header")
        sent.append(stream_id)

    connection = _Connection()
    noted = HeadersNoted(send_headers, connection)
    noted(1, [(":path", "/a")])
    with pytest.raises(h2.exceptions.ProtocolError):
        noted(3, [(":path", "/b"), ("te", "gzip")])
    with pytest.raises(httpcore.ConnectionNotAvailable):
        noted(5, [(":path", "/c")])
    assert sent == [1]
    assert connection._connection_error is True  # type: ignore[attr-defined]


class _Stalled(_Recorder):
    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        raise httpcore.ReadTimeout("the server went quiet")


class _AsyncStalled(_AsyncRecorder):
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        raise httpcore.ReadTimeout("the server went quiet")


class _H2Connection:
    """httpcore's HTTP/2 connection, as far as retiring it goes (its h2 state unknown:
    it is retired at once)."""

    def __init__(self, network_stream: object) -> None:
        self._network_stream = network_stream
        self._connection_error = False


class _PoolConnection:
    def __init__(self, connection: _H2Connection) -> None:
        self._connection = connection


class _Pool:
    def __init__(self) -> None:
        self.connections: list[_PoolConnection] = []


def _in_pool(stream: BoundedStream | AsyncBoundedStream, pool: _Pool) -> _H2Connection:
    connection = _H2Connection(stream)
    pool.connections.append(_PoolConnection(connection))
    stream.shared = True  # (it wrote the HTTP/2 preface)
    return connection


class _H2State:
    """h2's connection state, as far as sending a request's HEADERS goes."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def send_headers(self, stream_id: int, headers: object, end_stream: bool = False) -> None:
        self.sent.append(stream_id)


def test_over_http2_a_request_is_sent_when_its_headers_go_into_h2() -> None:
    """Another request's write may carry them: the HEADERS going into h2's buffer, in the
    request's own thread, are when it may have been sent, not a write of its own."""
    pool = _Pool()
    stream = BoundedStream(_Recorder(), weakref.ref(pool))  # type: ignore[arg-type]
    connection = _H2Connection(stream)
    state = connection._h2_state = _H2State()  # type: ignore[attr-defined]
    pool.connections.append(_PoolConnection(connection))
    call = _Call(ends_in=1.0)
    token = current_call.set(call)
    try:
        stream.write(H2_PREFACE, timeout=5.0)  # (the connection's first write)
        assert call.attempt_sent_at is None, "the preface is no request"
        before = time.monotonic()
        connection._h2_state.send_headers(1, [], end_stream=True)  # type: ignore[attr-defined]
    finally:
        current_call.reset(token)
    assert call.attempt_sent_at is not None
    assert call.attempt_sent_at >= before
    assert state.sent == [1]


def test_an_http2_connection_that_cannot_be_watched_sends_nothing() -> None:
    """Not found in its pool, its requests' sending could not be told: taken as unsent
    when cut, a POST another's write had carried would be sent twice. It fails before
    its preface, as a connect error (nothing sent)."""
    pool = _Pool()  # (lists no connection of this stream)
    inner = _Recorder()
    stream = BoundedStream(inner, weakref.ref(pool))  # type: ignore[arg-type]
    with pytest.raises(httpcore.ConnectError, match="http2=False"):
        stream.write(H2_PREFACE, timeout=5.0)
    assert inner.writes == []


@pytest.mark.parametrize(
    ("inner", "ends_in"), [(_Recorder, -0.1), (_Stalled, 1.0)], ids=["late", "timed_out"]
)
@pytest.mark.parametrize("sent", [True, False], ids=["sent", "sent_nothing"])
def test_an_http2_read_cut_by_the_attempt_retires_its_connection_if_its_call_sent(
    inner: type[_Recorder], ends_in: float, sent: bool
) -> None:
    """A cut request's HTTP/2 stream stays open: its connection takes no new request,
    whether the attempt was over before the read or ran out during it. A read cut for a
    call that sent nothing on the connection (a closing body reading its rest,
    body_watch) left no stream of its own open: the connection stays (review78: it was
    retired, with a server allowing one or two streams)."""
    pool = _Pool()
    stream = BoundedStream(inner(), weakref.ref(pool))  # type: ignore[arg-type]
    connection = _in_pool(stream, pool)
    call = _Call(ends_in=ends_in)
    if sent:
        call.attempt_sent_at = time.monotonic()  # (its HEADERS went: its stream is open)
    token = current_call.set(call)
    try:
        with pytest.raises(AttemptDeadlineReached):
            stream.read(4096, timeout=5.0)
    finally:
        current_call.reset(token)
    assert connection._connection_error is sent


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("inner", "ends_in"),
    [(_AsyncRecorder, -0.1), (_AsyncStalled, 1.0)],
    ids=["late", "timed_out"],
)
async def test_async_an_http2_read_cut_by_the_attempt_retires_its_connection(
    inner: type[_AsyncRecorder], ends_in: float
) -> None:
    pool = _Pool()
    stream = AsyncBoundedStream(inner(), weakref.ref(pool))  # type: ignore[arg-type]
    connection = _in_pool(stream, pool)
    token = current_call.set(_Call(ends_in=ends_in))
    try:
        with pytest.raises(AttemptDeadlineReached):
            await stream.read(4096, timeout=5.0)
    finally:
        current_call.reset(token)
    assert connection._connection_error is True
