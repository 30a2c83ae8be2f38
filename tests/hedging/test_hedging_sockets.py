"""Hedged requests over real sockets against the chaos server's ``/tail/{key}``.

Each test runs three times (``api`` fixture of tests/conftest.py, the ``Api`` helper):
sync Client (copies on threads),
AsyncClient on asyncio and on trio (copies as tasks). What the server saw is read
from its own log. Wall-clock assertions are loose bounds, never exact timings.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

import retrysafe
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
    # asyncio.timeout takes the cancel for its own and the task runs on.
    import asyncio

    async def run() -> int:
        policy = RetryPolicy(deadline=5, hedge_after=0.05)
        async with retrysafe.AsyncClient(policy=policy) as client:
            task = asyncio.create_task(client.get(chaos.url("/hang")))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return task.cancelling()

    assert asyncio.run(run()) == 1


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
