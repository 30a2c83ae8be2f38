"""A caller's own short time limit is not evidence against the dependency.

A call site with a 0.1 s attempt timeout (or a deadline nearly spent), against a
server that answers everyone else in 0.3 s, times out on every call. Those timeouts
say nothing about the server: counted, they opened the circuit for every caller of
the host, and kept it open (each half-open probe went to a short call, timed out,
and opened it again). The breaker learns how long the dependency's healthy answers
take, and a timeout shorter than one of them counts nowhere.

The arithmetic on the fake clock; then the same over real sockets.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import sys
import time

import httpx
import pytest

import retrysafe
from breaker_on_fake_clock import CLOSED, SETTINGS
from breaker_on_fake_clock import breaker_on_fake_clock as _breaker
from fresh_drive import fresh_drive, shell_settings
from retrysafe import RetryPolicy
from retrysafe.attempt_plan import AttemptPlan
from retrysafe.chaos import KeyedChaos
from retrysafe.classify import AttemptTimedOut
from retrysafe.decisions import Admission, Fail, RecordHealth
from retrysafe.drive import Drive
from retrysafe.engine import Call
from retrysafe.errors import AttemptRecord
from retrysafe.governor import (
    BreakerSettings,
    BudgetSettings,
    CircuitBreaker,
    Governor,
    GovernorSettings,
    Transition,
)
from retrysafe.hedged_shell import _Copy, _Judging, _timed
from retrysafe.request_facts import default_dependency
from retrysafe.testing import FakeClock


def _time_out(breaker: CircuitBreaker, seconds: float, times: int) -> None:
    for _ in range(times):
        breaker.record(CLOSED, "unhealthy", seconds=seconds)


def _answers(breaker: CircuitBreaker, seconds: float, times: int = 3) -> None:
    """Healthy answers, each taking ``seconds`` (three: a common answer time)."""
    for _ in range(times):
        breaker.record_healthy_call(seconds)


def test_timeouts_shorter_than_common_healthy_answers_do_not_open_it() -> None:
    breaker, _ = _breaker()
    _answers(breaker, 0.3)
    _time_out(breaker, 0.1, 50)
    assert breaker.state == "closed"


@pytest.mark.parametrize(
    ("slower", "faster", "state"),
    [
        # one slow answer (a slow body, one slow endpoint) says little of answer times
        (1, 20, "open"),
        (1, 4, "open"),  # one is never enough, however few answers are known (a fifth)
        (3, 40, "open"),  # 3 of 43: under a tenth
        (2, 18, "closed"),  # 2 of 20: at least two, and exactly a tenth
    ],
)
def test_a_timeout_is_the_callers_own_limit_only_when_two_answers_and_a_tenth_took_longer(
    slower: int, faster: int, state: str
) -> None:
    """Healthy answers slower than the timeout must be common, at least two of the latest
    and at least a tenth of them, before timeouts that short are taken for the caller's own
    limit rather than evidence against the dependency."""
    breaker, _ = _breaker()
    _answers(breaker, 1.35, times=slower)
    _answers(breaker, 0.05, times=faster)
    _time_out(breaker, 0.5, 50)
    assert breaker.state == state


def test_timeouts_at_least_as_long_as_every_healthy_answer_open_it() -> None:
    breaker, _ = _breaker()
    _answers(breaker, 0.3)
    _time_out(breaker, 10.0, 5)
    assert breaker.state == "open"


def test_with_no_healthy_answer_known_timeouts_count() -> None:
    breaker, _ = _breaker()
    _time_out(breaker, 0.1, 5)
    assert breaker.state == "open"


def test_what_it_learned_ages_out_with_the_ratio_window() -> None:
    breaker, clock = _breaker()
    for _ in range(3):
        breaker.record(CLOSED, "healthy", seconds=0.3)  # (successes on the engine's path)
    clock.advance(SETTINGS.ratio_window + 1)
    _time_out(breaker, 0.1, 5)
    assert breaker.state == "open"


def test_other_failures_count_whatever_the_answers_take() -> None:
    breaker, _ = _breaker()
    _answers(breaker, 0.3)
    for _ in range(5):
        breaker.record(CLOSED, "unhealthy")  # a 503, a reset: no time given
    assert breaker.state == "open"


def test_a_short_probe_that_times_out_leaves_the_probe_to_the_next_caller() -> None:
    """Half-open: a probe cut by its own short limit decides nothing. It neither opens
    the circuit again nor closes it; the next caller probes at once."""
    breaker, clock = _breaker()
    _answers(breaker, 0.3)
    _time_out(breaker, 10.0, 5)
    assert breaker.state == "open"
    clock.advance(SETTINGS.open_for)
    probe = breaker.acquire(probe_lease=2.0)
    assert probe.probe
    assert breaker.record(probe, "unhealthy", seconds=0.1) is None
    assert breaker.state == "half_open"
    assert breaker.acquire(probe_lease=2.0).probe


def test_a_probe_that_times_out_after_the_healthy_answers_took_opens_it_again() -> None:
    breaker, clock = _breaker()
    _answers(breaker, 0.3)
    _time_out(breaker, 10.0, 5)
    clock.advance(SETTINGS.open_for)
    probe = breaker.acquire(probe_lease=11.0)
    breaker.record(probe, "unhealthy", seconds=10.0)
    assert breaker.state == "open"


def test_the_probe_goes_to_the_most_patient_caller_asking() -> None:
    """No healthy answer known: the short call site alone opened the circuit. Another
    caller, willing to wait 10 s, is refused meanwhile; once half-open, the short call
    site gets no probe (its timeout could only close the circuit, never tell a slow
    dependency from a dead one), and the patient caller's probe decides."""
    breaker, clock = _breaker()
    _time_out(breaker, 0.1, 5)
    assert breaker.state == "open"
    assert not breaker.acquire(probe_lease=11.0).allowed  # the patient caller, refused
    clock.advance(SETTINGS.open_for)
    short = breaker.acquire(probe_lease=1.1)
    assert not short.allowed
    patient = breaker.acquire(probe_lease=11.0)
    assert patient.probe
    breaker.record(patient, "healthy", seconds=0.3)
    assert breaker.state == "closed"


def test_short_callers_asking_often_cannot_keep_a_dead_dependency_half_open() -> None:
    """Short callers ask every 0.1 s, the patient one every 2 s, the dependency hangs:
    the patient caller's probe gets through and opens the circuit again (the short ones
    once kept the probe, released it on each timeout, and it stayed half-open)."""
    breaker, clock = _breaker()
    _time_out(breaker, 10.0, 5)
    clock.advance(SETTINGS.open_for - 2.0)
    assert not breaker.acquire(probe_lease=11.0).allowed  # (the patient caller asks)
    for step in range(1, 41):  # 4 s, the open period ending half-way
        clock.advance(0.1)
        if step % 20 == 0:
            patient = breaker.acquire(probe_lease=11.0)
            if patient.probe:
                clock.advance(10.0)
                breaker.record(patient, "unhealthy", seconds=10.0)
                break
        else:
            assert not breaker.acquire(probe_lease=1.1).probe
    assert breaker.state == "open"


def test_a_patient_caller_that_stopped_asking_no_longer_holds_short_probes_back() -> None:
    """The patient caller asked once, an open period ago, and left: a short probe that
    times out decides again (the circuit opens), rather than half-open for good."""
    breaker, clock = _breaker()
    _time_out(breaker, 0.1, 5)
    assert not breaker.acquire(probe_lease=301.0).allowed  # (no time limit: max_open_for)
    clock.advance(SETTINGS.open_for + 0.1)
    probe = breaker.acquire(probe_lease=1.1)
    breaker.record(probe, "unhealthy", seconds=0.1)
    assert breaker.state == "open"


def test_a_probe_as_patient_as_anyone_waiting_decides() -> None:
    breaker, clock = _breaker()
    _time_out(breaker, 0.1, 5)
    clock.advance(SETTINGS.open_for)
    probe = breaker.acquire(probe_lease=1.1)
    breaker.record(probe, "unhealthy", seconds=0.1)
    assert breaker.state == "open"


def test_a_caller_as_patient_but_for_the_time_its_deadline_spent_gets_the_probe() -> None:
    """Callers of one call site, whose attempts are bounded by their deadline (3 s), each
    give a little less than the one before, as their clocks run: none is a short call
    site, and the next to ask after the open period probes (it once waited an open
    period more, refused as if a probe were in flight)."""
    breaker, clock = _breaker()
    _time_out(breaker, 10.0, 5)
    assert not breaker.acquire(probe_lease=3.0).allowed  # (asked while open)
    clock.advance(SETTINGS.open_for)
    assert breaker.acquire(probe_lease=2.999).probe


def test_the_probe_is_kept_from_a_caller_giving_less_than_half_the_patient_ones_time() -> None:
    breaker, clock = _breaker()
    _time_out(breaker, 10.0, 5)
    assert not breaker.acquire(probe_lease=3.0).allowed
    clock.advance(SETTINGS.open_for)
    assert not breaker.acquire(probe_lease=1.4).allowed
    assert breaker.acquire(probe_lease=1.5).probe


def test_a_probe_kept_for_a_patient_caller_is_explained_as_that() -> None:
    """Refused half-open with no probe in flight: the message says whom the probe is
    kept for, and when a caller as short as this one may probe (not "in flight")."""
    clock = FakeClock(seed=1)
    governor = Governor(GovernorSettings(breaker=SETTINGS), clock=clock)
    down = httpx.MockTransport(lambda request: httpx.Response(503))
    patient = RetryPolicy(attempts=1, attempt_timeout=10.0)
    with retrysafe.Client(transport=down, governor=governor, clock=clock) as client:
        for _ in range(SETTINGS.consecutive_failures):
            with pytest.raises(retrysafe.ServerError):
                client.get("https://api.test/", policy=patient)
        with pytest.raises(retrysafe.CircuitOpen):
            client.get("https://api.test/", policy=patient)  # (asked while open)
        clock.advance(SETTINGS.open_for)
        short = RetryPolicy(attempts=1, attempt_timeout=1.0, min_attempt_time=0.1)
        with pytest.raises(retrysafe.CircuitOpen) as refused:
            client.get("https://api.test/", policy=short)
    assert "keeps its one probe for a caller that asked lately" in str(refused.value)
    assert "(a probe lease of 11.0 s)" in str(refused.value)  # (10 s and the lease's grace)
    assert "in flight" not in str(refused.value)
    assert refused.value.retry_after == pytest.approx(0.0, abs=0.01)


def test_a_call_whose_short_timeout_went_uncounted_is_a_new_call_when_it_succeeds() -> None:
    """Its timeout was not counted, so its retry's success is a healthy call of its own,
    and takes back no other call's failure."""
    clock = FakeClock(seed=3)
    governor = Governor(GovernorSettings(breaker=SETTINGS), clock=clock)
    replies: list[tuple[float, int | None]] = [(0.3, 200)] * 3 + [(0.01, 503)] * 4
    replies += [(0.1, None), (0.3, 200)]  # (a read timeout after 0.1 s, then an answer)

    def handler(request: httpx.Request) -> httpx.Response:
        took, status = replies.pop(0)
        clock.advance(took)
        if status is None:
            raise httpx.ReadTimeout("no answer in 0.1 s", request=request)
        return httpx.Response(status)

    policy = RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.01)
    with retrysafe.Client(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor, policy=policy
    ) as client:
        for _ in range(3):
            client.get("http://api.test/")
        for _ in range(4):
            with pytest.raises(retrysafe.ServerError):
                client.get("http://api.test/", policy=RetryPolicy(attempts=1))
        assert client.get("http://api.test/").status_code == 200
    breaker = governor.guard("http://api.test:80").breaker
    assert breaker is not None
    assert breaker.calls_in_window() == 3 + 4 + 1


def test_a_timeout_as_long_as_the_healthy_answers_took_counts() -> None:
    """The attempt was given as long as the dependency takes to answer: only answers that
    took longer than the timeout make it the caller's own limit."""
    breaker, _ = _breaker()
    _answers(breaker, 0.3)
    _time_out(breaker, 0.3, 5)
    assert breaker.state == "open"


def test_healthy_answers_recorded_with_a_permit_are_learned_too() -> None:
    """A success reported through ``record`` (a retry's, a probe's) teaches the breaker
    what its answers take, as the short path's successes do."""
    breaker, _ = _breaker()
    for _ in range(3):
        breaker.record(CLOSED, "healthy", seconds=0.3)
    _time_out(breaker, 0.1, 50)
    assert breaker.state == "closed"


def test_the_patient_caller_counts_from_the_last_time_it_asked() -> None:
    """A patient caller that asked early in the open period and again near its end still
    holds the probe back from a short caller after it (its patience is as recent as its
    latest ask, not its first)."""
    breaker, clock = _breaker()
    _time_out(breaker, 10.0, 5)
    clock.advance(0.5)
    assert not breaker.acquire(probe_lease=11.0).allowed
    clock.advance(SETTINGS.open_for - 1.0)
    assert not breaker.acquire(probe_lease=11.0).allowed  # (the same caller, again)
    clock.advance(1.1)  # half-open, more than an open period after its first ask
    assert not breaker.acquire(probe_lease=1.1).allowed


def test_a_refusal_for_patience_says_until_when_the_probe_is_kept() -> None:
    """The probe is kept for the patient caller until an open period after it last asked:
    a short caller refused half-open is told to come back then, not at once."""
    breaker, clock = _breaker()
    _time_out(breaker, 10.0, 5)
    opened = clock.monotonic()
    clock.advance(3.0)
    assert not breaker.acquire(probe_lease=11.0).allowed  # (the patient caller, 3 s in)
    clock.advance(SETTINGS.open_for - 3.0)
    refused = breaker.acquire(probe_lease=1.1)
    assert not refused.allowed
    assert refused.retry_at == pytest.approx(opened + 3.0 + SETTINGS.open_for)


def test_a_caller_refused_for_patience_still_reports_the_move_to_half_open() -> None:
    """The first caller after the open period moves the breaker to half-open, and its
    permit says so even when the probe is kept from it (nobody else would report it)."""
    breaker, clock = _breaker()
    _time_out(breaker, 10.0, 5)
    assert not breaker.acquire(probe_lease=11.0).allowed
    clock.advance(SETTINGS.open_for)
    refused = breaker.acquire(probe_lease=1.1)
    assert not refused.allowed
    assert refused.transition == Transition("open", "half_open")


def test_patience_from_before_the_circuit_closed_does_not_hold_the_next_probe() -> None:
    """The patient caller's probe closed the circuit; it opens again at once, for a 503's
    short Retry-After. The next open period starts with no patient caller: the first
    caller after it probes, short or not."""
    breaker, clock = _breaker()
    _time_out(breaker, 10.0, 5)
    clock.advance(SETTINGS.open_for)
    patient = breaker.acquire(probe_lease=11.0)
    assert breaker.record(patient, "healthy", seconds=0.3) == Transition("half_open", "closed")
    for _ in range(SETTINGS.consecutive_failures):
        breaker.record(breaker.closed_permit, "unhealthy", open_for=1.0)
    assert breaker.state == "open"
    clock.advance(1.0)
    assert breaker.acquire(probe_lease=1.1).probe


def _timed_out_after(queued: float, *, ended_after: float = 1.0, late: float = 0.0) -> RecordHealth:
    """What a call tells the breaker of an attempt that timed out ``ended_after`` seconds
    after it started, having waited ``queued`` of it for a connection, its last read
    ending ``late`` seconds past its limit."""
    clock = FakeClock()
    # (one attempt: the call ends on it, so its failure is told at once)
    policy = RetryPolicy(attempts=1)
    call = Call(httpx.Request("GET", "http://api.test/"), policy=policy, clock=clock)
    plan = call.start_attempt(Admission(permit=CLOSED))
    assert isinstance(plan, AttemptPlan)
    clock.advance(ended_after)
    if queued:
        call.attempt_queued(queued)
    call.attempt_ended_late(late)
    call.attempt_raised(plan, AttemptTimedOut("too slow"), during_body=False)
    [health] = [effect for effect in call.take_effects() if isinstance(effect, RecordHealth)]
    return health


def test_a_timeout_counts_only_the_time_after_the_request_went_out() -> None:
    """Time spent waiting for a connection (the client's own full pool) was never given
    to the dependency: the breaker weighs the time its request had."""
    assert _timed_out_after(queued=0.0).seconds == pytest.approx(1.0)
    assert _timed_out_after(queued=0.9).seconds == pytest.approx(0.1)


def test_a_timeout_weighs_the_time_it_had_not_how_late_the_loop_ended_it() -> None:
    """A 0.1 s read timeout that a busy event loop got round to 0.4 s in gave the
    dependency 0.1 s: weighed as 0.4 s, beside answers of 0.3 s, it read as the
    dependency's failure (the breaker opened on a short call site under CPU load)."""
    assert _timed_out_after(0.0, ended_after=0.4, late=0.3).seconds == pytest.approx(0.1)
    assert _timed_out_after(0.2, ended_after=1.0, late=0.3).seconds == pytest.approx(0.5)
    assert _timed_out_after(0.0, ended_after=0.4, late=0.0).seconds == pytest.approx(0.4)
    assert _timed_out_after(0.0, ended_after=0.4, late=0.5).seconds == 0.0  # (never below)


def _state_after_five_timeouts(
    timeout: httpx.TimeoutException, *, ended_after: float, late: float, by_a_copy: bool = False
) -> str:
    """The breaker's state after five calls each end on ``timeout`` ``ended_after`` seconds
    in, through the drive, the read that timed out ending ``late`` seconds past its
    limit (as the network stream tells the call; ``by_a_copy``: a hedged copy's, handed
    over as the hedged shell does), beside two answers known to take 0.3 s."""
    clock = FakeClock()
    governor = Governor(FIVE_IN_A_ROW, clock=clock)
    settings = shell_settings(RetryPolicy(attempts=1), clock=clock, governor=governor)
    breaker = governor.guard(default_dependency(httpx.URL("https://api.example.com/"))).breaker
    assert breaker is not None
    _answers(breaker, 0.3, times=2)  # (the breaker knows how long answers take)
    for _ in range(FIVE_IN_A_ROW.breaker.consecutive_failures):
        drive = Drive(settings, httpx.Request("GET", "https://api.example.com/"))
        plan = drive.next_attempt()
        assert isinstance(plan, AttemptPlan)
        clock.advance(ended_after)
        if by_a_copy:
            copy = _Copy(plan, drive.request, drive, judging=_Judging())
            copy.late_by = late
            _timed(drive, copy)
        else:
            drive.late_by = late
        step = drive.raised(plan, timeout, during_body=False)
        assert drive.late_by == 0.0  # (taken: the next attempt starts afresh)
        drive.close()
        assert isinstance(step, Fail)
    return breaker.state


@pytest.mark.parametrize("by_a_copy", [False, True], ids=["attempt", "hedged-copy"])
def test_a_short_read_timeout_ended_late_by_a_busy_loop_is_the_callers_limit(
    by_a_copy: bool,
) -> None:
    """Through the drive: a call site whose read timeout is 0.1 s, beside answers known to
    take 0.3 s, times out five times in a row, each timeout ending 0.4 s in (the event
    loop 0.3 s late). Each is taken for the caller's limit and the circuit stays
    closed; weighed by how late they ended, they opened it."""
    timeout = httpx.ReadTimeout("x")
    assert _state_after_five_timeouts(timeout, ended_after=0.4, late=0.3, by_a_copy=by_a_copy) == (
        "closed"
    )


def test_a_server_that_went_quiet_after_trickling_its_answer_still_opens_it() -> None:
    """A read timeout is per read: a server that sent a header line every 50 ms for 2 s and
    then went quiet was given 2.1 s, however short the read timeout; only the last
    read's lateness is taken off, and the five open the circuit (review85)."""
    assert _state_after_five_timeouts(httpx.ReadTimeout("x"), ended_after=2.1, late=0.01) == (
        "open"
    )


def _cut(started: bool, sent: bool) -> str:
    """The outcome a drive records for an attempt cut from outside (an HTTP/2 call's or a
    hedged copy's time limit), whose start and first write its shell noted or not."""
    drive = fresh_drive(RetryPolicy(attempts=1))
    plan = drive.next_attempt()
    assert isinstance(plan, AttemptPlan)
    now = time.monotonic()
    drive.attempt_started_at = now - 1.0 if started else None
    drive.attempt_sent_at = now - 0.5 if sent else None
    step = drive.raised(plan, AttemptTimedOut("cut"), during_body=False)
    drive.close()
    assert isinstance(step, Fail)
    return step.error.outcome


def test_an_attempt_cut_before_it_wrote_anything_is_a_pool_timeout() -> None:
    """Its network streams note its first write, and there was none: its time went on
    waiting for a connection or a stream, so it was never sent, and is no evidence."""
    assert _cut(started=True, sent=False) == "pool_timeout"
    assert _cut(started=True, sent=True) == "attempt_timeout"
    # (a shell that does not time its attempts, or a transport that notes no writes,
    # takes the attempt as written from its start: maybe sent, as a cut always was)
    assert _cut(started=False, sent=False) == "attempt_timeout"


# -- over real sockets ----------------------------------------------------------------------

#: Opens on five failing calls in a row, so the test needs few calls to show it would.
FIVE_IN_A_ROW = GovernorSettings(breaker=BreakerSettings(consecutive_failures=5, open_for=5.0))
IMPATIENT = RetryPolicy(attempts=1, attempt_timeout=0.1)


def test_a_call_site_with_a_short_timeout_does_not_lock_out_the_others(
    chaos: KeyedChaos,
) -> None:
    """The server answers in 0.3 s (three answers say so). One call site gives it 0.1 s
    and times out, twenty times, from eight threads; the default call site still gets
    every answer."""
    slow_but_fine = chaos.url("/delay", ms=300)
    with retrysafe.Client(governor=Governor(FIVE_IN_A_ROW)) as client:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:  # (answers take 0.3 s)
            assert set(pool.map(lambda _: client.get(slow_but_fine).status_code, range(3))) == {200}

        def impatient(_: int) -> str:
            try:
                client.get(slow_but_fine, policy=IMPATIENT)
            except retrysafe.ApiError as error:
                return type(error).__name__
            return "ok"

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(impatient, range(20)))
        assert set(outcomes) == {"TransportError"}  # its own timeouts, not CircuitOpen
        assert client.get(slow_but_fine).status_code == 200
        breaker = client.governor.guard(default_dependency(httpx.URL(slow_but_fine))).breaker
        assert breaker is not None
        assert breaker.state == "closed"


def test_a_server_that_stops_answering_still_opens_it(chaos: KeyedChaos) -> None:
    """The same server, answering in 0.05 s, then hanging: timeouts longer than its
    healthy answers are evidence, and the circuit opens."""
    with retrysafe.Client(governor=Governor(FIVE_IN_A_ROW)) as client:
        assert client.get(chaos.url("/delay", ms=50)).status_code == 200
        patient_enough = RetryPolicy(attempts=1, attempt_timeout=0.3)
        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            list(pool.map(lambda _: _hang(client, chaos, patient_enough), range(5)))
        with pytest.raises(retrysafe.CircuitOpen):
            client.get(chaos.url("/hang"), policy=patient_enough)


def _outcome(client: retrysafe.Client, url: str, policy: RetryPolicy) -> str:
    try:
        return str(client.get(url, policy=policy).status_code)
    except retrysafe.ApiError as error:
        return error.outcome


def test_a_burst_larger_than_the_pool_does_not_open_it(chaos: KeyedChaos) -> None:
    """Forty calls at once through six connections to a server answering in 0.2 s: the
    later ones wait for a connection, and time out there (the pool) or soon after getting
    one (six at once, the third call on each connection). The client's own queue, not
    the server: the circuit stays closed."""
    limits = httpx.Limits(max_connections=6)
    policy = RetryPolicy(attempts=1, attempt_timeout=0.5)
    healthy = chaos.url("/delay", ms=200)
    with retrysafe.Client(governor=Governor(FIVE_IN_A_ROW), limits=limits) as client:
        with concurrent.futures.ThreadPoolExecutor(40) as pool:
            outcomes = list(pool.map(lambda _: _outcome(client, healthy, policy), range(40)))
        assert "200" in outcomes
        assert outcomes.count("200") < 40, f"the pool was never full: {outcomes}"
        breaker = client.governor.guard(default_dependency(httpx.URL(healthy))).breaker
        assert breaker is not None
        assert breaker.state == "closed", outcomes
        assert client.get(healthy).status_code == 200


def test_async_a_burst_larger_than_the_pool_does_not_open_it(chaos: KeyedChaos) -> None:
    limits = httpx.Limits(max_connections=6)
    policy = RetryPolicy(attempts=1, attempt_timeout=0.5)
    healthy = chaos.url("/delay", ms=200)

    async def burst() -> tuple[list[str], str, int]:
        async with retrysafe.AsyncClient(governor=Governor(FIVE_IN_A_ROW), limits=limits) as client:

            async def one() -> str:
                try:
                    return str((await client.get(healthy, policy=policy)).status_code)
                except retrysafe.ApiError as error:
                    return error.outcome

            outcomes = list(await asyncio.gather(*(one() for _ in range(40))))
            breaker = client.governor.guard(default_dependency(httpx.URL(healthy))).breaker
            assert breaker is not None
            return outcomes, breaker.state, (await client.get(healthy)).status_code

    outcomes, state, after = asyncio.run(burst())
    assert "200" in outcomes
    assert outcomes.count("200") < 40, f"the pool was never full: {outcomes}"
    assert (state, after) == ("closed", 200), outcomes


def test_a_burst_larger_than_the_pool_retries_its_pool_timeouts_without_the_budget(
    chaos: KeyedChaos,
) -> None:
    """A burst through two connections, with retries on and a budget of a single token:
    the attempts that waited out their time in the pool are retried without spending it,
    so no call ends in BudgetExhausted after a pool timeout (before, nearly every one that
    met one did: the budget blamed the server for the client's own queue). (Two
    connections, so that most calls meet the pool's queue however slowly a loaded
    machine runs the server.)"""
    limits = httpx.Limits(max_connections=2)
    policy = RetryPolicy(attempts=4, attempt_timeout=0.5, deadline=5.0)
    one_token = GovernorSettings(
        budget=BudgetSettings(max_tokens=1, ratio=0.0, min_per_second=0.0),
        breaker=FIVE_IN_A_ROW.breaker,
    )
    healthy = chaos.url("/delay", ms=200)
    client = retrysafe.Client(governor=Governor(one_token), limits=limits, policy=policy)
    with client, concurrent.futures.ThreadPoolExecutor(40) as pool:
        ends = list(pool.map(lambda _: _history(client, healthy), range(40)))
    refused = [error for error, _ in ends if isinstance(error, retrysafe.BudgetExhausted)]
    assert not [error for error in refused if error.outcome == "pool_timeout"], refused
    outcomes = [record.outcome for _, history in ends for record in history]
    assert "pool_timeout" in outcomes, f"the pool was never full: {outcomes}"


def _history(
    client: retrysafe.Client, url: str
) -> tuple[retrysafe.ApiError | None, tuple[AttemptRecord, ...]]:
    """The call's error (None if it succeeded) and what each of its attempts did."""
    try:
        return None, retrysafe.report_of(client.get(url)).history
    except retrysafe.ApiError as error:
        return error, error.history


def test_a_hung_server_behind_a_full_pool_still_opens_it(chaos: KeyedChaos) -> None:
    """The calls that got a connection waited their whole time on the server: that is
    evidence, however many others queued behind them."""
    limits = httpx.Limits(max_connections=2)
    policy = RetryPolicy(attempts=1, attempt_timeout=0.3)
    governor = Governor(FIVE_IN_A_ROW)
    with retrysafe.Client(governor=governor, limits=limits) as client:
        assert client.get(chaos.url("/delay", ms=50)).status_code == 200
        hang = chaos.url("/hang")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(lambda _: _outcome(client, hang, policy), range(8)))
        assert set(outcomes) <= {"attempt_timeout", "read_timeout", "pool_timeout"}, outcomes
    # One at a time now, through a pool of its own on the same governor: httpcore can
    # leave a contended pool's slots taken for good (encode/httpcore#1093: a connection
    # made for a request whose wait timed out as it was handed over, never opened nor
    # reclaimed), and this is about the breaker, not that. Each call waits its whole time
    # on the server, and five in a row open the circuit.
    with retrysafe.Client(governor=governor, limits=limits) as client:
        later = [_outcome(client, hang, policy) for _ in range(6)]
    assert "circuit_open" in later, later


def _hang(client: retrysafe.Client, chaos: KeyedChaos, policy: RetryPolicy) -> None:
    with pytest.raises(retrysafe.TransportError):
        client.get(chaos.url("/hang"), policy=policy)


# -- callers who give up before the retry answers ------------------------------------------
# A call's first failure waits for its retry to say whether the dependency fails or blipped.
# A caller whose own timeout ends the call in its backoff, before the retry is sent, leaves
# that open: another call's retry decides it, as for a retry the budget refused. Counted
# at once, callers with short timeouts opened the circuit against a dependency whose
# retries all succeed, and it then refused every caller of the host. A retry cut in
# flight went unanswered for as long as its caller waited, as a retry that times out
# does: that counts, or a dependency that answers a quick 503 and then hangs would never
# open the circuit.


class _FirstFailsThenHangs:
    """A mock server: each path's first request gets a 503 and every later one hangs;
    ``/healthy`` answers 200, and ``/down`` always 503."""

    def __init__(self) -> None:
        self.seen: collections.Counter[str] = collections.Counter()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.seen[path] += 1
        if path == "/healthy":
            return httpx.Response(200)
        if path == "/down" or self.seen[path] == 1:
            return httpx.Response(503)
        await asyncio.Event().wait()  # (until the caller's cancel)
        raise AssertionError("unreachable")


#: The dependency the mock server's calls are counted under.
DEPENDENCY = "http://api.test:80"


class _BackoffOutlastsTheCaller(FakeClock):
    """A fake clock whose waits never end (until ``waits_end``): a caller's timeout ends
    the call in its backoff."""

    waits_end = False

    async def async_sleep(self, seconds: float) -> None:
        if self.waits_end:
            await super().async_sleep(seconds)
        else:
            await asyncio.Event().wait()


#: The callers below end their calls with ``asyncio.timeout``, new in Python 3.11.
_ASYNCIO_TIMEOUT = pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11+")


def _client_of(
    server: _FirstFailsThenHangs, clock: FakeClock, governor: Governor
) -> retrysafe.AsyncClient:
    return retrysafe.AsyncClient(
        transport=httpx.MockTransport(server), clock=clock, governor=governor
    )


async def _cut_by_the_caller(client: retrysafe.AsyncClient, path: str) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await client.get(f"http://api.test{path}")


def _breaker_after_cut_calls(clock: FakeClock, calls: int) -> tuple[str, _FirstFailsThenHangs]:
    """``calls`` calls in a row, each answered 503 and then ended by its caller's
    ``asyncio.timeout``, against a breaker that opens on five failing calls in a row:
    its state after them."""
    governor = Governor(FIVE_IN_A_ROW, clock=clock)
    server = _FirstFailsThenHangs()

    async def cut_calls() -> None:
        async with _client_of(server, clock, governor) as client:
            for number in range(calls):
                await _cut_by_the_caller(client, f"/call-{number}")

    asyncio.run(cut_calls())
    return governor.guard(DEPENDENCY).breaker.state, server  # type: ignore[union-attr]


@_ASYNCIO_TIMEOUT
def test_callers_whose_own_timeout_ends_their_calls_in_the_backoff_do_not_open_it() -> None:
    """Eight calls in a row cut in their backoff, their retries never sent: closed."""
    state, server = _breaker_after_cut_calls(_BackoffOutlastsTheCaller(), calls=8)
    assert [server.seen[f"/call-{number}"] for number in range(8)] == [1] * 8
    assert state == "closed"


@_ASYNCIO_TIMEOUT
def test_callers_who_give_up_on_retries_that_hang_open_it() -> None:
    """Five calls in a row whose retries went out and hung until their callers gave up:
    open, as five retries that timed out would."""
    state, server = _breaker_after_cut_calls(FakeClock(seed=1), calls=5)
    assert [server.seen[f"/call-{number}"] for number in range(5)] == [2] * 5
    assert state == "open"


@_ASYNCIO_TIMEOUT
def test_failures_left_by_cut_calls_count_once_another_calls_retry_fails_too() -> None:
    """Four calls cut in their backoff, then a patient call whose retry fails as well:
    five failing calls in a row, and the circuit opens."""
    clock = _BackoffOutlastsTheCaller()
    governor = Governor(FIVE_IN_A_ROW, clock=clock)
    server = _FirstFailsThenHangs()

    async def calls() -> None:
        async with _client_of(server, clock, governor) as client:
            for number in range(4):
                await _cut_by_the_caller(client, f"/call-{number}")
            assert governor.guard(DEPENDENCY).breaker.state == "closed"  # type: ignore[union-attr]
            clock.waits_end = True
            with pytest.raises(retrysafe.ServerError):
                await client.get("http://api.test/down", policy=RetryPolicy(attempts=2))

    asyncio.run(calls())
    assert server.seen["/down"] == 2
    assert governor.guard(DEPENDENCY).breaker.state == "open"  # type: ignore[union-attr]


def _longest_backoff() -> retrysafe.SystemClock:
    """The system clock, but full jitter always draws (nearly) the whole backoff."""
    clock = retrysafe.SystemClock()
    clock.random = lambda: 0.999
    return clock


@_ASYNCIO_TIMEOUT
def test_async_callers_giving_up_in_the_backoff_leave_it_closed_over_a_real_socket(
    chaos: KeyedChaos,
) -> None:
    """Over a real socket: each call's first attempt gets a 503, and its caller gives up
    after 0.3 s, in a backoff of 2 s; eight such calls, then a healthy one, which the
    circuit lets through."""
    urls = [
        chaos.url("/fail/{key}", key=f"{chaos.key}-{number}", times=1, status=503)
        for number in range(8)
    ]
    healthy = chaos.url("/delay", ms=0)
    policy = RetryPolicy(backoff_base=2.0)

    async def calls() -> tuple[list[str], int, str]:
        async with retrysafe.AsyncClient(
            governor=Governor(FIVE_IN_A_ROW), clock=_longest_backoff(), policy=policy
        ) as client:
            outcomes = []
            for url in urls:
                try:
                    async with asyncio.timeout(0.3):
                        await client.get(url)
                    outcomes.append("answered")
                except TimeoutError:
                    outcomes.append("caller's timeout")
            after = (await client.get(healthy)).status_code
            breaker = client.governor.guard(default_dependency(httpx.URL(healthy))).breaker
            assert breaker is not None
            return outcomes, after, breaker.state

    outcomes, after, state = asyncio.run(calls())
    assert outcomes == ["caller's timeout"] * 8
    assert (after, state) == (200, "closed")
