"""A paced retry reserves its slot when it is granted, if the slot lies beyond its wait.

With pacing on (``LimiterSettings(requests_per_second=...)``), every attempt takes a
slot in the dependency's queue. A retry asked for its slot only after its backoff
could find, by then, the queue reaching past its deadline: it slept only to give up
(``PacingDelayed``), and callers who arrived during its wait went ahead of it. So the
governor's grant of a retry reserves the retry's slot at once when that slot comes
later than the retry's own wait: the retry waits for the slot (holding it), or, when
the slot lies past what its deadline allows, gives up at once with the slot given
back. A slot that comes within the wait is not held: it would stand empty while
others queue behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

import retrysafe
from retrysafe import Call, RetryPolicy
from retrysafe.decisions import (
    Admission,
    AskRetry,
    AttemptPlan,
    EmitEvent,
    Fail,
    RefundBudget,
    ReleasePacing,
    RetryAnswer,
    Wait,
)
from retrysafe.governor import BudgetSettings, Governor, GovernorSettings, LimiterSettings
from retrysafe.governor.fleet_guard import FleetGuard
from retrysafe.governor.limiter import Limiter
from retrysafe.testing import FakeClock

#: One a second, one at once, no breaker: pacing alone decides.
ONE_A_SECOND = GovernorSettings(
    budget=None, breaker=None, limiter=LimiterSettings(requests_per_second=1.0, burst=1)
)


#: The dependency the clients' calls to http://api.test/ are counted under.
API = "http://api.test:80"


def _limiter(governor: Governor) -> Limiter:
    limiter = governor.guard(API).limiter
    assert limiter is not None
    return limiter


# -- the governor's answer -----------------------------------------------------------------


def test_a_slot_beyond_the_wait_is_reserved_with_the_grant() -> None:
    governor = Governor(ONE_A_SECOND, clock=FakeClock())
    guard = governor.guard(API)
    limiter = _limiter(governor)
    limiter.reserve()  # the burst's token, taken by the attempt that failed
    answer = guard.answer_retry(AskRetry(0.2, spends_budget=True), 0.0)
    assert answer.refusal is None
    assert answer.pacing == pytest.approx(1.0)
    assert "next paced slot is 1.00 s away" in answer.detail
    assert limiter.queued() == pytest.approx(1.0)  # held for the retry


def test_a_slot_within_the_wait_is_not_held() -> None:
    governor = Governor(ONE_A_SECOND, clock=FakeClock())
    guard = governor.guard(API)
    limiter = _limiter(governor)
    limiter.reserve()
    assert guard.answer_retry(AskRetry(1.5, spends_budget=True), 0.0) == RetryAnswer()
    assert limiter.queued() == 0.0  # the slot it looked at went back


def test_the_limiter_reserves_a_slot_only_beyond_the_wait_under_one_lock() -> None:
    # (review: reserved and given back, a slot another caller queued behind meanwhile
    # stayed a gap, pushing that caller one interval further out)
    clock = FakeClock()
    limiter = Limiter(LimiterSettings(requests_per_second=1.0, max_cooldown=3.0), clock)
    limiter.reserve()  # the burst's token
    assert limiter.reserve_slot_beyond(1.5) is None  # the next slot, at 1 s, is within
    assert limiter.queued() == 0.0
    assert limiter.reserve_slot_beyond(0.5) == (pytest.approx(1.0), pytest.approx(1.0))
    assert limiter.reserve() == pytest.approx(2.0)  # queued right behind it: no gap
    limiter.reserve()
    assert limiter.reserve_slot_beyond(0.0) is None  # a full queue reserves nothing
    assert limiter.queued() == pytest.approx(3.0)


def test_a_full_queue_grants_the_retry_without_a_slot() -> None:
    # The queue has no room now; the retry asks again for a slot after its wait.
    settings = GovernorSettings(
        budget=None,
        breaker=None,
        limiter=LimiterSettings(requests_per_second=1.0, max_cooldown=2.0),
    )
    governor = Governor(settings, clock=FakeClock())
    limiter = _limiter(governor)
    for _ in range(3):
        limiter.reserve()
    queued = limiter.queued()
    answer = governor.guard(API).answer_retry(AskRetry(0.2, spends_budget=True), 0.0)
    assert answer == RetryAnswer()
    assert limiter.queued() == queued


def test_a_retry_the_budget_refuses_reserves_no_slot() -> None:
    settings = GovernorSettings(
        budget=BudgetSettings(max_tokens=1, min_per_second=0, ratio=0),
        breaker=None,
        limiter=LimiterSettings(requests_per_second=1.0),
    )
    governor = Governor(settings, clock=FakeClock())
    guard = governor.guard(API)
    limiter = _limiter(governor)
    limiter.reserve()
    assert guard.answer_retry(AskRetry(0.2, spends_budget=True), 0.0).pacing > 0
    queued = limiter.queued()
    refused = guard.answer_retry(AskRetry(0.2, spends_budget=True), 0.0)
    assert refused.refusal == "budget_exhausted"
    assert limiter.queued() == queued


def test_a_fleets_retry_holds_its_slot_in_the_fleets_schedule() -> None:
    from tests.fleet.test_fleet_guard import guard_with

    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=50, burst=5))
    guard, fleet, _ = guard_with(settings, pacing_wait=0.5)
    assert isinstance(guard, FleetGuard)
    answer = guard.answer_retry(AskRetry(0.1, spends_budget=False), 0.0)
    assert (answer.pacing, answer.slot) == (0.5, 1000.5)
    assert "the fleet's next paced slot is 0.50 s away" in answer.detail
    assert fleet.told == [("reserve", 50, 5, 0.1)]  # only a slot beyond its 0.1 s wait
    assert guard.answer_retry(AskRetry(0.8, spends_budget=False), 0.0) == RetryAnswer()
    # Within the wait: the fleet reserved nothing, so nothing goes back (review73: it took
    # the slot and gave it back, and a process queuing in between was left behind a gap).
    assert fleet.told[1:] == [("reserve", 50, 5, 0.8)]


# -- the engine ----------------------------------------------------------------------------


def _failed_once(clock: FakeClock, **policy: object) -> tuple[Call, AskRetry]:
    """A GET whose first attempt got a 503: the call asks to retry."""
    call = Call(
        httpx.Request("GET", "https://api.test/items"),
        policy=RetryPolicy(**policy),  # type: ignore[arg-type]
        clock=clock,
        observed=False,
    )
    plan = call.start_attempt()
    assert isinstance(plan, AttemptPlan)
    ask = call.attempt_returned(plan, httpx.Response(503))
    assert isinstance(ask, AskRetry)
    call.take_effects()
    return call, ask


def _effects(call: Call) -> list[object]:
    """The call's effects on the governor (its events left out)."""
    return [effect for effect in call.take_effects() if not isinstance(effect, EmitEvent)]


def test_the_retry_waits_for_its_slot_and_starts_on_it_without_another() -> None:
    clock = FakeClock(randoms=[0.5])
    call, ask = _failed_once(clock, deadline=10.0)
    assert ask.wait == pytest.approx(0.125)
    assert call.retry_answered(ask, RetryAnswer(pacing=2.0, slot=7.0)) == Wait(2.0)
    assert call.pacing_held  # the governor reserves no second slot for it
    assert _effects(call) == []
    clock.sleep(2.0)
    assert isinstance(call.start_attempt(Admission()), AttemptPlan)
    assert not call.pacing_held
    assert _effects(call) == []  # its slot was used, not given back


def test_a_slot_past_the_deadline_ends_the_call_at_once_and_goes_back() -> None:
    clock = FakeClock(randoms=[0.5])
    call, ask = _failed_once(clock, deadline=2.0, min_attempt_time=0.5)
    step = call.retry_answered(ask, RetryAnswer(pacing=1.6, slot=7.0, detail="its next slot"))
    assert isinstance(step, Fail)
    assert isinstance(step.error, retrysafe.PacingDelayed)
    assert step.error.retry_after == pytest.approx(1.6)
    assert "its next slot" in str(step.error)
    effects = call.take_effects()
    assert ReleasePacing(7.0) in effects
    assert RefundBudget(1.0) in effects  # the token spent on the retry never sent
    assert not call.pacing_held
    assert clock.monotonic() == 0.0  # no sleep into a slot it could not use


def test_a_cooldown_met_after_the_wait_gives_the_held_slot_back() -> None:
    clock = FakeClock(randoms=[0.5, 0.0])
    call, ask = _failed_once(clock, deadline=10.0)
    call.retry_answered(ask, RetryAnswer(pacing=1.0, slot=7.0))
    clock.sleep(1.0)
    assert isinstance(call.start_attempt(Admission(cooldown=2.0)), Wait)
    assert _effects(call) == [ReleasePacing(7.0)]
    assert not call.pacing_held


# -- through a client ----------------------------------------------------------------------


class _CrowdedClock(FakeClock):
    """A fake clock on which another caller takes the dependency's next paced slot
    whenever this one sleeps."""

    def __init__(self, limiter: list[Limiter], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._limiter = limiter

    def sleep(self, seconds: float) -> None:
        for limiter in self._limiter:
            limiter.reserve()
        super().sleep(seconds)


def _crowded_client(
    deadline: float, hooks: list[Callable[[retrysafe.RetryEvent], None]] | None = None
) -> tuple[retrysafe.Client, _CrowdedClock, list[float], Limiter]:
    """A client whose first attempt gets a 503, the second a 200, with one more caller
    queued for the dependency before the first attempt ends, and another arriving as
    the retry sleeps its backoff."""
    limiters: list[Limiter] = []
    clock = _CrowdedClock(limiters, randoms=[0.5])
    governor = Governor(ONE_A_SECOND, clock=clock)
    limiters.append(_limiter(governor))
    sent: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(clock.monotonic())
        if len(sent) == 1:
            limiters[0].reserve()  # a caller queued behind the first attempt
            return httpx.Response(503)
        return httpx.Response(200)

    client = retrysafe.Client(
        transport=httpx.MockTransport(handler),
        clock=clock,
        governor=governor,
        policy=RetryPolicy(deadline=deadline, backoff_base=1.0),
        hooks=hooks or (),
    )
    return client, clock, sent, limiters[0]


def test_a_retry_keeps_its_place_in_the_queue_through_its_backoff() -> None:
    # Queue after the 503: another caller at 1 s, the retry at 2 s. The backoff drawn is
    # 0.5 s; a caller arriving during it queues behind the retry (3 s), not ahead of it.
    client, clock, sent, _ = _crowded_client(deadline=2.6)
    response = client.get("http://api.test/items")
    assert response.status_code == 200
    assert sent == [0.0, pytest.approx(2.0)]
    assert clock.sleeps == [pytest.approx(2.0)]  # one wait, for the slot
    report = retrysafe.report_of(response)
    assert report.history[0].wait == pytest.approx(0.5)  # the call's own; the rest is pacing's


def test_the_slot_beyond_the_backoff_is_told_as_a_held_wait() -> None:
    # The retry event keeps the call's own wait (its backoff, 0.5 s); the 1.5 s more its
    # held slot costs is load protection's, told as a held event as at any attempt's start.
    events: list[retrysafe.RetryEvent] = []
    client, _, _, _ = _crowded_client(deadline=2.6, hooks=[events.append])
    client.get("http://api.test/items")
    told = [(e.kind, e.reason, round(e.wait, 6)) for e in events if e.kind in ("retry", "held")]
    assert told == [("retry", "", 0.5), ("held", "pacing", 1.5)]


def test_a_retry_whose_slot_lies_past_the_deadline_gives_up_without_sleeping() -> None:
    client, clock, sent, limiter = _crowded_client(deadline=2.4)  # the slot at 2 s: 0.4 s left
    with pytest.raises(retrysafe.PacingDelayed) as caught:
        client.get("http://api.test/items")
    assert sent == [0.0]
    assert clock.sleeps == []
    assert caught.value.attempts == 1
    assert caught.value.elapsed == 0.0
    assert "next paced slot is 2.00 s away" in str(caught.value)
    assert limiter.queued() == pytest.approx(1.0)  # only the other caller's slot is held


def test_the_async_client_keeps_the_retrys_place_too() -> None:
    limiters: list[Limiter] = []
    clock = _CrowdedClock(limiters, randoms=[0.5])
    governor = Governor(ONE_A_SECOND, clock=clock)
    limiters.append(_limiter(governor))
    sent: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        sent.append(clock.monotonic())
        if len(sent) == 1:
            limiters[0].reserve()
            return httpx.Response(503)
        return httpx.Response(200)

    async def main() -> int:
        async with retrysafe.AsyncClient(
            transport=httpx.MockTransport(handler),
            clock=clock,
            governor=governor,
            policy=RetryPolicy(deadline=2.6, backoff_base=1.0),
        ) as client:
            return (await client.get("http://api.test/items")).status_code

    assert asyncio.run(main()) == 200
    assert sent == [0.0, pytest.approx(2.0)]
