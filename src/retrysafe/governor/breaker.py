"""CircuitBreaker: stop sending to a dependency that is clearly down, then probe it.

States: ``closed`` (calls flow; outcomes are counted), ``open`` (calls fail fast
with nothing sent) and ``half_open`` (exactly one probe at a time decides
whether to close again or re-open).

What counts as evidence is the call, not the attempt (see :class:`CircuitBreaker`); and a
timeout counts only if its attempt had as long as the dependency's healthy answers take,
or, before any is known, once no far more patient attempt is still waiting for an answer.
"""

from __future__ import annotations

import collections
import math
import threading
from typing import Final, Literal, NamedTuple

from retrysafe.clock import Clock
from retrysafe.clock_read import monotonic_of
from retrysafe.governor.settings import BreakerSettings

__all__ = [
    "CLOSED_PERMIT",
    "WINDOW_BUCKETS",
    "BreakerState",
    "CircuitBreaker",
    "Evidence",
    "Health",
    "Permit",
    "Transition",
]

BreakerState = Literal["closed", "open", "half_open"]
#: What an outcome says about the dependency: 5xx, timeouts, transport errors and
#: unreadable bodies are unhealthy; 4xx and 429 are neutral (the server answered).
Health = Literal["healthy", "unhealthy", "neutral"]
#: What the breaker made of an unhealthy outcome: ``counted`` against the dependency;
#: ``held`` (a timeout far shorter than an attempt still waiting: that attempt's answer
#: decides it, see :meth:`CircuitBreaker.expect_answer`); or ``callers_limit`` (a timeout
#: shorter than the dependency's common healthy answers: no evidence either way).
Evidence = Literal["counted", "held", "callers_limit"]


class Transition(NamedTuple):
    """The breaker moved from ``before`` to ``after``.

    (A named tuple, not a dataclass, like the other small values made on the way
    to a decision: ``import retrysafe`` makes every class it defines, and a frozen
    dataclass costs about ten times as much to define.)
    """

    before: BreakerState
    after: BreakerState


class Permit(NamedTuple):
    """The breaker's answer to "may I send?".

    ``allowed`` False means fail fast until ``retry_at`` (monotonic seconds).
    A ``probe`` permit is the single half-open trial; report its outcome with
    :meth:`CircuitBreaker.record`. ``lease_token`` names the fleet's lease when the
    probe is the whole fleet's (see ``retrysafe.governor.fleet_guard``).

    (A named tuple: ``import retrysafe`` defines it, and a frozen dataclass costs ten
    times as much to define.)
    """

    allowed: bool
    probe: bool = False
    retry_at: float | None = None
    probe_token: int = 0
    transition: Transition | None = None
    lease_token: str = ""
    #: Which closed period of its breaker an allowed, non-probe permit was given in:
    #: a failure reported with an earlier period's permit started before the breaker
    #: last opened, and is not evidence about the dependency now.
    period: int = 0


#: The permit of every attempt sent while the breaker is closed, until it first opens
#: (permits are values; each later closed period has one of its own).
CLOSED_PERMIT: Final = Permit(allowed=True)
#: How many time buckets the ratio window is counted in.
WINDOW_BUCKETS: Final = 10
#: How many of the latest healthy answers' times a breaker keeps.
ANSWERS_KEPT: Final = 64
#: How many failures waiting for a retry's outcome (see CircuitBreaker.defer_failure) a
#: breaker keeps; beyond them, the oldest go (a thousand are many times any run that
#: opens it, and the ratio window needs only a hundred calls).
DEFERRED_KEPT: Final = 1000
#: How many of them must be slower than a timeout for it to count as the caller's limit.
SLOWER_ANSWERS_NEEDED: Final = 2
#: The longest a timeout is held for a patient attempt's answer (see
#: CircuitBreaker.expect_answer), whatever that attempt's own time (a long poll's has
#: none): then it counts. The default attempt timeout.
HELD_AT_MOST: Final = 10.0
#: Half-open, a caller gets the probe if it gives an attempt at least this share of the
#: longest time a caller asked for lately: the probe is kept from a call site whose
#: limit is far shorter (0.1 s against 10 s), not from one whose deadline has a little
#: less left (2.9 s against 3 s) than an earlier caller's had. Closed, a timeout under
#: this share of the time an attempt still waiting was given is held for that attempt's
#: answer (see CircuitBreaker.expect_answer).
AS_PATIENT: Final = 0.5


class CircuitBreaker:
    """Closed, open, half-open with one probe; thread-safe.

    It trips on ``consecutive_failures`` failing calls in a row within
    ``failure_window``, or on a failure ratio over ``ratio_window`` once
    ``ratio_min_calls`` calls were seen. Failures of calls that started before
    it last opened are ignored, even when they arrive after it closed again (each
    closed period gives permits of its own); a success counts whenever it comes.

    **Evidence is counted per call, not per attempt** (as resilience4j and Polly
    count calls for their minimum throughput, while a retry budget, as in gRPC's
    retry throttling and Finagle, bounds the retries themselves). An outcome
    recorded with ``repeat=True`` is a retry within a call whose earlier outcome
    was already counted:

    - a call's first outcome counts once: a failure extends the consecutive run
      and adds one failed call to the ratio window; a success ends the run and
      adds one healthy call;
    - a repeat's failure adds nothing: the call was already counted as failing
      (so ``RetryPolicy(attempts=10)`` on a flaky dependency is one failing call
      to the breaker, not ten, and its own retries cannot open the circuit);
    - a repeat's success ends the run and makes the call a healthy one after
      all: the failure it was counted with is taken back (a call that failed,
      then succeeded on a retry, reads as one healthy call). So in a brownout
      where retries still win, the ratio reads the calls that really failed;
      in an outage no retry succeeds and every failed call stays counted;
    - neutral outcomes (4xx, 429) count nowhere; a half-open probe always decides,
      repeat or not.

    A real outage still opens it: many distinct calls fail their first attempt.

    The ratio window is bucketed: :data:`WINDOW_BUCKETS` counters of
    ``ratio_window / WINDOW_BUCKETS`` seconds each, reused in a ring (so it spans
    between nine and ten tenths of ``ratio_window`` back, plus the bucket now
    filling). Memory is fixed however many calls succeed, and recording a success
    while closed is one counter increment under the lock, with no allocation.
    """

    def __init__(self, settings: BreakerSettings, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        self._open_until = 0.0
        #: When each failing call of the current run failed (fewer than consecutive_failures).
        self._run: collections.deque[float] = collections.deque()
        #: When a healthy outcome last ended a run: a failure deferred before it, counted
        #: later (see retry_ended), was no part of the run that followed.
        self._healthy_at = -math.inf
        #: When it last closed after a probe, and how long it was last open (a
        #: Retry-After's period included): see _opening_period.
        self._closed_at = -math.inf
        self._opened_for = min(settings.first_open_for, settings.open_for)
        #: The ratio window's ring of buckets: [bucket number, calls, failed calls].
        self._window: list[list[int]] = [[-1, 0, 0] for _ in range(WINDOW_BUCKETS)]
        self._bucket_width = settings.ratio_window / WINDOW_BUCKETS
        #: The latest healthy answers: (when, seconds it took). Kept when the breaker
        #: opens or closes (what the dependency's answers take does not change with what
        #: the breaker decided); only those within ``ratio_window`` count.
        self._answers: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=ANSWERS_KEPT
        )
        #: Failures of calls whose retry was never sent (the budget refused it, or the
        #: caller cancelled in the backoff): (when, permit), for the next retry of a failed
        #: call to decide (see defer_failure).
        self._deferred: collections.deque[tuple[float, Permit]] = collections.deque(
            maxlen=DEFERRED_KEPT
        )
        self._probe_token = 0
        self._probe_expires: float | None = None
        #: While not closed: the longest probe lease a caller asked for within the last
        #: ``open_for`` seconds (how long the most patient caller still asking lets an
        #: attempt run), and when it asked. Half-open, the probe is that caller's.
        self._patience = 0.0
        self._patience_at = 0.0
        #: Of the attempts admitted, the one whose time runs out last: when (monotonic
        #: seconds), and how long it waits for an answer (see expect_answer).
        self._waiting_until = -math.inf
        self._waiting_patience = 0.0
        #: Timeouts held for a more patient attempt's answer (see expect_answer): when
        #: held, the permit, when it counts at the latest (HELD_AT_MOST), and after how
        #: long it timed out. The next failure not held counts them; a healthy outcome
        #: forgets them.
        self._held: collections.deque[tuple[float, Permit, float, float]] = collections.deque(
            maxlen=DEFERRED_KEPT
        )
        #: The permit of the current closed period (a new one each time it closes).
        self.closed_permit = CLOSED_PERMIT

    @property
    def state(self) -> BreakerState:
        """The state now (an expired open period reads as half-open)."""
        with self._lock:
            if self._state == "open" and monotonic_of(self._clock) >= self._open_until:
                return "half_open"
            return self._state

    @property
    def closed(self) -> bool:
        """Whether calls flow freely now (read without the lock: one attribute)."""
        return self._state == "closed"

    def open_until(self) -> float | None:
        """When the open period ends (monotonic seconds), or None when not open."""
        with self._lock:
            return self._open_until if self._state == "open" else None

    def acquire(self, probe_lease: float) -> Permit:
        """May one attempt be sent? An unreported probe frees its slot after ``probe_lease``."""
        if self._state == "closed":  # one attribute read: the healthy path takes no lock
            return self.closed_permit
        with self._lock:
            now = monotonic_of(self._clock)
            # Looked at again under the lock: another thread may have closed it since.
            if self._state == "closed":  # type: ignore[comparison-overlap]
                return self.closed_permit
            if probe_lease >= self._patience or now - self._patience_at > self.settings.open_for:
                self._patience, self._patience_at = probe_lease, now
            transition = None
            if self._state == "open":
                if now < self._open_until:
                    return Permit(allowed=False, retry_at=self._open_until)
                self._state = "half_open"
                self._probe_expires = None
                transition = Transition("open", "half_open")
            if self._probe_expires is not None and now < self._probe_expires:
                return Permit(allowed=False, retry_at=self._probe_expires, transition=transition)
            patient_until = self._patience_at + self.settings.open_for
            if probe_lease < self._patience * AS_PATIENT and now <= patient_until:
                # A caller that asked lately would give the probe longer: its probe can
                # tell a slow dependency from a dead one, this one's only close the circuit
                # (so a call site with a short limit cannot hold the probe for ever).
                return Permit(allowed=False, retry_at=patient_until, transition=transition)
            self._probe_token += 1
            self._probe_expires = now + probe_lease
            return Permit(
                allowed=True, probe=True, probe_token=self._probe_token, transition=transition
            )

    def probe_kept_for(self, now: float) -> tuple[float, float] | None:
        """Half-open with no probe in flight: the attempt time (seconds) of the patient
        caller the probe is kept for, and until when (monotonic seconds); else None."""
        with self._lock:
            if self._state == "closed" or (self._state == "open" and now < self._open_until):
                return None
            if self._probe_expires is not None and now < self._probe_expires:
                return None
            until = self._patience_at + self.settings.open_for
            return (self._patience, until) if now <= until else None

    def release(self, permit: Permit) -> None:
        """Give back a probe that ended with no outcome, so the next caller may probe."""
        with self._lock:
            if permit.probe and permit.probe_token == self._probe_token:
                self._probe_expires = None

    def record(
        self,
        permit: Permit,
        health: Health,
        *,
        open_for: float | None = None,
        repeat: bool = False,
        seconds: float | None = None,
    ) -> Transition | None:
        """Count one outcome; ``open_for`` is a 503's Retry-After; ``repeat``: a retry
        within a call already counted (its failure is not new evidence); ``seconds``: how
        long a success or a timeout took (see :meth:`cut_short`). Returns any state
        change."""
        return self.record_outcome(
            permit, health, open_for=open_for, repeat=repeat, seconds=seconds
        )[0]

    def record_outcome(
        self,
        permit: Permit,
        health: Health,
        *,
        open_for: float | None = None,
        repeat: bool = False,
        seconds: float | None = None,
    ) -> tuple[Transition | None, Evidence]:
        """:meth:`record`, and what an unhealthy outcome was taken for (decided here once,
        under the lock, so the caller's call can be told whether it counts as failing):
        ``callers_limit`` for a timeout shorter than the dependency's common healthy
        answers; ``held`` for a timeout far shorter than an attempt still waiting (see
        :meth:`expect_answer`); else ``counted`` (as every other outcome is)."""
        with self._lock:
            now = monotonic_of(self._clock)
            if seconds is not None:
                if health == "healthy":
                    self._answers.append((now, seconds))
                elif health == "unhealthy":
                    if self._cut_short(now, seconds):
                        # The caller's limit, not the dependency: no evidence either way
                        # (a probe's slot goes to the next caller, as if it never went).
                        if permit.probe and permit.probe_token == self._probe_token:
                            self._probe_expires = None
                        return None, "callers_limit"
                    if self._held and self._state == "closed":
                        overdue = self._count_held(now, overdue_only=True)
                        if overdue is not None:
                            return overdue, "counted"  # (it opened: this one is moot)
                    if (
                        not permit.probe
                        and self._state == "closed"
                        and now < self._waiting_until
                        and seconds < self._waiting_patience * AS_PATIENT
                        and self._cold(now)
                    ):
                        # A far more patient attempt still waits: its answer decides
                        # (one of this call's own retries adds nothing, as counted).
                        if not repeat:
                            due = min(self._waiting_until, now + HELD_AT_MOST)
                            self._held.append((now, permit, due, seconds))
                        return None, "held"
            return self._record(permit, health, now, open_for, repeat), "counted"

    def _cold(self, now: float) -> bool:
        """Whether too few healthy answers are known (within ``ratio_window``) to tell
        how long the dependency takes: :meth:`_cut_short` cannot judge a timeout yet."""
        oldest = now - self.settings.ratio_window
        for known, (at, _) in enumerate(reversed(self._answers), start=1):
            if at < oldest:
                break
            if known >= SLOWER_ANSWERS_NEEDED:
                return False
        return True

    def expect_answer(self, until: float, patience: float) -> None:
        """An attempt admitted now waits ``patience`` seconds at most for its answer, until
        ``until`` (monotonic seconds, on the breaker's clock).

        Before any healthy answer says how long the dependency takes (see
        :meth:`_cut_short`), a call site giving its attempts 0.1 s, beside one giving
        them 5 s, against a server answering in 0.3 s, times out at once on every call:
        counted, its timeouts opened the circuit, cold, for the patient site too. So the
        breaker keeps the attempt whose time runs out last, and while it waits, a timeout
        shorter than :data:`AS_PATIENT` of its time is held for its answer: a healthy
        outcome forgets the held timeouts (the dependency answers, slowly), the next
        failure that is not held counts them before itself (the patient attempt's own
        timeout, a 5xx, a refused connection; or a short timeout once no patient attempt
        waits). So a hung dependency still opens it, at most the patient attempt's time
        later (and a held timeout counts :data:`HELD_AT_MOST` after it came, whatever
        waits: a long poll); where every caller gives the same time, nothing is held.
        Once :data:`SLOWER_ANSWERS_NEEDED` healthy answers are known, nothing is held
        either: their times judge a timeout (see :meth:`_cut_short`).

        On every attempt's path, so without the lock: two threads racing here may leave
        one's time with the other's patience, which only changes which patient attempt a
        short timeout is held for.
        """
        if until > self._waiting_until:
            self._waiting_until = until
            self._waiting_patience = patience

    def answered_since(self, moment: float) -> bool:
        """Whether a healthy answer was counted at ``moment`` (monotonic seconds) or
        later. Without the lock: a moment's race only moves which side of it an answer
        falls."""
        return self._healthy_at >= moment

    def answer_ended(self, until: float) -> None:
        """The attempt told to :meth:`expect_answer` with ``until`` ended: if it was the
        one kept, no attempt is known to wait any more (one admitted after it will say
        so; older ones still waiting go unseen, and a short timeout then counts, as it
        did before any was kept)."""
        if until == self._waiting_until:
            self._waiting_until = -math.inf

    def answer_abandoned(self, until: float, waited: float) -> Transition | None:
        """The attempt told to :meth:`expect_answer` with ``until`` was given up with no
        answer after ``waited`` seconds (its caller cancelled it): as
        :meth:`answer_ended`, and the held timeouts shorter than that wait count now:
        it waited longer than they did and no answer came. A patient attempt whose own
        caller gives up sooner (an ``asyncio.timeout`` around a call with a long
        ``attempt_timeout``) will never vouch for them, and callers doing so one after
        another would otherwise keep them held for :data:`HELD_AT_MOST`; a call
        cancelled sooner than they timed out says nothing of them. Returns any state
        change."""
        self.answer_ended(until)
        if not self._held:
            return None
        with self._lock:
            if self._state != "closed":
                return None
            return self._count_held(monotonic_of(self._clock), shorter_than=waited)

    def _record(
        self,
        permit: Permit,
        health: Health,
        now: float,
        open_for: float | None,
        repeat: bool,
        joins_run: bool = True,
    ) -> Transition | None:
        """:meth:`record_outcome`'s count (under the lock); a failure that does not
        ``joins_run`` counts in the ratio window only, not in the run of failures in a
        row."""
        if permit.probe:
            if permit.probe_token != self._probe_token or self._state != "half_open":
                return None  # a probe whose lease ran out and was replaced
            self._probe_expires = None
            if health == "unhealthy":
                return self._open(now, open_for, before="half_open")
            self._close()
            return Transition("half_open", "closed")
        if self._state != "closed" or health == "neutral":
            return None
        if permit.period != self.closed_permit.period and (health == "unhealthy" or repeat):
            # A call that started before the breaker last opened: its failure (or
            # the failure its retry's success would take back) belongs to then.
            return None
        # One counter in the bucket of now; a stale bucket is reused for it.
        bucket = int(now // self._bucket_width)
        cell = self._window[bucket % WINDOW_BUCKETS]
        if cell[0] != bucket:
            cell[0], cell[1], cell[2] = bucket, 0, 0
        if health == "healthy":
            self._healthy_at = now
            if self._run:
                self._run.clear()
            held = bool(self._held)
            if held:
                self._held.clear()  # (the dependency answers: they were the callers' limits)
            # A retry's success takes back its call's failure: a held one, if any were
            # held (cleared just now), else one counted in the window.
            if not (repeat and (held or self._forgive_one_failure(bucket))):
                cell[1] += 1
            return None  # only a failure can open the circuit
        if self._held:
            transition = self._count_held(now)
            if transition is not None:
                return transition
        if repeat:
            return None  # this call is counted as failing already
        cell[1] += 1
        cell[2] += 1
        if joins_run:
            self._run.append(now)
        if self._should_trip(now, bucket):
            return self._open(now, open_for, before="closed")
        return None

    def _count_held(
        self, now: float, *, overdue_only: bool = False, shorter_than: float = math.inf
    ) -> Transition | None:
        """Count the timeouts held for a patient attempt (under the lock): a failure not
        held came, so they were the dependency's; or, ``overdue_only``, those whose hold
        ran out (no answer came in time); or those that timed out sooner than
        ``shorter_than`` seconds. Those older than ``failure_window`` are dropped;
        returns any state change."""
        oldest = now - self.settings.failure_window
        taken: list[tuple[float, Permit, float, float]] = []
        kept: list[tuple[float, Permit, float, float]] = []
        for entry in self._held:
            _, _, due, seconds = entry
            counts = due <= now if overdue_only else seconds < shorter_than
            (taken if counts else kept).append(entry)
        if not taken:
            return None
        self._held.clear()
        self._held.extend(kept)
        transition: Transition | None = None
        for at, permit, _, _ in taken:
            if at >= oldest and self._state == "closed":
                changed = self._record(permit, "unhealthy", now, None, False)
                if changed is not None:
                    transition = changed
        return transition

    def defer_failure(self, permit: Permit) -> None:
        """A call's first failure (under ``permit``) whose retry will not be sent: the
        retry budget refused it, or the caller cancelled the call in its backoff. No retry
        of its own can say whether the dependency is failing or blipped.

        Counted at once, many calls refused in one blip opened the circuit, which then
        refused the retries the budget had granted (and callers whose timeouts ended them
        during the backoff opened it against a dependency whose retries succeed);
        dropped, a dependency failing nine answers in ten, with the budget spent, never
        opened it (the calls that succeeded at once counted, those that failed did not).
        So another call's retry decides it
        (:meth:`retry_ended`): counted if that retry fails too, forgotten if it succeeds.
        Kept for ``failure_window`` at most; counted, it joins the run of failures in a
        row only if no healthy outcome came after it (otherwise healthy traffic between a
        few such failures and one failing retry minutes later would open the circuit on
        a "run" that never was)."""
        with self._lock:
            self._deferred.append((monotonic_of(self._clock), permit))

    def retry_ended(self, failed: bool) -> Transition | None:
        """A retry of a call that failed ended: ``failed`` again (the dependency fails), or
        it succeeded (a blip). The failures deferred until now count, or are forgotten.
        Returns any state change."""
        with self._lock:
            deferred = self._deferred
            if not deferred:
                return None
            if not failed:
                deferred.clear()
                return None
            now = monotonic_of(self._clock)
            oldest = now - self.settings.failure_window
            taken = list(deferred)
            deferred.clear()
            transition: Transition | None = None
            for at, permit in taken:
                if at >= oldest:
                    # (one deferred before a healthy call since is no part of the run the
                    # healthy call ended: it counts toward the ratio only)
                    in_run = at >= self._healthy_at
                    changed = self._record(permit, "unhealthy", now, None, False, in_run)
                    if changed is not None:
                        transition = changed
            return transition

    def record_healthy_call(self, seconds: float = 0.0, until: float = -math.inf) -> None:
        """Count a call that succeeded at once, admitted while closed, its attempt taking
        ``seconds`` (and told to :meth:`expect_answer` with ``until``): what
        ``record(CLOSED_PERMIT, "healthy", seconds=seconds)`` and :meth:`answer_ended` do,
        on the short path every healthy call takes."""
        with self._lock:
            now = monotonic_of(self._clock)
            if until == self._waiting_until:
                self._waiting_until = -math.inf
            self._answers.append((now, seconds))
            if self._state != "closed":
                return
            bucket = int(now // self._bucket_width)
            cell = self._window[bucket % WINDOW_BUCKETS]
            if cell[0] != bucket:
                cell[0], cell[1], cell[2] = bucket, 0, 0
            cell[1] += 1
            self._healthy_at = now
            if self._run:
                self._run.clear()
            if self._held:
                self._held.clear()

    def cut_short(self, seconds: float) -> bool:
        """Whether a timeout after ``seconds`` would be taken for the caller's own limit,
        not evidence against the dependency (see :meth:`_cut_short`)."""
        with self._lock:
            return self._cut_short(monotonic_of(self._clock), seconds)

    def _cut_short(self, now: float, seconds: float) -> bool:
        """Whether healthy answers slower than ``seconds`` are common: at least
        :data:`SLOWER_ANSWERS_NEEDED` of the latest ones within ``ratio_window``, and at
        least a tenth of them (one slow answer does not hide an outage). Then a timeout
        after ``seconds`` is the caller's own limit: a call site with a 0.1 s attempt
        timeout, against a server that answers others in 0.3 s, must not open the
        circuit for every caller. (Half-open, the probe goes to the most patient caller
        asking: see :meth:`acquire`.)"""
        oldest = now - self.settings.ratio_window
        recent = slower = 0
        for at, took in self._answers:
            if at >= oldest:
                recent += 1
                if took > seconds:
                    slower += 1
        return slower >= SLOWER_ANSWERS_NEEDED and slower * 10 >= recent

    def _forgive_one_failure(self, bucket: int) -> bool:
        """A call that failed, then succeeded on a retry, is a healthy call after all:
        take back the failure it was counted with (the newest one still in the window).
        False if none is left to take back (it has aged out)."""
        oldest = bucket - WINDOW_BUCKETS
        newest: list[int] | None = None
        for cell in self._window:
            if (
                oldest < cell[0] <= bucket
                and cell[2] > 0
                and (newest is None or cell[0] > newest[0])
            ):
                newest = cell
        if newest is None:
            return False
        newest[2] -= 1
        return True

    def calls_in_window(self) -> int:
        """Calls counted in the ratio window now."""
        with self._lock:
            return self._tally(int(monotonic_of(self._clock) // self._bucket_width))[0]

    def at_rest(self) -> bool:
        """Nothing here outlives a fresh breaker: closed, no failing run, an empty window."""
        if self._state != "closed":
            return False
        with self._lock:
            now = monotonic_of(self._clock)
            if self._run and self._run[-1] >= now - self.settings.failure_window:
                return False
            if self._held or self._waiting_until > now:
                return False
            return self._tally(int(now // self._bucket_width))[0] == 0

    def _tally(self, bucket: int) -> tuple[int, int]:
        """Calls and failed calls in the window that ends with ``bucket`` (under the lock)."""
        oldest = bucket - WINDOW_BUCKETS
        calls = failures = 0
        for number, bucket_calls, bucket_failures in self._window:
            if oldest < number <= bucket:
                calls += bucket_calls
                failures += bucket_failures
        return calls, failures

    def _should_trip(self, now: float, bucket: int) -> bool:
        settings = self.settings
        run = self._run
        while run and run[0] < now - settings.failure_window:
            run.popleft()
        if len(run) >= settings.consecutive_failures:
            return True
        calls, failures = self._tally(bucket)
        if calls < settings.ratio_min_calls:
            return False
        return failures / calls >= settings.failure_ratio

    def opened_for(self) -> float | None:
        """How long its current open period lasts in all (a Retry-After's included), or
        None when it is not open."""
        with self._lock:
            return self._opened_for if self._state == "open" else None

    def opening_period(self) -> float:
        """How long the circuit would open for now, from closed, with no Retry-After
        (see :meth:`_opening_period`): what a fleet vote asks for."""
        with self._lock:
            return self._opening_period(monotonic_of(self._clock), probe_failed=False)

    def _opening_period(self, now: float, *, probe_failed: bool) -> float:
        """How long the circuit opens for if it opens at ``now`` (with no Retry-After):
        ``first_open_for`` when it opens after a while closed, as a blip ends soon after;
        twice the last period, up to ``open_for``, once a probe failed (a longer blip,
        or the dependency is down) or when it opens again within ``open_for`` of
        closing (it flaps)."""
        settings = self.settings
        if probe_failed or now - self._closed_at < settings.open_for:
            return min(settings.open_for, 2.0 * self._opened_for)
        return min(settings.first_open_for, settings.open_for)

    def _open(self, now: float, hint: float | None, *, before: BreakerState) -> Transition:
        if hint is not None and self.settings.use_retry_after and hint > 0:
            period = min(hint, self.settings.max_open_for)
        else:
            period = self._opening_period(now, probe_failed=before != "closed")
        self._opened_for = period
        self._state = "open"
        self._open_until = now + period
        self._forget()
        return Transition(before, "open")

    def _close(self) -> None:
        self._closed_at = monotonic_of(self._clock)
        self._state = "closed"
        self._patience = 0.0
        self.closed_permit = Permit(allowed=True, period=self.closed_permit.period + 1)
        self._forget()

    def _forget(self) -> None:
        self._run.clear()
        self._held.clear()
        for cell in self._window:
            cell[0], cell[1], cell[2] = -1, 0, 0

    def __repr__(self) -> str:
        return f"CircuitBreaker(state={self.state!r})"
