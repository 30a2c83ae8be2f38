"""Cold, a short call site's timeouts wait for a patient attempt's answer.

Two call sites on one host: one gives its attempts 0.1 s, the other 5 s; the server
answers in 0.3 s. Before any healthy answer says how long the server takes (what the
breaker weighs a timeout against once warm: ``test_breaker_own_timeouts.py``), the short
site timed out on its first twenty calls at once and opened the circuit, which then
refused the patient site's calls for the server's whole first second: 33 of 80 in one
user's trial, none of which a plain retrier would have lost.

Now a timeout under half the time of an attempt still waiting is held for that attempt's
answer: a healthy answer forgets it, the next failure that is not held counts it. A hung
server still opens the circuit, at most the patient attempt's time later; where every
caller gives the same time nothing is held.

The arithmetic on the fake clock; then the same over real sockets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import httpx
import pytest

import retrysafe
from breaker_on_fake_clock import CLOSED, SETTINGS
from breaker_on_fake_clock import breaker_on_fake_clock as _breaker
from retrysafe import RetryPolicy
from retrysafe.chaos import KeyedChaos
from retrysafe.governor import (
    BreakerSettings,
    CircuitBreaker,
    Governor,
    GovernorSettings,
)
from retrysafe.governor.breaker import HELD_AT_MOST
from retrysafe.request_facts import default_dependency
from retrysafe.testing import FakeClock


def _patient_attempt(breaker: CircuitBreaker, clock: FakeClock, patience: float = 5.0) -> float:
    """An attempt admitted now that waits ``patience`` seconds: its ``until``."""
    until = clock.monotonic() + patience
    breaker.expect_answer(until, patience)
    return until


def _time_out(breaker: CircuitBreaker, seconds: float, times: int) -> list[str]:
    """``times`` first attempts timing out after ``seconds``: what each was taken for."""
    return [breaker.record_outcome(CLOSED, "unhealthy", seconds=seconds)[1] for _ in range(times)]


# -- the arithmetic ---------------------------------------------------------------------------


def test_short_timeouts_are_held_while_a_patient_attempt_waits_and_forgotten_when_it_answers() -> (
    None
):
    breaker, clock = _breaker()
    until = _patient_attempt(breaker, clock)
    clock.advance(0.1)
    assert _time_out(breaker, 0.1, 50) == ["held"] * 50
    assert breaker.state == "closed"
    clock.advance(0.2)
    breaker.record_healthy_call(0.3, until)  # the patient attempt's answer, 0.3 s
    assert breaker.calls_in_window() == 1  # the held timeouts counted nowhere
    # and from now on the answers' time says the short site's timeouts are its own limit
    breaker.record_healthy_call(0.3)
    assert set(_time_out(breaker, 0.1, 20)) == {"callers_limit"}
    assert breaker.state == "closed"


def test_the_patient_attempts_own_timeout_counts_the_held_ones_and_opens_it() -> None:
    """A hung server: the held timeouts and the patient attempt's own make five in a row."""
    breaker, clock = _breaker()
    _patient_attempt(breaker, clock)
    assert _time_out(breaker, 0.1, 4) == ["held"] * 4
    clock.advance(5.0)
    transition, evidence = breaker.record_outcome(CLOSED, "unhealthy", seconds=5.0)
    assert evidence == "counted"
    assert transition == ("closed", "open")


@pytest.mark.parametrize("failure", ["503", "reset"])
def test_any_failure_not_held_counts_the_held_ones_first(failure: str) -> None:
    breaker, clock = _breaker()
    _patient_attempt(breaker, clock)
    _time_out(breaker, 0.1, 4)
    # (a 503 or a reset: no time given; the server failing, whoever sees it)
    breaker.record(CLOSED, "unhealthy", open_for=None)
    assert breaker.state == "open"


def test_a_short_timeout_once_the_patient_attempt_ended_unanswered_counts_with_the_held_ones() -> (
    None
):
    """The patient caller gave up (cancelled: no outcome of its own): nothing waits any
    more, and the next short timeout counts, the held ones first."""
    breaker, clock = _breaker()
    until = _patient_attempt(breaker, clock)
    _time_out(breaker, 0.1, 3)
    breaker.answer_ended(until)
    assert _time_out(breaker, 0.1, 2) == ["counted", "counted"]
    assert breaker.state == "open"


def test_the_patient_attempts_time_running_out_ends_the_hold() -> None:
    breaker, clock = _breaker()
    _patient_attempt(breaker, clock, patience=2.0)
    _time_out(breaker, 0.1, 3)
    clock.advance(2.0)
    _time_out(breaker, 0.1, 2)
    assert breaker.state == "open"


def test_a_patient_attempt_that_already_answered_holds_nothing() -> None:
    """The server answered a patient caller in 0.05 s, then hung: the short site's
    timeouts count at once (the attempt kept as waiting had ended)."""
    breaker, clock = _breaker()
    until = _patient_attempt(breaker, clock)
    clock.advance(0.05)
    breaker.record_healthy_call(0.05, until)
    assert _time_out(breaker, 0.3, 5) == ["counted"] * 5
    assert breaker.state == "open"


def test_where_every_caller_gives_the_same_time_nothing_is_held() -> None:
    breaker, clock = _breaker()
    for _ in range(5):
        _patient_attempt(breaker, clock, patience=0.1)
    assert _time_out(breaker, 0.1, 5) == ["counted"] * 5
    assert breaker.state == "open"


def test_a_timeout_over_half_the_patient_attempts_time_counts() -> None:
    breaker, clock = _breaker()
    _patient_attempt(breaker, clock, patience=5.0)
    assert _time_out(breaker, 2.4, 1) == ["held"]
    assert _time_out(breaker, 2.6, 1) == ["counted"]


def test_a_calls_own_retries_held_add_nothing_once_counted() -> None:
    """One call's first timeout and its three retries' are one failing call, held or
    counted, as without a hold."""
    breaker, clock = _breaker()
    _patient_attempt(breaker, clock)
    breaker.record(CLOSED, "unhealthy", seconds=0.1)
    for _ in range(3):
        assert breaker.record_outcome(CLOSED, "unhealthy", repeat=True, seconds=0.1)[1] == "held"
    for _ in range(3):  # three other calls fail outright: four failing calls, not seven
        breaker.record(CLOSED, "unhealthy")
    assert breaker.state == "closed"
    breaker.record(CLOSED, "unhealthy")
    assert breaker.state == "open"


def test_held_timeouts_older_than_the_failure_window_are_dropped() -> None:
    breaker, clock = _breaker()
    _patient_attempt(breaker, clock, patience=120.0)
    _time_out(breaker, 0.1, 4)
    clock.advance(SETTINGS.failure_window + 1)
    breaker.record(CLOSED, "unhealthy")
    assert breaker.state == "closed"


def test_once_two_healthy_answers_are_known_nothing_is_held() -> None:
    """Warm, the answers' times judge a timeout (test_breaker_own_timeouts.py): a hold
    would let a healthy answer throw away a brownout's timeouts, which the failure ratio
    must see."""
    breaker, clock = _breaker()
    breaker.record_healthy_call(0.02)
    breaker.record_healthy_call(0.02)
    _patient_attempt(breaker, clock)
    assert _time_out(breaker, 0.5, 5) == ["counted"] * 5
    assert breaker.state == "open"


def test_one_healthy_answer_known_still_leaves_it_cold() -> None:
    breaker, clock = _breaker()
    breaker.record_healthy_call(0.02)
    _patient_attempt(breaker, clock)
    assert _time_out(breaker, 0.1, 2) == ["held"] * 2


def test_a_held_timeout_counts_after_held_at_most_whatever_still_waits() -> None:
    """An attempt with no time limit at all (a long poll) waits for ever: the timeouts it
    holds count once HELD_AT_MOST has gone by."""
    breaker, clock = _breaker()
    _patient_attempt(breaker, clock, patience=float("inf"))
    assert _time_out(breaker, 0.1, 4) == ["held"] * 4
    clock.advance(HELD_AT_MOST - 0.5)
    assert _time_out(breaker, 0.1, 1) == ["held"]
    assert breaker.state == "closed"
    clock.advance(0.5)
    _time_out(breaker, 0.1, 1)
    assert breaker.state == "open"


def test_a_patient_attempt_its_caller_gave_up_on_counts_the_held_timeouts() -> None:
    """The patient caller cancelled (its own asyncio.timeout, shorter than its attempt
    time): its attempt will never vouch for the short ones."""
    breaker, clock = _breaker()
    until = _patient_attempt(breaker, clock)
    _patient_attempt(breaker, clock, patience=6.0)  # (another, still waiting)
    _time_out(breaker, 0.1, 5)
    assert breaker.state == "closed"
    transition = breaker.answer_abandoned(until, 0.5)  # (it waited 0.5 s, unanswered)
    assert transition == ("closed", "open")


def test_an_attempt_given_up_sooner_than_the_held_timeouts_came_says_nothing_of_them() -> None:
    """A call cancelled after 0.05 s waited less than the held timeouts (0.1 s): they
    stay held for the patient attempt still waiting."""
    breaker, clock = _breaker()
    _patient_attempt(breaker, clock)
    _time_out(breaker, 0.1, 5)
    short = clock.monotonic() + 0.2
    breaker.expect_answer(short, 0.2)
    assert breaker.answer_abandoned(short, 0.05) is None
    assert breaker.state == "closed"
    assert _time_out(breaker, 0.1, 1) == ["held"]


def test_a_held_calls_retry_success_takes_back_no_other_calls_failure() -> None:
    breaker, clock = _breaker()
    breaker.record(CLOSED, "unhealthy")  # another call's 500: counted
    _patient_attempt(breaker, clock)
    assert breaker.record_outcome(CLOSED, "unhealthy", seconds=0.1)[1] == "held"
    breaker.record(CLOSED, "healthy", repeat=True, seconds=0.08)  # its retry's success
    assert breaker._tally(int(clock.monotonic() // breaker._bucket_width)) == (1, 1)


def test_a_breaker_holding_timeouts_is_not_at_rest() -> None:
    """(The governor sweeps guards at rest: it would forget what it holds.)"""
    breaker, clock = _breaker()
    until = _patient_attempt(breaker, clock)
    assert not breaker.at_rest()
    _time_out(breaker, 0.1, 1)
    breaker.answer_ended(until)
    assert not breaker.at_rest()
    breaker.record_healthy_call(0.3)
    clock.advance(SETTINGS.ratio_window + 1)
    assert breaker.at_rest()


# -- over real sockets --------------------------------------------------------------------------

#: Opens on five failing calls in a row, so the test needs few calls to show it would.
FIVE_IN_A_ROW = GovernorSettings(breaker=BreakerSettings(consecutive_failures=5, open_for=5.0))


def _breaker_of(client: retrysafe.Client | retrysafe.AsyncClient, url: str) -> CircuitBreaker:
    breaker = client.governor.guard(default_dependency(httpx.URL(url))).breaker
    assert breaker is not None
    return breaker


#: A short call site's timeout: 0.1 s for the answer, as the trials' callers gave, but
#: time to connect (the chaos server runs in this process: on a busy machine, sixty
#: connects at once took longer than 0.1 s, and a connect timeout is the server's failure,
#: counted at once, which is not what these tests are about).
SHORT_READS = httpx.Timeout(0.1, connect=5.0)


def test_cold_a_short_call_site_does_not_lock_out_a_patient_one(chaos: KeyedChaos) -> None:
    """Sync, eight threads: twenty calls whose answers time out at 0.1 s (one attempt each, so
    each is a failing call) and four with the defaults, at once, against a server that
    answers in 0.3 s. The patient calls all get their answers and the circuit stays
    closed (before: it opened at the fifth short timeout, and refused them)."""
    slow_but_fine = chaos.url("/delay", ms=300)
    one = RetryPolicy(attempts=1)
    with retrysafe.Client(governor=Governor(FIVE_IN_A_ROW)) as client:

        def call(site: int) -> str:
            short = site % 6 != 0
            try:
                response = client.get(
                    slow_but_fine,
                    timeout=SHORT_READS if short else httpx.USE_CLIENT_DEFAULT,
                    policy=one if short else None,
                )
            except retrysafe.ApiError as error:
                return f"{'short' if short else 'patient'} {type(error).__name__}"
            return f"{'short' if short else 'patient'} {response.status_code}"

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            # (the patient calls first: their attempts wait as the short ones time out)
            outcomes = list(pool.map(call, [0, 6, 12, 18, *(n for n in range(24) if n % 6)]))
        assert outcomes.count("patient 200") == 4, outcomes
        assert "short CircuitOpen" not in outcomes, outcomes
        assert _breaker_of(client, slow_but_fine).state == "closed"
        assert client.get(slow_but_fine).status_code == 200  # (a patient call after them)


def test_async_cold_a_short_call_site_does_not_lock_out_a_patient_one(
    chaos: KeyedChaos,
) -> None:
    """trial54's scenario, smaller: sixty short calls (timeout=0.1) at once, and forty
    patient ones spread over a second."""
    slow_but_fine = chaos.url("/delay", ms=300)

    async def run() -> tuple[list[str], str]:
        governor = Governor(FIVE_IN_A_ROW)
        async with retrysafe.AsyncClient(governor=governor) as client:

            async def short() -> str:
                try:
                    await client.get(
                        slow_but_fine, timeout=SHORT_READS, policy=RetryPolicy(attempts=1)
                    )
                except retrysafe.ApiError as error:
                    return error.outcome
                return "200"

            async def patient(n: int) -> str:
                await asyncio.sleep(0.025 * n)
                try:
                    return str((await client.get(slow_but_fine)).status_code)
                except retrysafe.ApiError as error:
                    return error.outcome

            patient_tasks = [asyncio.ensure_future(patient(n)) for n in range(40)]
            await asyncio.sleep(0.01)  # (the first patient attempt is on its way)
            await asyncio.gather(*(short() for _ in range(60)))
            outcomes = list(await asyncio.gather(*patient_tasks))
            return outcomes, _breaker_of(client, slow_but_fine).state

    outcomes, state = asyncio.run(run())
    assert outcomes == ["200"] * 40, outcomes
    assert state == "closed"


def test_a_hung_server_still_opens_it_once_the_patient_attempt_times_out(
    chaos: KeyedChaos,
) -> None:
    """The same two sites against a server that never answers: the short site's timeouts
    are held while the patient attempt waits (0.6 s), then counted with its own, and the
    circuit opens."""
    hang = chaos.url("/hang")
    short = RetryPolicy(attempts=1, attempt_timeout=0.1)
    patient = RetryPolicy(attempts=1, attempt_timeout=0.6)
    with retrysafe.Client(governor=Governor(FIVE_IN_A_ROW)) as client:

        def call(policy: RetryPolicy) -> str:
            try:
                client.get(hang, policy=policy)
            except retrysafe.ApiError as error:
                return error.outcome
            return "200"

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            waiting = pool.submit(call, patient)
            outcomes = list(pool.map(call, [short] * 8))
            assert waiting.result(timeout=10) != "200"
        assert "circuit_open" not in outcomes  # (held while the patient attempt waited)
        with pytest.raises(retrysafe.CircuitOpen):
            client.get(hang, policy=short)


def test_a_held_timeout_taken_for_the_callers_limit_leaves_its_retrys_failure_counted() -> None:
    """The engine tells a held first timeout and its retry's failure together, the second
    as a repeat: when the breaker takes the first for the caller's own limit (its answers
    are slower), the retry's 503 is the call's first evidence, and counts."""
    clock = FakeClock(seed=1)
    governor = Governor(FIVE_IN_A_ROW, clock=clock)
    breaker = governor.guard("api").breaker
    assert breaker is not None
    for _ in range(3):
        breaker.record_healthy_call(0.3)  # (warm: answers take 0.3 s)
    attempts = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        if len(attempts) == 1:
            clock.advance(0.1)
            breaker.record_healthy_call(0.3)  # (another call answered meanwhile)
            raise httpx.ReadTimeout("stalled", request=request)
        return httpx.Response(503)

    policy = RetryPolicy(attempts=2, backoff_base=0.0, backoff_cap=0.0)
    with (
        retrysafe.Client(
            transport=httpx.MockTransport(handler),
            governor=governor,
            clock=clock,
            dependency="api",
            policy=policy,
        ) as client,
        pytest.raises(retrysafe.ServerError),
    ):
        client.get("https://api.test/")
    assert len(attempts) == 2
    _calls, failed = breaker._tally(int(clock.monotonic() // breaker._bucket_width))
    assert failed == 1
