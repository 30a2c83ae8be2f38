"""Pacing's queue is bounded by ``max_cooldown``, and a full queue lets nobody through.

A paced slot is never placed more than ``LimiterSettings.max_cooldown`` ahead. A
caller who finds the queue that deep gets no slot: it fails at once with
``PacingDelayed`` (nothing sent, nothing to give back) and is told when the queue
has room. It must not wait and send anyway: callers turned away like that would
all send together, in a burst the pacing exists to prevent.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time

import httpx
import pytest

import retrysafe
from retrysafe import Call, RetryPolicy
from retrysafe.decisions import Fail, HedgeAnswer, ReleasePacing
from retrysafe.governor import Governor, GovernorSettings, Limiter, LimiterSettings
from retrysafe.governor.guard import queue_full
from retrysafe.governor.limiter import QUEUE_FULL
from retrysafe.testing import FakeClock

#: 5 a second, one at once, and a queue at most 0.4 s deep: three slots (0, 0.2, 0.4 s).
PACED = GovernorSettings(
    budget=None,
    breaker=None,
    limiter=LimiterSettings(requests_per_second=5, burst=1, max_cooldown=0.4),
)
CALLERS = 8


class _Facts:
    """A fresh call's facts, as the governor reads them."""

    attempts = 0
    pacing_held = False
    cooldown_waited = 0.0

    def probe_lease(self) -> float:
        return 1.0


def test_a_full_queue_reserves_nothing_and_has_room_again_one_interval_later() -> None:
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(requests_per_second=10, max_cooldown=0.3), clock)
    waits = [limiter.reserve() for _ in range(6)]
    assert waits[:4] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert waits[4:] == [QUEUE_FULL, QUEUE_FULL]
    assert limiter.queued() == pytest.approx(3.0)  # the refused asks queued nothing
    clock.advance(0.1)
    assert limiter.reserve() == pytest.approx(0.3)  # room for one, at the queue's end
    assert limiter.reserve() == QUEUE_FULL


def test_the_governor_refuses_an_attempt_when_the_queue_is_full() -> None:
    governor = Governor(PACED, clock=FakeClock())
    guard = governor.guard("api")
    admissions = [guard.admit(_Facts()) for _ in range(4)]
    assert [a.pacing for a in admissions[:3]] == pytest.approx([0.0, 0.2, 0.4])
    assert not any(a.queue_full for a in admissions[:3])
    full = admissions[3]
    assert full.queue_full
    assert full.pacing == pytest.approx(0.2)  # room again within one interval
    assert "pacing queue is full" in full.detail
    assert "max_cooldown=0.4" in full.detail


def test_a_hedge_refused_by_a_full_queue_gives_back_nothing_it_did_not_take() -> None:
    governor = Governor(PACED, clock=FakeClock())
    guard = governor.guard("api")
    limiter = guard.limiter
    assert limiter is not None
    for _ in range(3):
        limiter.reserve()  # the slot now, and two queued behind it
    assert guard.answer_hedge() == HedgeAnswer("pacing")
    # The queued callers keep their slots: giving one back here would let a caller in early.
    assert limiter.queued() == pytest.approx(2.0)


@pytest.mark.parametrize("time_left", [5.0, 0.0])
def test_a_call_refused_by_a_full_queue_gives_back_no_slot(time_left: float) -> None:
    # Whether the call still has time (refused for the queue) or none (refused for its
    # deadline), the full queue reserved nothing, so nothing goes back.
    clock = FakeClock()
    request = httpx.Request("GET", "https://api.test/")
    call = Call(request, policy=RetryPolicy(deadline=5.0), clock=clock, observed=False)
    clock.advance(5.0 - time_left)
    full = queue_full(LimiterSettings(requests_per_second=5, max_cooldown=0.4))
    step = call.start_attempt(full)
    assert isinstance(step, Fail)
    expected = retrysafe.PacingDelayed if time_left else retrysafe.DeadlineExceeded
    assert type(step.error) is expected
    assert not any(isinstance(effect, ReleasePacing) for effect in call.take_effects())


def _paced_handler(sent: list[float], lock: threading.Lock) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        with lock:
            sent.append(time.monotonic())
        return httpx.Response(200)

    return httpx.MockTransport(handler)


def _check(sent: list[float], errors: list[Exception]) -> None:
    # Three slots: 0, 0.2 and 0.4 s. The other five callers are turned away, not sent.
    assert len(sent) == 3, sent
    assert len(errors) == CALLERS - 3
    for error in errors:
        assert isinstance(error, retrysafe.PacingDelayed), error
        assert error.attempts == 0
        assert error.retry_after == pytest.approx(0.2)
        assert "pacing queue is full" in str(error)
    sent.sort()
    gaps = [later - earlier for earlier, later in itertools.pairwise(sent)]
    # Slots are 0.2 s apart; calls sent together would be milliseconds apart. Half the
    # spacing leaves room for a busy machine waking a thread late.
    assert min(gaps) >= 0.1, gaps


def test_callers_beyond_the_queue_fail_at_once_instead_of_sending_together() -> None:
    sent: list[float] = []
    errors: list[Exception] = []
    lock = threading.Lock()
    client = retrysafe.Client(
        transport=_paced_handler(sent, lock),
        governor=Governor(PACED),
        policy=RetryPolicy(attempts=1, deadline=5.0),
    )
    start = threading.Barrier(CALLERS)

    def call() -> None:
        start.wait()
        try:
            client.get("http://api.test/")
        except retrysafe.ApiError as error:
            with lock:
                errors.append(error)

    threads = [threading.Thread(target=call) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    client.close()
    _check(sent, errors)


def test_async_callers_beyond_the_queue_fail_at_once_instead_of_sending_together() -> None:
    sent: list[float] = []
    lock = threading.Lock()

    async def main() -> list[Exception]:
        async with retrysafe.AsyncClient(
            transport=_paced_handler(sent, lock),
            governor=Governor(PACED),
            policy=RetryPolicy(attempts=1, deadline=5.0),
        ) as client:
            results = await asyncio.gather(
                *(client.get("http://api.test/") for _ in range(CALLERS)),
                return_exceptions=True,
            )
        return [result for result in results if isinstance(result, Exception)]

    errors = asyncio.run(main())
    _check(sent, errors)


# -- a slot given back from the middle of the queue ------------------------------------------


def test_only_the_last_slot_of_the_queue_is_given_back() -> None:
    """A slot with others queued behind it stays a gap: given back, the next caller would
    get the last one's slot and both would send at once."""
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(requests_per_second=10), clock)
    slots = [limiter.reserve_slot() for _ in range(4)]
    assert [wait for wait, _ in slots] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    limiter.release(slots[1][1])  # from the middle: kept as a gap
    wait, last = limiter.reserve_slot()
    assert wait == pytest.approx(0.4)  # after the last one, not on it
    limiter.release(last)  # the last one: the queue ends one interval sooner
    assert limiter.reserve_slot()[0] == pytest.approx(0.4)


def test_a_gap_goes_back_once_every_slot_behind_it_has() -> None:
    """Callers cancelled together give up first to last (a task group, ``asyncio.timeout``,
    ``gather``): each but the last leaves a gap, and the last one takes them all back."""
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(requests_per_second=10), clock)
    slots = [limiter.reserve_slot()[1] for _ in range(5)]  # 0, 0.1, ... 0.4 s
    for slot in slots[1:4]:
        limiter.release(slot)  # gaps: each has a slot queued behind it
    assert limiter.queued() == pytest.approx(4)
    limiter.release(slots[4])  # the last: it, then the gaps now last, go back
    assert limiter.queued() == pytest.approx(0)
    assert limiter.reserve_slot()[0] == pytest.approx(0.1)  # right after the one in use


def test_a_gap_behind_a_slot_still_in_use_stays_a_gap() -> None:
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(requests_per_second=10), clock)
    slots = [limiter.reserve_slot()[1] for _ in range(4)]  # 0, 0.1, 0.2, 0.3 s
    limiter.release(slots[1])  # a gap, with 0.2 still waiting behind it
    limiter.release(slots[3])  # the last goes back; 0.2 is now last, and in use
    assert limiter.queued() == pytest.approx(2)
    assert limiter.reserve_slot()[0] == pytest.approx(0.3), "after 0.2, never on it"


@pytest.mark.parametrize("seed", range(60))
def test_the_queue_ends_at_the_latest_slot_still_held_whatever_order_callers_give_up(
    seed: int,
) -> None:
    """Random reservations, give-ups in any order and time passing, at rates and clock
    readings of every size: the queue never holds a slot nobody will use past the
    latest one still held, and never ends before it (two callers on one slot)."""
    chance = random.Random(seed)
    rate = chance.choice([0.7, 3.0, 7.0, 10.0, 123.0])
    clock = FakeClock()
    clock.advance(chance.choice([0.0, 12345.678, 3.3e6, 8.6e7, 1.7e9]))
    limiter = Limiter(LimiterSettings(requests_per_second=rate, burst=1, max_cooldown=300), clock)
    held: list[float] = []
    for _ in range(200):
        roll = chance.random()
        if roll < 0.45:
            wait, slot = limiter.reserve_slot()
            if 0 < wait < QUEUE_FULL:
                held.append(slot)
        elif roll < 0.85 and held:
            limiter.release(held.pop(chance.randrange(len(held))))
        else:
            clock.advance(chance.random() * 3 / rate)
        now = clock.monotonic()
        held = [slot for slot in held if slot > now]
        ends_in = limiter.queued() / rate
        if held:
            assert ends_in == pytest.approx(max(held) - now, abs=1e-6)
        else:  # (at most the slot of a caller sending now, which nobody gives back)
            assert ends_in <= 1 / rate + 1e-6


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_queue_cancelled_together_leaves_no_wait_for_the_next_caller() -> None:
    """The whole queue gives up at once (its callers' deadline, a task group cancelled):
    the next caller is not made to wait for slots nobody will use."""
    paced = GovernorSettings(limiter=LimiterSettings(requests_per_second=20))
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        governor=Governor(paced),
    ) as client:
        tasks = [asyncio.create_task(client.get("http://svc.test/")) for _ in range(12)]
        await asyncio.sleep(0.02)  # one sent; eleven queued, up to 0.55 s ahead
        for task in tasks:  # first to last, as a task group cancels
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        started = time.monotonic()
        await client.get("http://svc.test/")
        waited = time.monotonic() - started
    assert waited < 0.3, f"waited {waited:.2f} s for slots given up"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_caller_that_gives_up_mid_queue_never_makes_two_send_at_once() -> None:
    sent: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        return httpx.Response(200)

    paced = GovernorSettings(limiter=LimiterSettings(requests_per_second=10))
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(handler), governor=Governor(paced)
    ) as client:
        tasks = []
        for _ in range(4):  # one sends now; three queue for 0.1, 0.2 and 0.3 s
            tasks.append(asyncio.create_task(client.get("http://svc.test/")))
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)
        tasks[1].cancel()  # the first in the queue gives up
        await asyncio.sleep(0.01)
        tasks.append(asyncio.create_task(client.get("http://svc.test/")))
        await asyncio.gather(*tasks, return_exceptions=True)
    assert len(sent) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(sorted(sent))]
    # 0.1 s apart; sent together they would be milliseconds apart (half the spacing leaves
    # room for a busy machine waking the loop late)
    assert min(gaps) >= 0.05, gaps
