"""Hedged requests over real sockets against the chaos server's ``/tail/{key}``.

Each test runs three times (``api`` fixture of tests/conftest.py, the ``Api`` helper):
sync Client (copies on threads),
AsyncClient on asyncio and on trio (copies as tasks). What the server saw is read
from its own log. Wall-clock assertions are loose bounds, never exact timings.
"""

from __future__ import annotations

import contextvars
import queue
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

import retrysafe
from cancel_counts import count_after_a_cancel, end_of_a_timeout_cancelled_as_it_runs_out
from retrysafe import RetryPolicy
from retrysafe.chaos import KeyedChaos
from retrysafe.chaos.chance import draw
from retrysafe.chaos.state import ChaosRecord
from retrysafe.governor import BreakerSettings, BudgetSettings, Governor, GovernorSettings
from retrysafe.observe import RetryEvent

#: A copy goes after 50 ms; the slow requests take far longer.
HEDGED = RetryPolicy(hedge_after=0.05, attempt_timeout=5.0, deadline=8.0)
#: How long a call that hedging rescues may take at most on a loaded machine.
RESCUED_WITHIN = 1.5


def wait_for_log(
    chaos: KeyedChaos, done: Callable[[list[ChaosRecord]], bool], timeout: float = 5.0
) -> list[ChaosRecord]:
    """The key's log once ``done`` says it is complete (the server logs a disconnect
    when it notices it, a moment after the client has moved on)."""
    ends = time.monotonic() + timeout
    log = chaos.log()
    while not done(log) and time.monotonic() < ends:
        time.sleep(0.02)
        log = chaos.log()
    return log


def seed_where(key: str, slow: list[bool], fraction: float = 0.5) -> str:
    """A seed under which the key's requests 1, 2, ... are slow or fast as listed."""
    for number in range(10_000):
        seed = f"s{number}"
        if all(
            (draw(seed, key, attempt) < fraction) == want
            for attempt, want in enumerate(slow, start=1)
        ):
            return seed
    raise AssertionError("no seed found")


def test_a_hedged_copy_rescues_a_slow_request_and_the_loser_is_disconnected(
    api: Any, chaos: KeyedChaos
) -> None:
    seed = seed_where(chaos.key, [True, False])
    url = chaos.url("/tail/{key}", slow_fraction=0.5, slow_ms=4000, fast_ms=5, seed=seed)
    response = api.request("GET", url, policy=HEDGED)
    assert response.status_code == 200
    # The server's second request was the fast one. (It is nearly always the hedged
    # copy; on a starved machine the first copy may reach the server second.)
    assert response.json() == {"status": 200, "attempt": 2, "key": chaos.key, "slow": False}
    report = retrysafe.report_of(response)
    assert report is not None
    assert (report.hedges, report.attempts) == (1, 2)
    assert [r.outcome for r in report.history] == ["hedge_lost", "success"]
    assert report.winner == report.history[-1].attempt
    assert api.seconds < RESCUED_WITHIN  # not the 4 s the slow copy would have taken
    log = wait_for_log(chaos, lambda log: any(r.action == "disconnected" for r in log))
    by_attempt = {record.attempt: record for record in log}
    assert by_attempt[1].action == "disconnected"  # the server saw the loser leave
    assert by_attempt[1].detail.startswith("slow after")
    assert by_attempt[2].action == "status:200"
    assert len(log) == 2


def test_a_fast_answer_sends_no_copy(api: Any, chaos: KeyedChaos) -> None:
    url = chaos.url("/tail/{key}", slow_fraction=0, fast_ms=1)
    response = api.request("GET", url, policy=RetryPolicy(hedge_after=0.5))
    report = retrysafe.report_of(response)
    assert report is not None
    assert (report.hedges, report.winner, report.attempts) == (0, None, 1)
    assert len(chaos.log()) == 1


def test_a_post_without_an_idempotency_key_is_never_hedged(api: Any, chaos: KeyedChaos) -> None:
    url = chaos.url("/tail/{key}", slow_fraction=1, slow_ms=400)
    response = api.request("POST", url, policy=HEDGED, json={"order": 1})
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert (report.hedges, report.attempts) == (0, 1)
    time.sleep(0.1)
    assert [(r.method, r.action) for r in chaos.log()] == [("POST", "status:200")]


def test_a_keyed_posts_copies_carry_one_key_and_one_body(api: Any, chaos: KeyedChaos) -> None:
    seed = seed_where(chaos.key, [True, False])
    url = chaos.url("/tail/{key}", slow_fraction=0.5, slow_ms=4000, fast_ms=5, seed=seed)
    response = api.request(
        "POST", url, policy=HEDGED, json={"order": 1}, idempotency_key="order-1-secret"
    )
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.hedges == 1
    log = wait_for_log(chaos, lambda log: len(log) == 2)
    assert [r.method for r in log] == ["POST", "POST"]
    assert {r.idempotency_key for r in log} == {"order-1-secret"}
    assert len({r.body_sha256 for r in log}) == 1


def test_the_deadline_covers_every_copy(api: Any, chaos: KeyedChaos) -> None:
    url = chaos.url("/tail/{key}", slow_fraction=1, slow_ms=5000)
    policy = RetryPolicy(hedge_after=0.1, deadline=0.8, min_attempt_time=0.1)
    with pytest.raises((httpx.TimeoutException, retrysafe.ApiError)):
        api.request("GET", url, policy=policy)
    assert api.seconds < 0.8 + 0.7  # the deadline, plus slack for a loaded machine
    log = wait_for_log(chaos, lambda log: len(log) == 2 and all(r.action for r in log))
    assert [r.attempt for r in log] != []
    assert len(log) == 2  # the first and one copy; no retry past the deadline
    assert {r.action for r in log} == {"disconnected"}


def test_hedges_stop_while_the_breaker_is_not_closed(api: Any, chaos: KeyedChaos) -> None:
    governor = Governor(
        GovernorSettings(breaker=BreakerSettings(consecutive_failures=1, open_for=0.2))
    )
    options = {"governor": governor, "dependency": "svc"}
    down = chaos.url("/status/503")
    with pytest.raises((httpx.HTTPError, retrysafe.ApiError)):
        api.request("GET", down, policy=RetryPolicy(attempts=1), client_options=options)
    time.sleep(0.3)  # open_for passes: the next call is the half-open probe
    events: list[RetryEvent] = []
    options["hooks"] = [events.append]
    url = chaos.url("/tail/{key}", slow_fraction=1, slow_ms=300)
    response = api.request("GET", url, policy=HEDGED, client_options=options)
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.hedges == 0
    assert ("hedge", "refused", "circuit_not_closed") in [
        (e.kind, e.outcome, e.reason) for e in events
    ]
    assert [r.endpoint for r in chaos.log()] == ["status", "tail"]


def test_hedges_stop_when_the_retry_budget_is_empty(api: Any, chaos: KeyedChaos) -> None:
    budget = BudgetSettings(ratio=0.0, max_tokens=1.0, min_per_second=0.001)
    governor = Governor(GovernorSettings(budget=budget, breaker=None, limiter=None))
    events: list[RetryEvent] = []
    options = {"governor": governor, "hooks": [events.append]}
    url = chaos.url("/tail/{key}", slow_fraction=1, slow_ms=300)
    first = retrysafe.report_of(api.request("GET", url, policy=HEDGED, client_options=options))
    second = retrysafe.report_of(api.request("GET", url, policy=HEDGED, client_options=options))
    assert first is not None
    assert second is not None
    assert (first.hedges, second.hedges) == (1, 0)  # the one token went to the first copy
    assert ("hedge", "refused", "budget_exhausted") in [
        (e.kind, e.outcome, e.reason) for e in events
    ]
    log = wait_for_log(chaos, lambda log: len(log) == 3)
    assert len(log) == 3


def test_copies_go_from_threads_of_their_own_and_every_event_reaches_the_callers_thread() -> None:
    """Without hedge_after, exactly the usual path (sent from the caller's thread).
    With it, each copy goes from a thread of its own, while the caller's thread alone
    tells the engine what they got: every hook sees every event on the caller's thread
    (a tracer enters and leaves contexts where the call was made)."""
    threads: list[threading.Thread] = []
    hook_threads: list[tuple[str, str, int, str]] = []

    def slow_first(request: httpx.Request) -> httpx.Response:
        threads.append(threading.current_thread())
        if len(threads) == 1:
            time.sleep(0.3)
        return httpx.Response(200)

    def hook(event: RetryEvent) -> None:
        name = threading.current_thread().name
        hook_threads.append((event.kind, event.outcome, event.attempt, name))

    caller = threading.current_thread().name
    for policy in (RetryPolicy(), RetryPolicy(hedge_after=0.05)):
        threads.clear()
        hook_threads.clear()
        transport = httpx.MockTransport(slow_first)
        with retrysafe.Client(transport=transport, policy=policy, hooks=[hook]) as client:
            report = retrysafe.report_of(client.get("http://api.test/"))
        assert report is not None
        assert {name for *_, name in hook_threads} == {caller}
        if policy.hedge_after is None:
            assert threads == [threading.current_thread()]
            assert report.hedges == 0
        else:
            assert len(set(threads)) == 2  # each copy from a thread of its own...
            assert all(thread.name == "retrysafe-hedge" for thread in threads)  # ...not ours
            assert (report.hedges, report.winner) == (1, 2)
            assert [event[:3] for event in hook_threads] == [
                ("hedge", "sent", 2),
                ("attempt", "success", 2),
                ("attempt", "hedge_lost", 1),
                ("hedge", "lost", 1),
                ("hedge", "won", 2),
                ("success", "success", 2),
            ]


def test_a_request_that_cannot_be_hedged_is_sent_from_the_callers_thread() -> None:
    """A POST without an idempotency key is never sent twice: no thread for it."""
    threads: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        threads.append(threading.current_thread().name)
        return httpx.Response(200)

    policy = RetryPolicy(hedge_after=0.01)
    with retrysafe.Client(transport=httpx.MockTransport(answer), policy=policy) as client:
        client.post("http://api.test/", content=b"x")
    assert threads == [threading.current_thread().name]


#: A deadline shorter than the attempt's time: each copy's timeouts are what is left of
#: it, so a copy sent later has shorter ones than the copy still in flight.
_DEADLINE_BOUND = RetryPolicy(hedge_after=0.1, attempt_timeout=5.0, deadline=3.0)


def test_each_copy_is_a_request_of_its_own_whose_timeouts_no_later_copy_changes() -> None:
    """The hedged copy goes with less of the deadline left, so with shorter timeouts,
    set on a request of its own: the first copy, still in flight, keeps its own (one
    request shared by the copies would have the later copy rewrite them under it)."""
    seen: list[tuple[httpx.Request, dict[str, Any]]] = []
    first_when_second_came: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request, dict(request.extensions["timeout"])))
        if len(seen) == 1:
            time.sleep(0.4)
        else:
            first_when_second_came.append(dict(seen[0][0].extensions["timeout"]))
        return httpx.Response(200)

    transport = httpx.MockTransport(handler)
    with retrysafe.Client(transport=transport, policy=_DEADLINE_BOUND) as client:
        report = retrysafe.report_of(client.get("http://api.test/"))
    assert report is not None
    assert (report.hedges, report.winner) == (1, 2)
    (first, first_timeouts), (second, second_timeouts) = seen
    assert first is not second
    assert second_timeouts["read"] < first_timeouts["read"]  # (less of the deadline left)
    assert first_when_second_came == [first_timeouts]


@pytest.mark.anyio
async def test_async_each_copy_is_a_request_of_its_own_whose_timeouts_no_later_copy_changes() -> (
    None
):
    """As above, for the async client's copies (tasks)."""
    seen: list[tuple[httpx.Request, dict[str, Any]]] = []
    first_when_second_came: list[dict[str, Any]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request, dict(request.extensions["timeout"])))
        if len(seen) == 1:
            await anyio.sleep(0.4)
        else:
            first_when_second_came.append(dict(seen[0][0].extensions["timeout"]))
        return httpx.Response(200)

    transport = httpx.MockTransport(handler)
    async with retrysafe.AsyncClient(transport=transport, policy=_DEADLINE_BOUND) as client:
        report = retrysafe.report_of(await client.get("http://api.test/"))
    assert report is not None
    assert (report.hedges, report.winner) == (1, 2)
    (first, first_timeouts), (second, second_timeouts) = seen
    assert first is not second
    assert second_timeouts["read"] < first_timeouts["read"]
    assert first_when_second_came == [first_timeouts]


@pytest.mark.anyio
async def test_cancelling_a_hedging_call_cancels_every_copy(chaos: KeyedChaos) -> None:
    """The caller gives up (a cancel scope ends) while two copies are out: both go."""
    url = chaos.url("/tail/{key}", slow_fraction=1, slow_ms=5000)
    started = time.monotonic()
    async with retrysafe.AsyncClient(policy=HEDGED) as client:
        with anyio.move_on_after(0.4) as scope:
            await client.get(url)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 2.0
    log = wait_for_log(chaos, lambda log: len(log) == 2)
    assert [r.action for r in log] == ["disconnected", "disconnected"]


def test_a_copy_stuck_past_its_time_on_an_unbounded_transport_does_not_hold_the_call() -> None:
    """A transport the attempt deadline cannot reach (here a MockTransport that hangs):
    a copy long past its time is given up as timed out, and the call goes on."""
    numbers: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        numbers.append(len(numbers) + 1)
        number = numbers[-1]
        if number == 1:
            time.sleep(0.1)
            return httpx.Response(503)
        if number == 2:
            time.sleep(3.0)  # the hedged copy hangs far past its 0.3 s
        return httpx.Response(200)

    policy = RetryPolicy(
        hedge_after=0.05, attempt_timeout=0.3, deadline=5.0, backoff_base=0.01, backoff_cap=0.01
    )
    started = time.monotonic()
    with retrysafe.Client(transport=httpx.MockTransport(handler), policy=policy) as client:
        response = client.get("http://api.test/")
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert [r.outcome for r in report.history] == [
        "service_unavailable",
        "attempt_timeout",
        "success",
    ]
    assert elapsed < 2.5  # not the 3 s the stuck copy takes


def test_a_copy_given_up_as_overdue_while_another_is_in_flight_leaves_the_call_to_that_one() -> (
    None
):
    """The first copy hangs on a transport the attempt deadline cannot reach; it is given
    up once (timed out) while the hedged copy is still out, its answer that comes later
    is dropped, and the call takes the hedged copy's answer when it comes."""
    numbers: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        numbers.append(len(numbers) + 1)
        if numbers[-1] == 1:
            time.sleep(0.95)  # past its 0.3 s: given up at about 0.85 s, answers after
            return httpx.Response(200, stream=_ClosedStream(dropped_closed))
        time.sleep(0.75)  # sent at 0.4 s: answers at about 1.15 s, before its own end
        return httpx.Response(200)

    dropped_closed = threading.Event()
    policy = RetryPolicy(hedge_after=0.4, attempt_timeout=0.3, deadline=5.0)
    started = time.monotonic()
    with (
        retrysafe.Client(transport=httpx.MockTransport(handler), policy=policy) as client,
        client.stream("GET", "http://api.test/") as response,
    ):
        elapsed = time.monotonic() - started
        assert dropped_closed.is_set()  # (the answer nobody reads gives its connection back)
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert [(r.attempt, r.outcome) for r in report.history] == [
        (1, "attempt_timeout"),
        (2, "success"),
    ]
    assert (report.hedges, report.winner) == (1, 2)
    assert elapsed < 1.8


def test_a_copy_due_while_a_slow_hook_ran_goes_at_once() -> None:
    """The caller's thread runs the hooks: one that takes longer than the next copy's
    delay leaves that copy overdue when the round comes back to waiting, and it goes
    at once (a wait already over is no wait, not an error)."""
    numbers: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        numbers.append(len(numbers) + 1)
        if numbers[-1] == 1:
            time.sleep(1.0)
            return httpx.Response(200)
        return httpx.Response(503 if numbers[-1] == 2 else 200)

    def slow_hook(event: RetryEvent) -> None:
        if (event.kind, event.outcome) == ("attempt", "service_unavailable"):
            time.sleep(0.2)  # the third copy falls due (0.1 s after the second) meanwhile

    policy = RetryPolicy(hedge_after=0.1, max_hedges=2, attempts=3, deadline=5.0)
    transport = httpx.MockTransport(handler)
    started = time.monotonic()
    with retrysafe.Client(transport=transport, policy=policy, hooks=[slow_hook]) as client:
        response = client.get("http://api.test/")
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert (report.hedges, report.winner) == (2, 3)
    assert elapsed < 0.9  # not the 1 s of the first copy


def test_waiting_for_a_copys_result_blocks_at_least_a_millisecond_unless_none_is_left() -> None:
    """A wait that is over takes what is there at once (Python 3.10's timed get could
    block as if untimed); a shorter positive wait still blocks a little, so that a fake
    clock's standing time does not make the round spin."""
    from retrysafe.hedged_shell import _next_result

    results: queue.SimpleQueue[Any] = queue.SimpleQueue()
    with pytest.raises(queue.Empty):
        _next_result(results, 0.0)
    started = time.monotonic()
    with pytest.raises(queue.Empty):
        _next_result(results, 0.0001)
    assert time.monotonic() - started >= 0.0009
    results.put("answer")
    assert _next_result(results, 0.0) == "answer"


class _ClosedStream(httpx.SyncByteStream):
    """A response body that notes when it is closed."""

    def __init__(self, closed: threading.Event) -> None:
        self.closed = closed

    def __iter__(self) -> Iterator[bytes]:
        yield b"ok"

    def close(self) -> None:
        self.closed.set()


def _first_copy_answers_late(
    after: float, closed: threading.Event
) -> Callable[[httpx.Request], httpx.Response]:
    """A MockTransport handler: the first copy answers ``after`` seconds late, with a body
    that sets ``closed`` when closed; every later copy answers at once."""
    numbers: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        numbers.append(len(numbers) + 1)
        if numbers[-1] == 1:
            time.sleep(after)
            return httpx.Response(200, stream=_ClosedStream(closed))
        return httpx.Response(200, content=b"ok")

    return handler


def test_an_answer_a_losing_copy_gets_after_the_round_is_over_is_closed() -> None:
    """A copy the shell cannot cut (a transport the attempt deadline cannot reach) still
    answers after another copy won: nobody will read that answer, so it is closed (its
    connection goes back to its pool)."""
    late_closed = threading.Event()
    handler = _first_copy_answers_late(0.3, late_closed)

    policy = RetryPolicy(hedge_after=0.05, attempt_timeout=5.0, deadline=8.0)
    with (
        retrysafe.Client(transport=httpx.MockTransport(handler), policy=policy) as client,
        client.stream("GET", "http://api.test/") as response,
    ):
        report = retrysafe.report_of(response)
        assert report is not None
        assert report.winner == 2
        assert late_closed.wait(2.0)


@pytest.mark.anyio
async def test_async_a_copy_ends_with_its_own_time_on_a_transport_the_deadline_cannot_reach() -> (
    None
):
    """A hanging async copy is cancelled when its own time is up (0.35 s after it went),
    not only when it is given up as overdue half a second later."""
    numbers: list[int] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        numbers.append(len(numbers) + 1)
        if numbers[-1] == 1:
            await anyio.sleep(0.1)
            return httpx.Response(503)
        if numbers[-1] == 2:
            await anyio.sleep(3.0)
        return httpx.Response(200)

    policy = RetryPolicy(
        hedge_after=0.05, attempt_timeout=0.3, deadline=5.0, backoff_base=0.01, backoff_cap=0.01
    )
    started = time.monotonic()
    async with retrysafe.AsyncClient(transport=httpx.MockTransport(handler), policy=policy) as c:
        response = await c.get("http://api.test/")
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert report is not None
    assert [r.outcome for r in report.history] == [
        "service_unavailable",
        "attempt_timeout",
        "success",
    ]
    assert elapsed < 0.8  # the copy's 0.35 s and a retry, not its overdue 0.9 s


_CALLERS_VALUE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "callers_value", default=None
)


def test_each_copy_runs_in_a_copy_of_the_callers_context() -> None:
    """A transport (or anything under it) reading a context variable the caller set sees
    the caller's value in every copy, though each copy goes from a thread of its own."""
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(_CALLERS_VALUE.get())
        if len(seen) == 1:
            time.sleep(0.3)
        return httpx.Response(200)

    token = _CALLERS_VALUE.set("the caller's")
    try:
        with retrysafe.Client(transport=httpx.MockTransport(handler), policy=HEDGED) as client:
            report = retrysafe.report_of(client.get("http://api.test/"))
    finally:
        _CALLERS_VALUE.reset(token)
    assert report is not None
    assert report.hedges == 1
    assert seen == ["the caller's", "the caller's"]


def test_a_copy_whose_body_cannot_be_decoded_fails_as_an_attempt() -> None:
    """A body that cannot be decoded (a broken gzip stream) is the copy's failure, told
    to the engine like any other (the call goes on with the other copy), not an error
    that ends the call."""
    numbers: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        numbers.append(len(numbers) + 1)
        if numbers[-1] == 1:
            time.sleep(0.1)  # (the hedged copy is out by now)
            return httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=b"not gzip")
        time.sleep(0.1)
        return httpx.Response(200, content=b"ok")

    with retrysafe.Client(transport=httpx.MockTransport(handler), policy=HEDGED) as client:
        response = client.get("http://api.test/")
    assert response.text == "ok"
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.winner == 2
    assert report.history[0].attempt == 1
    assert report.history[0].outcome != "success"


class _TransportBug(Exception):
    pass


def test_an_unexpected_error_of_a_copy_is_raised_to_the_caller() -> None:
    """A copy's transport raising what is no transport error (a bug) ends the call with
    that error, though another copy could still answer."""

    numbers: list[int] = []

    def buggy_first(request: httpx.Request) -> httpx.Response:
        numbers.append(len(numbers) + 1)
        if numbers[-1] == 1:
            time.sleep(0.1)  # (the hedged copy is out by now)
            raise _TransportBug("a bug in the transport")
        time.sleep(0.1)
        return httpx.Response(200)

    transport = httpx.MockTransport(buggy_first)
    with (
        retrysafe.Client(transport=transport, policy=HEDGED) as client,
        pytest.raises(_TransportBug),
    ):
        client.get("http://api.test/")
    assert numbers == [1, 2]


@pytest.mark.anyio
async def test_async_an_unexpected_error_of_a_copy_is_raised_to_the_caller_as_itself() -> None:
    """As above for a task: the error itself, not an exception group of the copies'."""
    numbers: list[int] = []

    async def buggy_first(request: httpx.Request) -> httpx.Response:
        numbers.append(len(numbers) + 1)
        if numbers[-1] == 1:
            await anyio.sleep(0.1)
            raise _TransportBug("a bug in the transport")
        await anyio.sleep(0.1)
        return httpx.Response(200)

    transport = httpx.MockTransport(buggy_first)
    async with retrysafe.AsyncClient(transport=transport, policy=HEDGED) as client:
        with pytest.raises(_TransportBug):
            await client.get("http://api.test/")
    assert numbers == [1, 2]


class _AsyncStalledBody(httpx.AsyncByteStream):
    """A response body that stalls, and notes when it is closed."""

    def __init__(self, closed: list[bool]) -> None:
        self.closed = closed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await anyio.sleep(5.0)
        yield b"late"

    async def aclose(self) -> None:
        self.closed.append(True)


@pytest.mark.anyio
async def test_async_a_losing_copy_cancelled_while_reading_its_body_closes_its_response() -> None:
    closed: list[bool] = []
    numbers: list[int] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        numbers.append(len(numbers) + 1)
        if numbers[-1] == 1:  # headers at once, then a body that stalls
            return httpx.Response(200, stream=_AsyncStalledBody(closed))
        return httpx.Response(200, content=b"ok")

    transport = httpx.MockTransport(handler)
    async with retrysafe.AsyncClient(transport=transport, policy=HEDGED) as client:
        response = await client.get("http://api.test/")
    assert response.text == "ok"
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.winner == 2
    assert closed == [True]


def test_an_answer_that_came_in_while_the_winner_was_judged_is_closed() -> None:
    """The losing copy answers while the caller's thread still judges the winner (here a
    slow hook): the round is not over yet, so the answer waits for it, and the round
    closes it as it ends."""
    late_closed = threading.Event()
    handler = _first_copy_answers_late(0.15, late_closed)

    def slow_hook(event: RetryEvent) -> None:
        if (event.kind, event.outcome) == ("hedge", "won"):
            time.sleep(0.3)  # the first copy answers meanwhile

    policy = RetryPolicy(hedge_after=0.05, attempt_timeout=5.0, deadline=8.0)
    transport = httpx.MockTransport(handler)
    with (
        retrysafe.Client(transport=transport, policy=policy, hooks=[slow_hook]) as client,
        client.stream("GET", "http://api.test/") as response,
    ):
        report = retrysafe.report_of(response)
        assert report is not None
        assert report.winner == 2
        assert late_closed.is_set()


#: The attempt's own read timeout (0.3 s) is shorter than the gaps of the body the caller
#: then streams (0.4 s); the caller's (httpx's 5 s) is not.
_SHORT_ATTEMPT = RetryPolicy(hedge_after=2.0, attempt_timeout=0.3, deadline=5.0)


def test_the_caller_streams_the_winners_body_under_its_own_timeouts(chaos: KeyedChaos) -> None:
    url = chaos.url("/drip", chunks=2, interval_ms=400)
    with (
        retrysafe.Client(policy=_SHORT_ATTEMPT) as client,
        client.stream("GET", url) as response,
    ):
        assert response.status_code == 200
        assert len(response.read()) == 16


@pytest.mark.anyio
async def test_async_the_caller_streams_the_winners_body_under_its_own_timeouts(
    chaos: KeyedChaos,
) -> None:
    url = chaos.url("/drip", chunks=2, interval_ms=400)
    async with (
        retrysafe.AsyncClient(policy=_SHORT_ATTEMPT) as client,
        client.stream("GET", url) as response,
    ):
        assert response.status_code == 200
        assert len(await response.aread()) == 16


# -- what an abandoned hedged call leaves behind ------------------------------------------


class _RuleBug(Exception):
    pass


def _raising_rule(response: httpx.Response) -> None:
    raise _RuleBug("a bug in the caller's rule")


_ONE_CONNECTION = httpx.Limits(max_connections=1)
_POOL_WAIT = httpx.Timeout(5.0, pool=1.0)


def test_a_rule_that_raises_on_a_streamed_hedged_call_gives_its_connection_back(
    chaos: KeyedChaos,
) -> None:
    policy = RetryPolicy(hedge_after=1.0, deadline=5, rules=[_raising_rule])
    with retrysafe.Client(limits=_ONE_CONNECTION, timeout=_POOL_WAIT) as client:
        with (
            pytest.raises(_RuleBug),
            client.stream("GET", chaos.url("/status/200"), policy=policy),
        ):
            pass
        # the pool's one connection is free again: the next call gets it at once
        assert client.get(chaos.url("/status/200")).status_code == 200


@pytest.mark.anyio
async def test_a_rule_that_raises_on_an_async_streamed_hedged_call_gives_its_connection_back(
    chaos: KeyedChaos,
) -> None:
    policy = RetryPolicy(hedge_after=1.0, deadline=5, rules=[_raising_rule])
    async with retrysafe.AsyncClient(limits=_ONE_CONNECTION, timeout=_POOL_WAIT) as client:
        with pytest.raises(_RuleBug):
            async with client.stream("GET", chaos.url("/status/200"), policy=policy):
                pass
        assert (await client.get(chaos.url("/status/200"))).status_code == 200


def _reads_body(response: httpx.Response) -> None:
    """A rule that reads the body: a streamed answer is read before it is judged."""
    response.content  # noqa: B018


#: The body's read is bounded by the copy's time (0.4 s), not only by each read's timeout:
#: the server drips a chunk every 0.1 s for 1.5 s. No copy is due before that.
_BODY_READ_BY_A_RULE = RetryPolicy(
    hedge_after=2.0, attempt_timeout=0.4, deadline=5.0, attempts=2, rules=[_reads_body]
)


def test_a_streamed_body_a_rule_reads_ends_with_its_copys_time(chaos: KeyedChaos) -> None:
    url = chaos.url("/drip", chunks=15, interval_ms=100)
    started = time.monotonic()
    with (
        retrysafe.Client(policy=_BODY_READ_BY_A_RULE) as client,
        pytest.raises((httpx.TimeoutException, retrysafe.ApiError)),
        client.stream("GET", url),
    ):
        pass
    assert time.monotonic() - started < 1.4  # two attempts of 0.4 s, not a 1.5 s body


@pytest.mark.anyio
async def test_async_a_streamed_body_a_rule_reads_ends_with_its_copys_time(
    chaos: KeyedChaos,
) -> None:
    url = chaos.url("/drip", chunks=15, interval_ms=100)
    started = time.monotonic()
    async with retrysafe.AsyncClient(policy=_BODY_READ_BY_A_RULE) as client:
        with pytest.raises((httpx.TimeoutException, retrysafe.ApiError)):
            async with client.stream("GET", url):
                pass
    assert time.monotonic() - started < 1.4


class _CancelsAsItAnswers(httpx.AsyncBaseTransport):
    """Cancels the caller's scope as a copy's response comes back: the cancel lands
    while the answer is on its way to the hedging call, before it is taken."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.scope: anyio.CancelScope | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if self.scope is not None:
            self.scope.cancel()
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.anyio
async def test_an_answer_not_taken_before_a_cancel_gives_its_connection_back(
    chaos: KeyedChaos,
) -> None:
    cancelling = _CancelsAsItAnswers(httpx.AsyncHTTPTransport(limits=_ONE_CONNECTION))
    transport = retrysafe.AsyncRetryTransport(
        cancelling, policy=RetryPolicy(deadline=5, hedge_after=2.0)
    )
    async with httpx.AsyncClient(transport=transport, timeout=_POOL_WAIT) as client:
        with anyio.CancelScope() as scope:
            cancelling.scope = scope
            await client.send(client.build_request("GET", chaos.url("/status/200")), stream=True)
        cancelling.scope = None
        assert scope.cancelled_caught
        assert (await client.get(chaos.url("/status/200"))).status_code == 200


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling is 3.11+")
def test_a_cancel_from_outside_is_not_taken_back_by_a_hedged_call(chaos: KeyedChaos) -> None:
    # asyncio counts the cancels a task was asked for (Task.cancelling): a hedged call
    # that ends its copies must leave the caller's cancel counted, or an enclosing
    # asyncio.timeout takes the cancel for its own and the task runs on. The cancels land
    # while the copies wait, and around the moment the second copy is sent and connects,
    # where anyio's task group took the caller's cancel back in 3 rounds in 10; also
    # with an asyncio.timeout running out in the same turn (the count one short).
    import asyncio

    moments = [0.2] + [0.05 + step / 1000 for step in range(-3, 4) for _ in range(2)]

    async def run() -> tuple[list[int], list[str]]:
        policy = RetryPolicy(deadline=5, hedge_after=0.05)
        async with retrysafe.AsyncClient(policy=policy) as client:

            def hang() -> Awaitable[httpx.Response]:
                return client.get(chaos.url("/hang"))

            counts = [await count_after_a_cancel(hang, seconds) for seconds in moments]
            ended = [await end_of_a_timeout_cancelled_as_it_runs_out(hang, at) for at in moments]
            return counts, ended

    counts, ended = asyncio.run(run())
    assert counts == [1] * len(moments)
    assert ended == ["CancelledError"] * len(moments)


def test_hedged_calls_cancelled_at_any_moment_end_as_cancelled(chaos: KeyedChaos) -> None:
    """asyncio.wait_for around hedged calls, with timeouts landing anywhere in the round
    (before the copy, as the round's wait runs out, as an answer comes): each call ends
    as a timeout or a success, never with another error; the round's streams are closed."""
    import asyncio
    import gc
    import random
    import warnings

    outcomes: dict[str, int] = {}

    async def run() -> None:
        policy = RetryPolicy(deadline=5, hedge_after=0.02)
        async with retrysafe.AsyncClient(policy=policy) as client:
            url = chaos.url("/delay", ms=30)
            stop = asyncio.get_running_loop().time() + 1.5

            async def caller(seed: int) -> None:
                draws = random.Random(seed)
                while asyncio.get_running_loop().time() < stop:
                    try:
                        await asyncio.wait_for(client.get(url), timeout=draws.uniform(0, 0.06))
                        kind = "success"
                    except asyncio.TimeoutError:  # (not the built-in one before 3.11)
                        kind = "cancelled"
                    except Exception as exc:  # (what the test looks for)
                        kind = f"{type(exc).__name__}: {exc}"
                    outcomes[kind] = outcomes.get(kind, 0) + 1

            await asyncio.gather(*(caller(seed) for seed in range(20)))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(run())
        gc.collect()
    assert set(outcomes) <= {"success", "cancelled"}, outcomes
    assert outcomes.get("cancelled", 0) >= 100  # (the cancels did land, many times)
    unclosed = [str(w.message) for w in caught if "MemoryObject" in str(w.message)]
    assert unclosed == []
