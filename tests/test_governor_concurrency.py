"""One governor shared by many threads and tasks: no lost updates, one probe at a time."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import anyio
import anyio.lowlevel
import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.governor import (
    BreakerSettings,
    BudgetSettings,
    Governor,
    GovernorSettings,
    RetryBudget,
)
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio
THREADS = 16
TASKS = 1000
DEPENDENCY = "http://api.test:80"


def test_sixteen_threads_never_overspend_the_budget() -> None:
    budget = RetryBudget(BudgetSettings(max_tokens=500, ratio=0, min_per_second=0), FakeClock())
    barrier = threading.Barrier(THREADS)

    def spend() -> int:
        barrier.wait()
        return sum(budget.try_spend() for _ in range(100))

    with ThreadPoolExecutor(THREADS) as pool:
        granted = sum(pool.map(lambda _: spend(), range(THREADS)))
    assert granted == 500
    assert budget.tokens == 0


def opened_governor(clock: FakeClock) -> Governor:
    """A governor whose breaker for DEPENDENCY has just become half-open."""
    settings = GovernorSettings(
        budget=None, breaker=BreakerSettings(consecutive_failures=5, open_for=20.0)
    )
    governor = Governor(settings, clock=clock)
    breaker = governor.guard(DEPENDENCY).breaker
    assert breaker is not None
    for _ in range(breaker.settings.consecutive_failures):
        breaker.record(breaker.acquire(probe_lease=1), "unhealthy")
    clock.advance(breaker.settings.open_for)
    assert breaker.state == "half_open"
    return governor


class InFlight:
    """Counts concurrent requests at the server and remembers the most seen at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.total = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.total += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


def test_sixteen_threads_get_exactly_one_half_open_probe() -> None:
    # The probe's answer is held until every other thread has had its answer: any of
    # them admitted beside the probe would be in flight with it. (Not held, a thread a
    # busy machine started late would find the circuit closed by then, and rightly send.)
    clock = FakeClock()
    governor = opened_governor(clock)
    flight = InFlight()
    refused = threading.Semaphore(0)

    def handler(request: httpx.Request) -> httpx.Response:
        flight.enter()
        if flight.total == 1:  # the probe
            for _ in range(THREADS - 1):
                assert refused.acquire(timeout=10), "a thread neither refused nor sent"
        flight.leave()
        return httpx.Response(200)

    client = retrysafe.Client(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor
    )
    barrier = threading.Barrier(THREADS)

    def call(_: int) -> str:
        barrier.wait()
        try:
            client.get("http://api.test/")
        except retrysafe.CircuitOpen:
            refused.release()
            return "circuit_open"
        refused.release()  # (a second probe: lets the first go on, to fail below)
        return "sent"

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(call, range(THREADS)))
    assert flight.most == 1
    assert flight.total == results.count("sent") == 1
    assert results.count("circuit_open") == THREADS - 1
    assert governor.guard(DEPENDENCY).breaker.state == "closed"  # type: ignore[union-attr]


async def test_a_thousand_tasks_get_exactly_one_half_open_probe() -> None:
    # As above: the probe's answer waits for every other task's.
    clock = FakeClock()
    governor = opened_governor(clock)
    flight = InFlight()
    outcomes: list[str] = []
    all_others_answered = anyio.Event()

    def answered(outcome: str) -> None:
        outcomes.append(outcome)
        if len(outcomes) == TASKS - 1:
            all_others_answered.set()

    async def handler(request: httpx.Request) -> httpx.Response:
        flight.enter()
        if flight.total == 1:  # the probe
            with anyio.fail_after(10):
                await all_others_answered.wait()
        flight.leave()
        return httpx.Response(200)

    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor
    ) as client:

        async def call() -> None:
            try:
                await client.get("http://api.test/")
            except retrysafe.CircuitOpen:
                answered("circuit_open")
            else:
                answered("sent")

        async with anyio.create_task_group() as group:
            for _ in range(TASKS):
                group.start_soon(call)
    assert flight.most == 1
    assert flight.total == outcomes.count("sent") == 1
    assert outcomes.count("circuit_open") == TASKS - 1


async def test_a_thousand_tasks_spend_exactly_the_budget() -> None:
    clock = FakeClock()
    settings = GovernorSettings(
        budget=BudgetSettings(max_tokens=100, ratio=0, min_per_second=0), breaker=None
    )
    flight = InFlight()

    async def handler(request: httpx.Request) -> httpx.Response:
        flight.enter()
        await anyio.lowlevel.checkpoint()
        flight.leave()
        return httpx.Response(503)

    reasons: list[str] = []
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(handler),
        clock=clock,
        governor=Governor(settings, clock=clock),
        policy=RetryPolicy(attempts=2),
    ) as client:

        async def call() -> None:
            try:
                await client.get("http://api.test/")
            except (retrysafe.ServerError, retrysafe.BudgetExhausted) as error:
                reasons.append(error.reason)

        async with anyio.create_task_group() as group:
            for _ in range(TASKS):
                group.start_soon(call)
    assert flight.total == TASKS + 100
    assert reasons.count("attempts_exhausted") == 100
    assert reasons.count("budget_exhausted") == TASKS - 100


async def _at_once(
    handler: Callable[[httpx.Request], Awaitable[httpx.Response]], calls: int = 50
) -> tuple[list[str], str]:
    """``calls`` calls at once (the default governor) to ``handler``: each call's end (its
    status, or its error's reason) and the breaker's state after."""
    clock = FakeClock()
    ends: list[str] = []
    governor = Governor(clock=clock)
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor
    ) as client:

        async def call(caller: int) -> None:
            try:
                response = await client.get("http://api.test/", params={"caller": caller})
                ends.append(str(response.status_code))
            except retrysafe.ApiError as error:
                ends.append(error.reason)

        async with anyio.create_task_group() as group:
            for caller in range(calls):
                group.start_soon(call, caller)
    breaker = governor.guard(DEPENDENCY).breaker
    assert breaker is not None
    return ends, breaker.state


def _blip() -> Callable[[httpx.Request], Awaitable[httpx.Response]]:
    """A server that answers each caller's first request 503, and every later one 200."""
    failed_once: set[str] = set()

    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.lowlevel.checkpoint()  # (every first attempt is in flight together)
        caller = request.url.params["caller"]
        if caller in failed_once:
            return httpx.Response(200)
        failed_once.add(caller)
        return httpx.Response(503)

    return handler


async def test_a_blip_every_call_in_flight_retries_through_leaves_the_circuit_closed() -> None:
    """Fifty calls at once each get one 503, then a 200: a blip a retry fixes. Each call's
    first failure waits for its retry's outcome before it counts, so the breaker (20
    failing calls in a row by default) stays closed and every retry goes out. (It
    counted at once: the twentieth opened the circuit, and every call failed.)"""
    ends, state = await _at_once(_blip())
    assert (ends, state) == (["200"] * 50, "closed")


async def test_a_blip_wider_than_the_budget_fails_only_the_calls_it_refuses() -> None:
    """A hundred calls at once each get one 503, then a 200; the budget (60 tokens by
    default, and what it earns back while the retries wait) grants 60 or a few more
    retries and refuses the rest. The refusals are load protection's own choice, not
    news of the server: they leave the breaker closed, and every granted retry goes out
    and succeeds. (They counted as failures: the twentieth opened the circuit, which
    then refused the granted retries too, and every call failed.)"""
    ends, state = await _at_once(_blip(), calls=100)
    assert state == "closed"
    assert set(ends) == {"200", "budget_exhausted"}
    assert 60 <= ends.count("200") < 100


async def test_an_outage_seen_by_more_calls_than_the_budget_still_opens_the_circuit() -> None:
    """The same hundred calls against a server failing every attempt: the retries the
    budget grants fail too, which counts their calls, and the circuit opens."""

    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.lowlevel.checkpoint()
        return httpx.Response(503)

    ends, state = await _at_once(handler, calls=100)
    assert state == "open"
    assert "circuit_open" in ends


async def test_an_outage_seen_by_every_call_in_flight_still_opens_the_circuit() -> None:
    """The same fifty calls against a server failing every attempt: their retries fail
    too, which counts them, and the circuit opens; calls refused by it say so."""

    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.lowlevel.checkpoint()
        return httpx.Response(503)

    ends, state = await _at_once(handler)
    assert state == "open"
    assert "circuit_open" in ends
