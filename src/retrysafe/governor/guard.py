"""DependencyGuard: the load protection of one dependency, asked on every call.

Its budget, breaker and limiter, and the answers a call's drive asks of them
(admit this attempt? may it retry? may a hedged copy go?). The
:class:`~retrysafe.governor.governor.Governor` keeps one per dependency. A call
asks its guard on every attempt, so this module is one the compiled build
compiles (see ``retrysafe.compiled``); the Governor, which users make, is not.
"""

from __future__ import annotations

import math
from typing import Final, Protocol

from retrysafe.compiled import mypyc_attr
from retrysafe.decisions import (
    OPEN_ADMISSION,
    Admission,
    AskRetry,
    DeferFailure,
    Effect,
    HedgeAnswer,
    RecordHealth,
    RefundBudget,
    ReleasePacing,
    ReleaseProbe,
    RetryAnswer,
    RetryEnded,
    StartCooldown,
)
from retrysafe.governor.breaker import (
    CLOSED_PERMIT,
    BreakerState,
    CircuitBreaker,
    Evidence,
    Permit,
    Transition,
)
from retrysafe.governor.budget import RetryBudget
from retrysafe.governor.explain import explain_full_queue, explain_pacing
from retrysafe.governor.limiter import QUEUE_FULL, Limiter
from retrysafe.governor.settings import LimiterSettings

__all__ = [
    "GRANTED",
    "PROBE_GRACE",
    "CallFacts",
    "DependencyGuard",
    "lease_for_probe",
    "queue_full",
    "waits_out",
]


class CallFacts(Protocol):
    """What the governor reads of a call to admit its next attempt (``engine.Call``)."""

    @property
    def attempts(self) -> int: ...

    @property
    def pacing_held(self) -> bool: ...

    @property
    def cooldown_waited(self) -> float: ...

    def probe_lease(self) -> float: ...


def waits_out(call: CallFacts, cooldown: float) -> bool:
    """Whether ``call``'s next attempt waits for a cooldown with ``cooldown`` seconds left:
    unless it already waited out one at least half as long.

    Every 429 (or limit announced used up) starts a cooldown for the whole dependency.
    Were a call to wait each one out, then, while some of its callers keep getting 429s
    (one path limited, or a server turning a share of its requests away), it would wait
    one cooldown after another and give up at its deadline, never sent. So an attempt that
    waited one out goes through a new one up to twice as long (what is left of a cooldown
    when a call arrives is less than its length, and the next one's is a little more), and
    obeys its own answer: the load stays one attempt per caller per cooldown, and new
    callers still wait. A much longer one (the server now asks for two minutes, not one
    second) holds it again."""
    return cooldown > 2.0 * call.cooldown_waited


# (The fleet's guard subclasses it in plain Python, which a compiled class must allow.)
@mypyc_attr(allow_interpreted_subclasses=True)
class DependencyGuard:
    """The budget, breaker and limiter of one dependency (None where switched off).

    It answers the engine's questions (:meth:`admit`, :meth:`answer_retry`) and
    carries out its effects (:meth:`apply`); the shell passes both along. Its pieces
    are set once, when the governor makes it. (A plain class: ``import retrysafe``
    defines it, and a frozen dataclass costs ten times as much to define.)
    """

    __slots__ = (
        "_admitted_closed",
        "asked",
        "breaker",
        "budget",
        "dependency",
        "limiter",
        "seen",
    )

    def __init__(
        self,
        dependency: str,
        budget: RetryBudget | None,
        breaker: CircuitBreaker | None,
        limiter: Limiter | None,
        seen: float = 0.0,
    ) -> None:
        self.dependency = dependency
        self.budget = budget
        self.breaker = breaker
        self.limiter = limiter
        #: When it was last known to be in use (monotonic seconds): when the governor
        #: made it, or the sweep after a call last asked for it. It is swept only once
        #: that is a minute ago (see ``Governor``).
        self.seen = seen
        #: A call asked the governor for it since the last sweep (set on every call).
        self.asked = False
        #: The admission of an attempt while the breaker is closed, for its current
        #: closed period's permit (made again only when the breaker closes again).
        self._admitted_closed = _ADMITTED_CLOSED

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.dependency!r}, budget={self.budget!r}, "
            f"breaker={self.breaker!r}, limiter={self.limiter!r})"
        )

    def admit(self, call: CallFacts) -> Admission:
        """May the call's next attempt start now? A cooldown is only reported (nothing
        reserved), unless the attempt already waited out one at least half as long (see
        :func:`waits_out`); otherwise a paced slot is reserved (unless the call holds
        one), then the breaker is asked. (A first attempt earns the retry budget its share
        as it ends: :meth:`first_attempt_ended`.)"""
        limiter = self.limiter
        reserved = False
        slot = 0.0
        if limiter is not None:
            # (cooldown_remaining() would answer the same; one float read says "none")
            cooldown = limiter.cooldown_remaining() if limiter._cooldown_until else 0.0
            if cooldown > 0 and waits_out(call, cooldown):
                return Admission(cooldown=cooldown)
            if limiter.paced and not call.pacing_held:
                pacing, slot = limiter.reserve_slot()
                if pacing > 0:
                    if pacing == QUEUE_FULL:
                        return queue_full(limiter.settings)
                    return Admission(pacing=pacing, slot=slot)
                reserved = True
        permit = None
        if self.breaker is not None:
            breaker = self.breaker
            if breaker.closed:  # the healthy path: no lock, no lease to work out
                permit = breaker.closed_permit
            else:
                permit = breaker.acquire(probe_lease=lease_for_probe(call.probe_lease(), breaker))
            if reserved and not permit.allowed and limiter is not None:
                limiter.release(slot)  # the slot taken for this attempt goes back
        if permit is None:
            return OPEN_ADMISSION
        return self._admission_for(permit)

    def admit_at_once(self, until: float, patience: float) -> Admission | None:
        """The admission :meth:`admit` gives a call's first attempt when nothing holds it
        back (no cooldown, no pacing, the breaker closed or off), having told the breaker
        the attempt waits ``patience`` seconds for its answer, until ``until``
        (:meth:`expect_answer`); None, with nothing done, otherwise: then ask
        :meth:`admit`. The short path of every fresh call (see ``first_attempt``)."""
        limiter = self.limiter
        if limiter is not None and (
            limiter.paced or (limiter._cooldown_until and limiter.cooldown_remaining() > 0)
        ):
            return None
        breaker = self.breaker
        if breaker is not None and not breaker.closed:
            return None
        if breaker is None:
            return OPEN_ADMISSION
        breaker.expect_answer(until, patience)
        return self._admission_for(breaker.closed_permit)

    def _admission_for(self, permit: Permit) -> Admission:
        """The admission carrying ``permit``: the closed period's one, kept, when it is
        the breaker's closed permit (the healthy path makes nothing)."""
        admitted = self._admitted_closed
        if admitted.permit is permit:
            return admitted
        if self.breaker is not None and permit is self.breaker.closed_permit:
            admitted = self._admitted_closed = Admission(permit=permit)
            return admitted
        return Admission(permit=permit)

    def record_health(self, effect: RecordHealth) -> tuple[Transition | None, Evidence]:
        """Tell the breaker an attempt's health: any state change, and what an unhealthy
        outcome was taken for (``callers_limit``: a timeout taken for the caller's own
        limit, so the call it ended is not counted as failing; ``held`` for a more
        patient attempt's answer; see :data:`~retrysafe.governor.breaker.Evidence`)."""
        if self.breaker is None:
            return None, "counted"
        return self.breaker.record_outcome(
            effect.permit,
            effect.health,
            open_for=effect.open_for,
            repeat=effect.repeat,
            seconds=effect.seconds,
        )

    def expect_answer(self, until: float, patience: float) -> None:
        """An attempt admitted now waits ``patience`` seconds at most for its answer, until
        ``until`` (monotonic seconds): see :meth:`CircuitBreaker.expect_answer`."""
        if self.breaker is not None:
            self.breaker.expect_answer(until, patience)

    def answered_since(self, moment: float) -> bool:
        """Whether the dependency gave a healthy answer at ``moment`` or later (see
        :meth:`CircuitBreaker.answered_since`; False with no breaker)."""
        return self.breaker is not None and self.breaker.answered_since(moment)

    def answer_ended(self, until: float) -> None:
        """The attempt told to :meth:`expect_answer` with ``until`` ended."""
        if self.breaker is not None:
            self.breaker.answer_ended(until)

    def answer_abandoned(self, until: float, waited: float) -> Transition | None:
        """The attempt told to :meth:`expect_answer` with ``until`` was given up with no
        answer after ``waited`` seconds (see :meth:`CircuitBreaker.answer_abandoned`);
        any state change."""
        if self.breaker is None:
            return None
        return self.breaker.answer_abandoned(until, waited)

    def first_attempt_ended(self) -> None:
        """A call's first attempt got its outcome: the retry budget earns its share
        (``ratio``), once a call, before the call asks for a retry (see
        ``Drive._first_attempt_ended``)."""
        if self.budget is not None:
            self.budget.record_first_attempt()

    def healthy_call(self, seconds: float = 0.0, until: float = -math.inf) -> None:
        """Count a call that succeeded at once while the breaker was closed, its attempt
        taking ``seconds`` (and told to :meth:`expect_answer` with ``until``): the effect
        :data:`retrysafe.engine.HEALTHY_WHILE_CLOSED`, applied on the shells' short path
        (what :meth:`apply` does with it, without its dispatch)."""
        if self.breaker is not None:
            self.breaker.record_healthy_call(seconds, until)

    def answer_retry(self, ask: AskRetry, now: float) -> RetryAnswer:
        """May the call retry after ``ask.wait`` seconds? Not while the breaker stays
        open past then, nor without a budget token (rate-limit waits spend none).
        Granted with pacing on, the retry holds its paced slot now if that comes later
        than its wait (see :meth:`slot_after`)."""
        breaker = self.breaker
        if breaker is not None:
            open_until = breaker.open_until()
            if open_until is not None and open_until > now + ask.wait:
                return _CIRCUIT_OPEN
        if ask.spends_budget and self.budget is not None and not self.budget.try_spend():
            return _BUDGET_EXHAUSTED
        limiter = self.limiter
        if limiter is None or not limiter.paced:
            return GRANTED
        return self.slot_after(ask.wait)

    def slot_after(self, wait: float) -> RetryAnswer:
        """A granted retry's answer with pacing on: its paced slot, reserved now and held
        through the wait, when the next free slot comes more than ``wait`` seconds from
        now; plain :data:`GRANTED` otherwise (a slot that comes within the wait is
        reserved when the wait ends, as for any attempt: held through the wait, it would
        stand empty while others queue behind it). A full queue reserves nothing: the
        attempt asks again after its wait."""
        limiter = self.limiter
        if limiter is None:
            return GRANTED
        reserved = limiter.reserve_slot_beyond(wait)
        if reserved is None:
            return GRANTED
        pacing, slot = reserved
        return RetryAnswer(pacing=pacing, slot=slot, detail=explain_pacing(limiter, pacing))

    def answer_hedge(self) -> HedgeAnswer:
        """May a hedged copy go now? Only while the breaker is closed and no cooldown
        runs; it takes a paced slot (if pacing is on, and one is free now) and spends
        a retry-budget token like a retry, so in a brownout hedging shrinks instead of
        adding load."""
        if self.breaker is not None and not self.breaker.closed:
            return _HEDGE_CIRCUIT
        limiter = self.limiter
        reserved = False
        slot = 0.0
        if limiter is not None:
            if limiter.cooldown_remaining() > 0:
                return _HEDGE_COOLDOWN
            if limiter.paced:
                reserved = True
                wait, slot = limiter.reserve_slot()
                if wait > 0:
                    if wait != QUEUE_FULL:  # (a full queue reserved nothing)
                        limiter.release(slot)
                    return _HEDGE_PACING
        if self.budget is not None and not self.budget.try_spend():
            if reserved and limiter is not None:
                limiter.release(slot)
            return _HEDGE_BUDGET
        return _HEDGE_GRANTED

    def apply(self, effect: Effect) -> Transition | None:
        """Carry out one of the engine's effects; returns a breaker state change, if any."""
        if isinstance(effect, RecordHealth):
            return self.record_health(effect)[0]
        elif isinstance(effect, StartCooldown):
            if self.limiter is not None:
                self.limiter.start_cooldown(effect.seconds, announced=effect.announced)
        elif isinstance(effect, ReleaseProbe):
            if self.breaker is not None:
                self.breaker.release(effect.permit)
        elif isinstance(effect, ReleasePacing):
            if self.limiter is not None:
                self.limiter.release(effect.slot)
        elif isinstance(effect, RefundBudget) and self.budget is not None:
            self.budget.refund(effect.tokens)
        elif isinstance(effect, DeferFailure) and self.breaker is not None:
            self.breaker.defer_failure(effect.record.permit)
        elif isinstance(effect, RetryEnded) and self.breaker is not None:
            return self.breaker.retry_ended(effect.failed)
        return None

    def breaker_state(self) -> BreakerState | None:
        """The breaker's state as this process's calls find it (None: no breaker): what a
        metrics collector reports (an open period that ended reads as half-open)."""
        return None if self.breaker is None else self.breaker.state

    def at_rest(self) -> bool:
        """Whether a fresh guard would be the same: the breaker closed with an empty
        window and no failing run, the budget full, no cooldown, no paced slot ahead."""
        if self.breaker is not None and not self.breaker.at_rest():
            return False
        if self.budget is not None and not self.budget.at_rest():
            return False
        return self.limiter is None or self.limiter.at_rest()


def queue_full(
    settings: LimiterSettings, *, rate: float | None = None, fleet: bool = False
) -> Admission:
    """The answer when the pacing queue has no room (see :data:`QUEUE_FULL`): no slot,
    and the attempt must not go; the queue has room again within one interval of
    ``rate`` (the settings' ``requests_per_second`` unless given)."""
    rate = settings.requests_per_second if rate is None else rate
    if rate is None:
        raise ValueError("queue_full() needs a rate: these LimiterSettings do not pace")
    return Admission(
        pacing=1.0 / rate,
        queue_full=True,
        detail=explain_full_queue(rate, settings, fleet=fleet),
    )


def lease_for_probe(attempt: float, breaker: CircuitBreaker) -> float:
    """How long a half-open probe holds its slot before another caller may probe.

    ``attempt`` is the longest the probe's attempt may run (its attempt timeout, cut
    by its deadline); the lease outlives it by :data:`PROBE_GRACE`, so a second
    probe is only let in once the first has surely ended without reporting (the
    engine gives a probe back at once when its attempt ends with no outcome: the
    lease is only the net for a probe that is lost). An attempt with no time limit
    at all (``attempt_timeout`` and ``deadline`` both infinite) gets a lease of the
    breaker's ``max_open_for``: a lost probe must not block the dependency for ever,
    so a probe still running after that long lets one more probe in.
    """
    if attempt == math.inf:
        return breaker.settings.max_open_for
    return attempt + PROBE_GRACE


#: How long a probe's lease outlives its attempt: time to report the outcome.
PROBE_GRACE: Final = 1.0
GRANTED: Final = RetryAnswer()
_ADMITTED_CLOSED: Final = Admission(permit=CLOSED_PERMIT)
_CIRCUIT_OPEN: Final = RetryAnswer("circuit_open")
_BUDGET_EXHAUSTED: Final = RetryAnswer("budget_exhausted")
_HEDGE_GRANTED: Final = HedgeAnswer()
_HEDGE_CIRCUIT: Final = HedgeAnswer("circuit_not_closed")
_HEDGE_COOLDOWN: Final = HedgeAnswer("cooldown")
_HEDGE_PACING: Final = HedgeAnswer("pacing")
_HEDGE_BUDGET: Final = HedgeAnswer("budget_exhausted")
