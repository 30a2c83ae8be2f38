"""FleetGuard's decisions on the fake clock, against a fleet that only records what it is told.

No Redis here: what the guard asks and tells the fleet, and what it decides from the
fleet's view, is the whole of it (``test_fleet_sharing.py`` runs the real thing).
"""

from __future__ import annotations

import dataclasses

import pytest

from retrysafe.decisions import AskRetry, RecordHealth, ReleasePacing, ReleaseProbe, StartCooldown
from retrysafe.governor import (
    BreakerSettings,
    Governor,
    GovernorSettings,
    LimiterSettings,
)
from retrysafe.governor.breaker import CLOSED_PERMIT
from retrysafe.governor.fleet_guard import FleetGuard, FleetPermit
from retrysafe.governor.fleet_link import FleetView, ProbeAnswer
from retrysafe.testing import FakeClock


@dataclasses.dataclass
class RecordingFleet:
    """A FleetLink that records every call and answers as told."""

    clock: FakeClock
    vote_after: int = 3
    share_503_retry_after: bool = True
    quorum_rule: str = "FleetSettings(quorum=3, quorum_share=0.5, vote_after=3)"
    answering: bool = True
    alive: int = 4
    probe: ProbeAnswer | None = None
    pacing_wait: float = 0.0
    #: What a failed probe's report says the fleet doubled its period to.
    reopened_for: float = 1.0
    #: Whether the fleet's reply to a failed probe's report comes at once.
    replies: bool = True
    told: list[tuple[object, ...]] = dataclasses.field(default_factory=list)
    views: dict[str, FleetView] = dataclasses.field(default_factory=dict)

    def view(self, dependency: str) -> FleetView:
        return self.views.setdefault(dependency, FleetView())

    def live_processes(self) -> int:
        return self.alive

    def reserve(self, dependency: str, rate: float, burst: int, max_wait: float) -> float | None:
        slot = self.reserve_slot(dependency, rate, burst, max_wait)
        return None if slot is None else slot[0]

    def reserve_slot(
        self,
        dependency: str,
        rate: float,
        burst: int,
        max_wait: float,
        *,
        beyond: float | None = None,
    ) -> tuple[float, float] | None:
        self.told.append(
            ("reserve", rate, burst) if beyond is None else ("reserve", rate, burst, beyond)
        )
        if not self.answering:
            return None
        if beyond is not None and self.pacing_wait <= beyond:
            return 0.0, 0.0  # (as the fleet's script: nothing reserved)
        return self.pacing_wait, 1000.0 + self.pacing_wait

    def release(self, dependency: str, rate: float, slot: float | None = None) -> bool:
        self.told.append(("release", rate, slot))
        return self.answering

    def share_cooldown(self, dependency: str, seconds: float) -> None:
        self.told.append(("cooldown", seconds))

    def vote(self, dependency: str, open_for: float, max_open_for: float) -> bool:
        self.told.append(("vote", open_for))
        return self.answering

    def retract(self, dependency: str) -> None:
        self.told.append(("retract",))

    def acquire_probe(self, dependency: str, lease: float) -> ProbeAnswer | None:
        self.told.append(("acquire_probe", lease))
        return self.probe if self.answering else None

    def report_probe(
        self,
        dependency: str,
        token: str,
        *,
        healthy: bool,
        open_for: float | None,
        up_to: float,
        max_open_for: float,
    ) -> bool:
        self.told.append(("report_probe", token, healthy, open_for, up_to))
        if self.answering and self.replies and not healthy:
            # (as RedisFleet's writer does with the script's reply)
            view = self.view(dependency)
            period = self.reopened_for if open_for is None else open_for
            view.learn(view.cooldown_until, self.clock.monotonic() + period)
        return self.answering

    def release_probe(self, dependency: str, token: str) -> None:
        self.told.append(("release_probe", token))


class FirstAttempt:
    attempts = 0
    pacing_held = False
    cooldown_waited = 0.0

    def probe_lease(self) -> float:
        return 2.0


def guard_with(
    settings: GovernorSettings | None = None, **fleet_fields: object
) -> tuple[FleetGuard, RecordingFleet, FakeClock]:
    clock = FakeClock()
    fleet = RecordingFleet(clock, **fleet_fields)  # type: ignore[arg-type]
    guard = Governor(settings, clock=clock, fleet=fleet).guard("api")
    assert isinstance(guard, FleetGuard)
    return guard, fleet, clock


def failed(repeat: bool = False, open_for: float | None = None) -> RecordHealth:
    return RecordHealth(CLOSED_PERMIT, "unhealthy", open_for, repeat)


HEALTHY = RecordHealth(CLOSED_PERMIT, "healthy", None)


def test_a_calm_view_admits_without_asking_the_fleet() -> None:
    guard, fleet, _ = guard_with()
    admission = guard.admit(FirstAttempt())
    assert admission.permit is not None
    assert admission.permit.allowed
    guard.apply(HEALTHY)
    assert fleet.told == []


def test_a_fleet_cooldown_holds_the_call_for_what_is_left_of_it() -> None:
    guard, fleet, clock = guard_with()
    fleet.view("api").learn(clock.monotonic() + 2.0, 0.0)
    clock.advance(0.5)
    admission = guard.admit(FirstAttempt())
    assert admission.cooldown == 1.5
    assert "across the fleet" in admission.detail


class WaitedTwoSeconds(FirstAttempt):
    cooldown_waited = 2.0


def test_an_attempt_that_waited_a_cooldown_out_goes_through_a_new_one_as_long() -> None:
    """As a local cooldown (tests/test_cooldown_once.py): a new one up to twice as long as
    the one waited lets the attempt go; a longer one holds it."""
    guard, fleet, clock = guard_with()
    fleet.view("api").learn(clock.monotonic() + 4.0, 0.0)  # another process's 429, anew
    admission = guard.admit(WaitedTwoSeconds())
    assert admission.cooldown == 0
    assert admission.permit is not None
    assert admission.permit.allowed
    fleet.view("api").learn(clock.monotonic() + 4.5, 0.0)
    assert guard.admit(WaitedTwoSeconds()).cooldown == 4.5


def test_an_open_fleet_breaker_refuses_until_its_end_and_refuses_a_longer_retry() -> None:
    guard, fleet, clock = guard_with()
    fleet.view("api").learn(0.0, clock.monotonic() + 4.0)
    admission = guard.admit(FirstAttempt())
    assert admission.permit is not None
    assert not admission.permit.allowed
    assert admission.permit.retry_at == clock.monotonic() + 4.0
    now = clock.monotonic()
    assert guard.answer_retry(AskRetry(1.0, True), now).refusal == "circuit_open"
    assert guard.answer_retry(AskRetry(5.0, True), now).refusal is None


def test_half_open_asks_the_fleet_for_its_one_probe_under_a_lease() -> None:
    guard, fleet, clock = guard_with(probe=ProbeAnswer("granted", token="t1"))
    fleet.view("api").learn(0.0, clock.monotonic())  # the open period just ended
    admission = guard.admit(FirstAttempt())
    permit = admission.permit
    assert isinstance(permit, FleetPermit)
    assert permit.probe
    assert permit.allowed
    assert permit.transition is not None  # (reported as a circuit event, as a local probe's)
    assert (permit.transition.before, permit.transition.after) == ("open", "half_open")
    assert fleet.told == [("acquire_probe", 3.0)]  # the attempt's 2 s plus a second's grace
    transition = guard.apply(RecordHealth(permit, "healthy", None))
    assert transition is not None
    assert (transition.before, transition.after) == ("half_open", "closed")
    assert fleet.view("api").calm
    assert fleet.told[-1] == ("report_probe", "t1", True, None, 5.0)


def test_a_failed_probe_opens_the_fleet_again_for_the_503s_hint() -> None:
    guard, fleet, clock = guard_with(probe=ProbeAnswer("granted", token="t2"))
    fleet.view("api").learn(0.0, clock.monotonic())
    permit = guard.admit(FirstAttempt()).permit
    assert permit is not None
    transition = guard.apply(RecordHealth(permit, "unhealthy", 12.0))
    assert transition is not None
    assert transition.after == "open"
    assert fleet.view("api").open_until == clock.monotonic() + 12.0
    assert ("report_probe", "t2", False, 12.0, 5.0) in fleet.told


def test_a_failed_probe_without_a_hint_asks_the_fleet_to_double_its_period() -> None:
    guard, fleet, clock = guard_with(probe=ProbeAnswer("granted", token="t4"), reopened_for=2.0)
    fleet.view("api").learn(0.0, clock.monotonic())
    permit = guard.admit(FirstAttempt()).permit
    assert permit is not None
    transition = guard.apply(RecordHealth(permit, "unhealthy", None))
    assert transition is not None
    assert transition.after == "open"
    # (no period of its own: the fleet doubles the last one, up to open_for)
    assert ("report_probe", "t4", False, None, 5.0) in fleet.told
    assert fleet.view("api").open_until == clock.monotonic() + 2.0


def test_until_the_fleet_replies_a_failed_probe_holds_calls_for_open_for() -> None:
    guard, fleet, clock = guard_with(probe=ProbeAnswer("granted", token="t6"), replies=False)
    fleet.view("api").learn(0.0, clock.monotonic())
    permit = guard.admit(FirstAttempt()).permit
    assert permit is not None
    assert guard.apply(RecordHealth(permit, "unhealthy", None)) is not None
    # (the longest the doubling may reach: no call goes out before the fleet's period ends)
    assert fleet.view("api").open_until == clock.monotonic() + 5.0


def test_a_failed_probe_the_fleet_did_not_take_changes_nothing_here() -> None:
    guard, fleet, clock = guard_with(probe=ProbeAnswer("granted", token="t5"))
    half_open_since = clock.monotonic()
    fleet.view("api").learn(0.0, half_open_since)
    permit = guard.admit(FirstAttempt()).permit
    assert permit is not None
    fleet.answering = False  # away
    assert guard.apply(RecordHealth(permit, "unhealthy", None)) is None
    assert fleet.view("api").open_until == half_open_since


def test_an_abandoned_probe_is_given_back_to_the_fleet() -> None:
    guard, fleet, clock = guard_with(probe=ProbeAnswer("granted", token="t3"))
    fleet.view("api").learn(0.0, clock.monotonic())
    permit = guard.admit(FirstAttempt()).permit
    assert permit is not None
    guard.apply(ReleaseProbe(permit))
    assert fleet.told[-1] == ("release_probe", "t3")


def test_another_members_probe_holds_the_call_back() -> None:
    guard, fleet, clock = guard_with(probe=ProbeAnswer("busy", seconds=0.7))
    fleet.view("api").learn(0.0, clock.monotonic())
    admission = guard.admit(FirstAttempt())
    assert admission.permit is not None
    assert not admission.permit.allowed
    assert "another process holds its one probe" in admission.detail


def test_calls_while_another_member_probes_are_refused_without_asking_again() -> None:
    """One round trip learns that another process holds the probe for 0.7 s: the calls
    after it are refused here until then (each asked the fleet again: a burst of round
    trips at the half-open moment, trial94); past it, the fleet is asked again."""
    guard, fleet, clock = guard_with(probe=ProbeAnswer("busy", seconds=0.7))
    fleet.view("api").learn(0.0, clock.monotonic())
    for _ in range(50):
        admission = guard.admit(FirstAttempt())
        assert admission.permit is not None
        assert not admission.permit.allowed
        assert "another process holds its one probe" in admission.detail
    assert [told[0] for told in fleet.told] == ["acquire_probe"]
    clock.advance(0.7)
    guard.admit(FirstAttempt())
    assert [told[0] for told in fleet.told] == ["acquire_probe", "acquire_probe"]


def test_the_probes_outcome_ends_the_wait_for_it() -> None:
    """The fleet breaker closing (or opening again) as the other member's probe ends is
    news: the next call asks no more about a probe, and goes."""
    guard, fleet, clock = guard_with(probe=ProbeAnswer("busy", seconds=5.0))
    fleet.view("api").learn(0.0, clock.monotonic())
    assert not guard.admit(FirstAttempt()).permit.allowed  # type: ignore[union-attr]
    fleet.view("api").learn(0.0, None)  # (the refresher heard: closed)
    admission = guard.admit(FirstAttempt())
    assert admission.permit is None or admission.permit.allowed


def test_a_half_open_state_read_again_keeps_the_probe_known_to_be_held() -> None:
    """Each read of a half-open breaker ends its period when it was read, a refresh
    later each time: no news of the probe. Closed, or open again, is (review88: the
    held probe was forgotten at every refresh, 0.1 s)."""
    view = FleetView()
    view.learn(0.0, 100.0)
    view.probing_until = 105.0
    view.learn(0.0, 100.1)  # (read again, half-open)
    assert view.probing_until == 105.0
    view.learn(0.0, 101.0)  # (open again: a new period)
    assert view.probing_until == 0.0
    view.probing_until = 105.0
    view.learn(0.0, None)  # (closed)
    assert view.probing_until == 0.0


def test_half_open_with_the_fleet_away_leaves_the_local_breaker_to_decide() -> None:
    guard, fleet, clock = guard_with(answering=False)
    fleet.view("api").learn(0.0, clock.monotonic())
    admission = guard.admit(FirstAttempt())
    assert admission.permit is not None
    assert admission.permit.allowed
    assert not admission.permit.probe


def test_a_process_votes_after_failing_calls_in_a_row_not_after_retries() -> None:
    guard, fleet, _ = guard_with(vote_after=3)
    guard.apply(failed())
    guard.apply(failed(repeat=True))  # the same call failing again is no new evidence
    guard.apply(failed(repeat=True))
    guard.apply(failed())
    assert fleet.told == []
    guard.apply(failed())
    assert fleet.told == [("vote", 0.5)]  # (the first period: see BreakerSettings)
    assert fleet.view("api").voted


def test_a_healthy_call_ends_the_run_and_withdraws_the_vote() -> None:
    guard, fleet, _ = guard_with(vote_after=2)
    guard.apply(failed())
    guard.apply(HEALTHY)
    guard.apply(failed())
    assert fleet.told == []  # the run was broken
    guard.apply(failed())
    guard.apply(HEALTHY)
    assert fleet.told == [("vote", 0.5), ("retract",)]
    assert not fleet.view("api").voted


def test_the_local_breaker_opening_is_a_vote_too() -> None:
    settings = GovernorSettings(breaker=BreakerSettings(consecutive_failures=2))
    guard, fleet, _ = guard_with(settings, vote_after=50)
    guard.apply(failed())
    transition = guard.apply(failed())
    assert transition is not None
    assert transition.after == "open"
    assert fleet.told == [("vote", 0.5)]


def test_a_vote_asks_for_the_period_the_local_breaker_just_opened_for() -> None:
    """A local breaker that opens again soon after closing doubles its period (1 s after
    0.5 s): the vote asks for that period, not the one after it."""
    settings = GovernorSettings(breaker=BreakerSettings(consecutive_failures=2))
    guard, fleet, clock = guard_with(settings, vote_after=50)
    breaker = guard.breaker
    assert breaker is not None
    guard.apply(failed())
    guard.apply(failed())
    clock.advance(0.5)
    probe = breaker.acquire(probe_lease=1.0)
    assert probe.probe
    breaker.record(probe, "healthy")
    closed = failed()._replace(permit=breaker.closed_permit)
    guard.apply(closed)
    transition = guard.apply(closed)
    assert transition is not None
    assert transition.after == "open"
    assert fleet.told == [("vote", 0.5), ("vote", 1.0)]


def test_429s_and_503_hints_are_shared_as_cooldowns_capped_by_the_limiter() -> None:
    settings = GovernorSettings(limiter=LimiterSettings(max_cooldown=10.0))
    guard, fleet, _ = guard_with(settings)
    guard.apply(StartCooldown(30.0))
    guard.apply(failed(open_for=4.0))
    assert fleet.told == [("cooldown", 10.0), ("cooldown", 4.0)]


def test_switched_off_cooldowns_are_not_shared() -> None:
    settings = GovernorSettings(limiter=LimiterSettings(cooldown_on_429=False))
    guard, fleet, _ = guard_with(settings, share_503_retry_after=True)
    guard.apply(StartCooldown(3.0))
    guard.apply(failed(open_for=4.0))
    assert fleet.told == []


def test_a_paced_attempt_reserves_its_slot_in_the_fleet() -> None:
    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=50, burst=5))
    guard, fleet, _ = guard_with(settings, pacing_wait=0.25)
    admission = guard.admit(FirstAttempt())
    assert admission.pacing == 0.25
    assert fleet.told == [("reserve", 50, 5)]
    guard.apply(ReleasePacing(admission.slot))
    assert fleet.told[-1] == ("release", 50, 1000.25)  # the slot the fleet named


def test_a_fleet_slot_given_back_while_the_fleet_is_away_is_not_given_to_the_fallback() -> None:
    # The fallback limiter never held the fleet's slot: taking it as its own would put
    # the next caller on a slot a queued caller already holds.
    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=40, burst=8))
    guard, fleet, _ = guard_with(settings, pacing_wait=0.25)
    fleet_slot = guard.admit(FirstAttempt()).slot
    fleet.answering = False  # Redis goes away
    waits = [guard.admit(FirstAttempt()).pacing for _ in range(3)]  # the fallback's queue
    guard.apply(ReleasePacing(fleet_slot))
    assert guard.admit(FirstAttempt()).pacing == pytest.approx(waits[-1] + 0.1)


def test_a_slot_of_the_fallback_limiter_goes_back_to_it() -> None:
    # With the fleet away, slots come from the local fallback; one given back returns there.
    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=40, burst=8))
    guard, _, _ = guard_with(settings, answering=False, alive=4)
    admissions = [guard.admit(FirstAttempt()) for _ in range(3)]  # waits 0, 0, 0.1
    guard.apply(ReleasePacing(admissions[-1].slot))  # the last one queued gives up
    assert guard.admit(FirstAttempt()).pacing == pytest.approx(0.1)  # its slot again


def test_with_the_fleet_away_pacing_is_this_process_share_of_the_rate() -> None:
    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=40, burst=8))
    guard, fleet, _ = guard_with(settings, answering=False, alive=4)
    waits = [guard.admit(FirstAttempt()).pacing for _ in range(3)]
    # 40/s over 4 processes: 10/s here, a burst of 2, then a slot every 0.1 s.
    assert waits == [0.0, 0.0, 0.1]
    fallback = fleet.view("api").fallback
    assert fallback is not None
    assert fallback.settings.requests_per_second == 10


def test_no_hedged_copy_while_the_fleet_cools_down_or_its_breaker_is_open() -> None:
    guard, fleet, clock = guard_with()
    assert guard.answer_hedge().refusal is None
    fleet.view("api").learn(clock.monotonic() + 1.0, None)
    assert guard.answer_hedge().refusal == "cooldown"
    fleet.view("api").learn(0.0, clock.monotonic() + 1.0)
    assert guard.answer_hedge().refusal == "circuit_not_closed"


def test_a_paced_hedged_copy_takes_a_free_fleet_slot_or_none() -> None:
    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=50))
    guard, fleet, _ = guard_with(settings)
    assert guard.answer_hedge().refusal is None
    assert fleet.told == [("reserve", 50, 1)]
    fleet.pacing_wait = 0.3
    assert guard.answer_hedge().refusal == "pacing"
    assert fleet.told[-1] == ("release", 50, 1000.3)  # the slot it would have waited for


def test_the_breaker_state_a_gauge_reads_is_the_one_calls_find() -> None:
    guard, fleet, clock = guard_with(GovernorSettings(breaker=BreakerSettings(open_for=5)))
    assert guard.breaker is not None
    assert guard.breaker_state() == "closed"
    fleet.view("api").learn(0.0, clock.monotonic() + 2.0)  # the fleet opened it
    assert guard.breaker.state == "closed"  # this process's own never saw a failure
    assert guard.breaker_state() == "open"
    assert guard.admit(FirstAttempt()).permit.allowed is False  # type: ignore[union-attr]
    clock.advance(2.0)  # the fleet's period is over: its one probe is next
    assert guard.breaker_state() == "half_open"
    fleet.view("api").forget_breaker()  # the fleet away: the local breaker decides
    assert guard.breaker_state() == "closed"
    for _ in range(guard.breaker.settings.consecutive_failures):
        guard.record_health(failed())
    assert guard.breaker.state == "open"
    assert guard.breaker_state() == "open"  # its own open breaker, with nothing from the fleet


def test_without_a_breaker_there_is_no_state_to_report() -> None:
    guard, fleet, clock = guard_with(GovernorSettings(breaker=None))
    fleet.view("api").learn(0.0, clock.monotonic() + 2.0)
    assert guard.breaker_state() is None
