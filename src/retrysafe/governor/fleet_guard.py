"""The seam between a Governor and a fleet: one process's guard that also asks the fleet.

A :class:`FleetGuard` is a :class:`~retrysafe.governor.DependencyGuard` (the local
budget, breaker and limiter work exactly as before) that also reads a
:class:`FleetView`, the fleet's state of the dependency as this process last heard it,
and tells the fleet what it learns. What it asks of the fleet is :class:`FleetLink`
(``retrysafe.fleet.RedisFleet`` is one), so the governor never imports redis.

Where the fleet is consulted, and what it costs:

- the healthy path (the fleet's breaker closed, no fleet cooldown, no pacing) reads one
  attribute of the view, ``calm``, and then is the local guard's path: no round trip;
- a fleet cooldown or an open fleet breaker is answered from the view (no round trip);
- a paced attempt reserves its slot in the fleet (one round trip);
- the half-open fleet breaker's single probe, outcomes that fail, 429s and 503s with a
  Retry-After tell or ask the fleet (one round trip each, never on a healthy call).

A fleet that does not answer (``None`` from a :class:`FleetLink` method) leaves the
local pieces in charge: pacing falls back to a local limiter of the fleet's rate shared
out among the processes last seen alive.
"""

from __future__ import annotations

import dataclasses
import math

from retrysafe.decisions import (
    Admission,
    AskRetry,
    Effect,
    HedgeAnswer,
    RecordHealth,
    ReleasePacing,
    ReleaseProbe,
    RetryAnswer,
    RetryEnded,
    StartCooldown,
)
from retrysafe.errors import seconds_text
from retrysafe.governor.breaker import (
    BreakerState,
    CircuitBreaker,
    Evidence,
    Permit,
    Transition,
)
from retrysafe.governor.budget import RetryBudget
from retrysafe.governor.fleet_link import FleetLink, FleetView
from retrysafe.governor.guard import (
    GRANTED,
    CallFacts,
    DependencyGuard,
    lease_for_probe,
    queue_full,
    waits_out,
)
from retrysafe.governor.limiter import QUEUE_FULL, Limiter

__all__ = ["FleetGuard", "FleetPermit"]


class FleetPermit(Permit):
    """The permit of the fleet's one half-open probe; ``lease_token`` names its lease."""

    __slots__ = ()


class _HoldingSlot:
    """A call's facts, saying its paced slot is already reserved (in the fleet)."""

    __slots__ = ("_call",)

    def __init__(self, call: CallFacts) -> None:
        self._call = call

    @property
    def attempts(self) -> int:
        return self._call.attempts

    @property
    def pacing_held(self) -> bool:
        return True

    @property
    def cooldown_waited(self) -> float:
        return self._call.cooldown_waited

    def probe_lease(self) -> float:
        return self._call.probe_lease()


class FleetGuard(DependencyGuard):
    """A dependency's local guard that also shares what it learns with the fleet.

    With ``LimiterSettings(requests_per_second=...)`` the rate is the whole fleet's:
    each attempt reserves its slot in the fleet (local pacing while the fleet is away,
    at the rate shared out among the processes last seen alive).
    """

    __slots__ = ("fleet", "rate", "view")

    def __init__(
        self,
        dependency: str,
        budget: RetryBudget | None,
        breaker: CircuitBreaker | None,
        limiter: Limiter | None,
        seen: float = 0.0,
        *,
        fleet: FleetLink,
        view: FleetView,
        rate: float | None = None,
    ) -> None:
        super().__init__(dependency, budget, breaker, limiter, seen)
        self.fleet = fleet
        self.view = view
        #: The fleet-wide pace (requests per second), or None when attempts are not paced.
        self.rate = rate

    @classmethod
    def around(cls, guard: DependencyGuard, fleet: FleetLink) -> FleetGuard:
        """``guard``'s pieces, joined to ``fleet``."""
        limiter = guard.limiter
        rate = limiter.settings.requests_per_second if limiter is not None else None
        view = fleet.view(guard.dependency)
        return cls(
            dependency=guard.dependency,
            budget=guard.budget,
            breaker=guard.breaker,
            limiter=limiter,
            seen=guard.seen,
            fleet=fleet,
            view=view,
            rate=rate,
        )

    # -- the engine's questions ----------------------------------------------------------

    def admit(self, call: CallFacts) -> Admission:
        """As :meth:`DependencyGuard.admit`, after the fleet's cooldown and breaker; a
        paced slot is reserved in the fleet."""
        if self.view.calm and self.rate is None:
            return DependencyGuard.admit(self, call)  # the healthy path: no round trip
        return self._admit_with_fleet(call)

    def admit_at_once(self, until: float, patience: float) -> Admission | None:
        """As :meth:`DependencyGuard.admit_at_once` while the fleet is calm and does not
        pace; otherwise None (ask :meth:`admit`, which asks the fleet)."""
        if self.view.calm and self.rate is None:
            return DependencyGuard.admit_at_once(self, until, patience)
        return None

    def _admit_with_fleet(self, call: CallFacts) -> Admission:
        """The fleet's cooldown, then its breaker if open; then a paced slot in the fleet
        (before a half-open probe too: a probe is an attempt, paced like any other);
        then the fleet's probe, or the local pieces."""
        view = self.fleet.view(self.dependency)  # (it is self.view: asked, a new member
        # joins, as a child just forked does on its first call)
        now = self.fleet.clock.monotonic()
        cooldown = view.cooldown_until - now
        if self.limiter is not None:
            cooldown = max(cooldown, self.limiter.cooldown_remaining())
        if cooldown > 0 and waits_out(call, cooldown):
            return Admission(cooldown=cooldown, detail=explain_fleet_cooldown(cooldown))
        open_until = view.open_until
        half_open = False
        if open_until is not None and self.breaker is not None:
            if now < open_until:
                retry_at = open_until
                return Admission(
                    permit=Permit(allowed=False, retry_at=retry_at),
                    detail=explain_fleet_open(retry_at - now, self.fleet.quorum_rule),
                )
            half_open = True
        slot: float | None = None
        if self.rate is not None and not call.pacing_held:
            wait, reserved = self._reserve(self.rate)
            if wait > 0:
                if wait == QUEUE_FULL:
                    assert self.limiter is not None  # (a rate comes from its settings)
                    return queue_full(self.limiter.settings, rate=self.rate, fleet=True)
                detail = explain_fleet_pacing(self.rate, wait)
                return Admission(pacing=wait, detail=detail, slot=reserved)
            slot = reserved
            call = _HoldingSlot(call)  # (the local limiter reserves nothing more)
        admission: Admission | None = None
        if half_open and now < view.probing_until:
            # (another process holds the probe, as the fleet answered: no round trip)
            admission = Admission(
                permit=Permit(allowed=False, retry_at=view.probing_until),
                detail=explain_fleet_probing(view.probing_until - now),
            )
        elif half_open:
            admission = self._fleet_probe(call, now)
        if admission is None:
            admission = DependencyGuard.admit(self, call)
        permit = admission.permit
        refused = admission.cooldown > 0 or (permit is not None and not permit.allowed)
        if slot is not None and refused and self.rate is not None:
            self._release(self.rate, slot)  # the slot taken for this attempt goes back
        return admission

    def _fleet_probe(self, call: CallFacts, now: float) -> Admission | None:
        """Ask for the fleet's one half-open probe; None: the fleet does not hold the call
        back (it closed meanwhile, or did not answer) and the local pieces decide."""
        assert self.breaker is not None
        lease = lease_for_probe(call.probe_lease(), self.breaker)
        answer = self.fleet.acquire_probe(self.dependency, lease)
        view = self.view
        if answer is None:
            return None
        if answer.kind == "closed":
            view.learn(view.cooldown_until, None)
            return None
        if answer.kind == "open":
            view.learn(view.cooldown_until, now + answer.seconds)
            return Admission(
                permit=Permit(allowed=False, retry_at=now + answer.seconds),
                detail=explain_fleet_open(answer.seconds, self.fleet.quorum_rule),
            )
        if answer.kind == "busy":
            view.probing_until = now + answer.seconds
            return Admission(
                permit=Permit(allowed=False, retry_at=now + answer.seconds),
                detail=explain_fleet_probing(answer.seconds),
            )
        permit = FleetPermit(
            allowed=True,
            probe=True,
            lease_token=answer.token,
            # (this process sends the fleet's probe: for it, the fleet goes half-open, as
            # a local breaker's probe says; the probe's end reports half_open -> ...)
            transition=Transition("open", "half_open"),
        )
        return Admission(permit=permit)

    def breaker_state(self) -> BreakerState | None:
        """As :meth:`DependencyGuard.breaker_state`, the fleet's breaker first: open
        across the fleet (as this process last heard), this process's calls are refused
        whatever its own breaker says, and half-open once that period is over."""
        if self.breaker is None:
            return None
        open_until = self.view.open_until
        if open_until is None:
            return self.breaker.state
        return "open" if self.fleet.clock.monotonic() < open_until else "half_open"

    def answer_retry(self, ask: AskRetry, now: float) -> RetryAnswer:
        """As :meth:`DependencyGuard.answer_retry`; not while the fleet breaker stays
        open past the wait either."""
        open_until = self.view.open_until
        if open_until is not None and self.breaker is not None and open_until > now + ask.wait:
            seconds = open_until - now
            return RetryAnswer(
                "circuit_open",
                retry_after=seconds,
                detail=explain_fleet_open(seconds, self.fleet.quorum_rule),
            )
        return DependencyGuard.answer_retry(self, ask, now)

    def slot_after(self, wait: float) -> RetryAnswer:
        """As :meth:`DependencyGuard.slot_after`, the slot taken in the fleet's schedule."""
        rate = self.rate
        if rate is None:
            return DependencyGuard.slot_after(self, wait)
        reserved = self._reserve_beyond(rate, wait)
        if reserved is None:
            return GRANTED  # (a slot within the wait, or a full queue: nothing reserved)
        pacing, slot = reserved
        return RetryAnswer(pacing=pacing, slot=slot, detail=explain_fleet_pacing(rate, pacing))

    def answer_hedge(self) -> HedgeAnswer:
        """As :meth:`DependencyGuard.answer_hedge`, and no hedged copy while the fleet
        cools down or its breaker is not closed; with pacing, the copy's slot is the
        fleet's (taken only if free now)."""
        view = self.view
        if not view.calm:
            if view.open_until is not None and self.breaker is not None:
                return _HEDGE_CIRCUIT
            if view.cooldown_until > self.fleet.clock.monotonic():
                return _HEDGE_COOLDOWN
        rate = self.rate
        if rate is None:
            return DependencyGuard.answer_hedge(self)
        if self.breaker is not None and not self.breaker.closed:
            return _HEDGE_CIRCUIT
        if self.limiter is not None and self.limiter.cooldown_remaining() > 0:
            return _HEDGE_COOLDOWN
        wait, slot = self._reserve(rate)
        if wait > 0:
            if wait != QUEUE_FULL:  # (a full queue reserved nothing)
                self._release(rate, slot)
            return _HEDGE_PACING
        if self.budget is not None and not self.budget.try_spend():
            self._release(rate, slot)
            return _HEDGE_BUDGET
        return _HEDGE_GRANTED

    # -- the engine's effects ------------------------------------------------------------

    def healthy_call(self, seconds: float = 0.0, until: float = -math.inf) -> None:
        """As :meth:`DependencyGuard.healthy_call`, and end the fleet view's run of
        failures (withdrawing this process's vote) as a healthy outcome does."""
        DependencyGuard.healthy_call(self, seconds, until)
        view = self.view
        if view.failing or view.voted:
            recovered(view, self.fleet, self.dependency)

    def apply(self, effect: Effect) -> Transition | None:
        """As :meth:`DependencyGuard.apply`, and tell the fleet what it means for all."""
        kind = type(effect)
        if kind is RecordHealth:
            assert isinstance(effect, RecordHealth)
            return self.record_health(effect)[0]
        if kind is StartCooldown:
            assert isinstance(effect, StartCooldown)
            DependencyGuard.apply(self, effect)
            self._share_cooldown(effect.seconds, announced=effect.announced)
            return None
        if kind is ReleasePacing and self.rate is not None:
            assert isinstance(effect, ReleasePacing)
            self._release(self.rate, effect.slot)
            return None
        if kind is RetryEnded:
            # Failures the breaker deferred count now, and may open it: a vote, as an
            # outcome that opens it here is (see _failed).
            transition = DependencyGuard.apply(self, effect)
            if transition is not None and transition.after == "open" and self.breaker is not None:
                self.view.failing = 0
                self._vote(self.breaker, opened_here=True)
            return transition
        if kind is ReleaseProbe:
            assert isinstance(effect, ReleaseProbe)
            permit = effect.permit
            if isinstance(permit, FleetPermit):
                self.fleet.release_probe(self.dependency, permit.lease_token)
                return None
        return DependencyGuard.apply(self, effect)

    def record_health(self, effect: RecordHealth) -> tuple[Transition | None, Evidence]:
        """As :meth:`DependencyGuard.record_health`, and tell the fleet: a failure that
        counts may be a vote; the fleet's probe closes or opens the fleet breaker."""
        breaker = self.breaker
        permit = effect.permit
        if type(permit) is FleetPermit:
            assert isinstance(permit, FleetPermit)
            if (
                effect.health == "unhealthy"
                and effect.seconds is not None
                and breaker is not None
                and breaker.cut_short(effect.seconds)
            ):
                # (a timeout the caller's own limit cut: see RecordHealth.seconds)
                self.fleet.release_probe(self.dependency, permit.lease_token)
                return None, "callers_limit"
            return self._probe_ended(effect), "counted"
        transition, evidence = DependencyGuard.record_health(self, effect)
        if effect.health == "healthy":
            view = self.view
            if view.failing or view.voted:
                recovered(view, self.fleet, self.dependency)
        elif effect.health == "unhealthy" and evidence == "counted":
            # (a held timeout is no vote: the local breaker counts it later, if at all)
            self._failed(effect, transition)
        return transition, evidence

    def _share_cooldown(self, seconds: float, *, announced: bool) -> None:
        """A cooldown this process learned pauses every process (as the local limiter's
        settings allow it)."""
        limiter = self.limiter
        if limiter is None or seconds <= 0:
            return
        settings = limiter.settings
        if not (settings.pace_on_rate_limit_headers if announced else settings.cooldown_on_429):
            return
        self.fleet.share_cooldown(self.dependency, min(seconds, settings.max_cooldown))

    def _failed(self, effect: RecordHealth, transition: Transition | None) -> None:
        """An unhealthy outcome: share a 503's Retry-After; count the failing call, and
        vote once enough of them came in a row (or the local breaker opened)."""
        if effect.open_for is not None and self.fleet.share_503_retry_after:
            self._share_cooldown(effect.open_for, announced=False)
        breaker = self.breaker
        if effect.repeat or breaker is None:
            return  # this call was counted already
        view = self.view
        view.failing += 1
        opened_here = transition is not None and transition.after == "open"
        if view.failing >= self.fleet.vote_after or opened_here:
            view.failing = 0
            self._vote(breaker, opened_here)

    def _vote(self, breaker: CircuitBreaker, opened_here: bool) -> None:
        """Vote that the dependency fails (see FleetSettings), for as long as this
        process's breaker just opened for (``opened_here``), or would open for now."""
        period = breaker.opened_for() if opened_here else None
        if period is None:
            period = breaker.opening_period()
        if self.fleet.vote(self.dependency, period, breaker.settings.max_open_for):
            self.view.voted = True

    def _probe_ended(self, effect: RecordHealth) -> Transition | None:
        """The fleet's probe came back: close the fleet breaker or open it again (for a
        503's Retry-After, or twice its last period up to ``open_for``, as a local
        breaker's failed probe does)."""
        permit = effect.permit
        assert isinstance(permit, FleetPermit)
        assert self.breaker is not None
        healthy = effect.health != "unhealthy"
        settings = self.breaker.settings
        hinted = self._hinted_period(effect.open_for)
        view = self.view
        before = view.open_until
        if not healthy:
            # Open until the fleet's reply says for how long (within a round trip): for
            # the hint, or the longest the doubling may reach, so no call here goes out
            # before then. (Learnt before the report is handed over: the reply, on the
            # writer's thread, may come first.)
            period = settings.open_for if hinted is None else hinted
            view.learn(view.cooldown_until, self.fleet.clock.monotonic() + period)
        reported = self.fleet.report_probe(
            self.dependency,
            permit.lease_token,
            healthy=healthy,
            open_for=hinted,
            up_to=settings.open_for,
            max_open_for=settings.max_open_for,
        )
        if not reported:
            view.learn(view.cooldown_until, before)  # no fleet: nothing changed there
            return None
        if healthy:
            view.learn(view.cooldown_until, None)
            return Transition("half_open", "closed")
        return Transition("half_open", "open")

    def _hinted_period(self, hint: float | None) -> float | None:
        """How long a 503's Retry-After asks the fleet breaker to open again for (up to
        ``max_open_for``), or None: no hint it takes, the fleet doubles its period."""
        assert self.breaker is not None
        settings = self.breaker.settings
        if hint is not None and hint > 0 and settings.use_retry_after:
            return min(hint, settings.max_open_for)
        return None

    # -- pacing --------------------------------------------------------------------------

    def _reserve(self, rate: float) -> tuple[float, float]:
        """A paced slot in the fleet (or, while it is away, the fallback limiter): the
        wait for it, and which slot it is. The fleet names its slots in Redis's
        milliseconds, above zero; a fallback slot's name is kept below zero
        (:func:`_fallback_name`), so a slot goes back to the schedule it came from."""
        assert self.limiter is not None
        settings = self.limiter.settings
        dependency, burst, longest = self.dependency, settings.burst, settings.max_cooldown
        slot = self.fleet.reserve_slot(dependency, rate, burst, longest)
        if slot is not None:
            return slot
        wait, name = self._fallback_limiter(rate).reserve_slot()
        return wait, _fallback_name(name)

    def _reserve_beyond(self, rate: float, wait: float) -> tuple[float, float] | None:
        """As :meth:`_reserve`, only a slot further than ``wait`` seconds away, looked at
        and reserved at once (in the fleet's script, or under the fallback limiter's
        lock); None, with nothing reserved, for a sooner one or a full queue."""
        assert self.limiter is not None
        settings = self.limiter.settings
        answer = self.fleet.reserve_slot(
            self.dependency, rate, settings.burst, settings.max_cooldown, beyond=wait
        )
        if answer is not None:
            # (the fleet names its slots above zero: slot 0.0 is none reserved, the queue
            # full or the slot within the wait; the script judged that, not a rounded wait)
            return None if answer[1] == 0.0 else answer
        reserved = self._fallback_limiter(rate).reserve_slot_beyond(wait)
        if reserved is None:
            return None
        return reserved[0], _fallback_name(reserved[1])

    def _release(self, rate: float, slot: float | None) -> None:
        """Give ``slot`` back to the schedule it came from. A fleet slot given back while
        Redis is away stays a gap that time closes (the fallback limiter never held it:
        taken there, the next caller would send on a queued caller's slot)."""
        if slot is not None and slot < 0:
            self._fallback_limiter(rate).release(_fallback_name(slot))
        elif not self.fleet.release(self.dependency, rate, slot) and slot is None:
            self._fallback_limiter(rate).release()

    def _fallback_limiter(self, rate: float) -> Limiter:
        """The local limiter used while the fleet is away: this process's share of the
        fleet's rate (the fleet's rate over the processes last seen alive)."""
        assert self.limiter is not None
        processes = max(1, self.fleet.live_processes())
        share = rate / processes
        fallback = self.view.fallback
        if fallback is None or fallback.settings.requests_per_second != share:
            settings = dataclasses.replace(
                self.limiter.settings,
                requests_per_second=share,
                burst=max(1, self.limiter.settings.burst // processes),
            )
            fallback = Limiter(settings, self.fleet.clock)
            self.view.fallback = fallback
        return fallback

    def at_rest(self) -> bool:
        """As :meth:`DependencyGuard.at_rest`, and nothing pending with the fleet."""
        view = self.view
        if not view.calm or view.failing or view.voted:
            return False
        return DependencyGuard.at_rest(self)


_HEDGE_GRANTED = HedgeAnswer()
_HEDGE_CIRCUIT = HedgeAnswer("circuit_not_closed")
_HEDGE_COOLDOWN = HedgeAnswer("cooldown")
_HEDGE_PACING = HedgeAnswer("pacing")
_HEDGE_BUDGET = HedgeAnswer("budget_exhausted")


def recovered(view: FleetView, fleet: FleetLink, dependency: str) -> None:
    """A healthy outcome: the run of failures is over; withdraw this process's vote."""
    view.failing = 0
    if view.voted:
        view.voted = False
        fleet.retract(dependency)


def explain_fleet_cooldown(seconds: float) -> str:
    """A cooldown in force (learned here or by another process of the fleet)."""
    return (
        f"a 429 or 503 asked every caller of this dependency, across the fleet, to wait "
        f"{seconds_text(seconds)} more (LimiterSettings.cooldown_on_429, shared by RedisFleet)"
    )


def explain_fleet_open(seconds: float, rule: str) -> str:
    """The fleet breaker is open (``rule``: the fleet's quorum settings, with values)."""
    return (
        f"the fleet's circuit breaker is open for {seconds_text(seconds)} more (a quorum of "
        f"processes saw this dependency fail: {rule})"
    )


def explain_fleet_probing(seconds: float) -> str:
    """Another process holds the fleet's half-open probe."""
    return (
        "the fleet's circuit breaker is half-open and another process holds its one probe "
        f"(its lease ends within {seconds:.1f} s)"
    )


def explain_fleet_pacing(rate: float, wait: float) -> str:
    """The fleet's next paced slot is too far away."""
    return (
        f"the fleet's next paced slot is {wait:.2f} s away (LimiterSettings("
        f"requests_per_second={rate:g}) paces the whole fleet, shared by RedisFleet)"
    )


def _fallback_name(name: float) -> float:
    """A fallback limiter's slot name as the fleet guard hands it out (below zero, where
    no fleet slot is named), and back again: the mapping is its own inverse."""
    return -name - 1.0
