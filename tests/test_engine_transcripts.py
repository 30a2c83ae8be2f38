"""Property-based transcript tests of the pure engine (issue 8, "Show").

Thousands of generated scenarios (seeded, so every run checks the same ones) are
driven through :class:`retrysafe.engine.Call` the way the shells drive it, and
each transcript is held to the invariants in ``engine_transcripts.INVARIANTS``:
no unsafe repeat, no retry before a Retry-After, no deadline overrun, no retry of
a permanent error, attempts within the policy, one ending with the right error,
and sane effects. ``scripts/engine_transcripts.py`` runs the same checks over as
many scenarios as asked (100,000 for the issue's closing note).

The checks are also shown to have teeth: each breaks when the engine is broken
the way it guards against.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

import engine_transcripts as transcripts
import retrysafe.classify
import retrysafe.engine
from retrysafe.classify import Verdict
from retrysafe.compiled import COMPILED_MODULES, is_compiled
from retrysafe.decisions import OPEN_ADMISSION, Admission, AttemptPlan, RecordHealth
from retrysafe.engine import Call
from retrysafe.timing import backoff_delay

CI_SEQUENCES = 4000
CI_SEED = 8


@pytest.fixture(scope="module")
def tally() -> transcripts.Tally:
    return transcripts.run_many(CI_SEQUENCES, CI_SEED, keep=50)


def test_the_invariants_hold_over_generated_transcripts(tally: transcripts.Tally) -> None:
    assert tally.sequences == CI_SEQUENCES
    if tally.violations:
        first: dict[str, transcripts.Violation] = {}
        for violation in tally.violations:
            first.setdefault(violation.invariant, violation)
        pytest.fail("\n\n".join(transcripts.report_violation(v) for v in first.values()))


def test_every_invariant_was_exercised(tally: transcripts.Tally) -> None:
    for name in transcripts.INVARIANTS:
        assert tally.checked[name] > 0, name
    # The situations the invariants are about all came up, many times each.
    for situation in (
        "outcome unsafe to repeat",
        "permanent outcome",
        "retry after a Retry-After hint",
        "attempt cut by the deadline",
        "attempts exhausted",
        "blank Idempotency-Key",
        "ReadBody asked",
        "streamed error body read bounded",
        "error answer judged on its headers, its body lost",
        "final answer handed over unread (drop-in)",
        "answer sent again without reading its body (drop-in)",
        "governor cooldown",
        "paced slot",
        "retry waits for its held slot",
        "retry's slot too late",
        "permit refused",
        "probe permit",
        "retry refused (circuit_open)",
        "retry refused (budget_exhausted)",
        "keyed 409",
        "nested call gave up",
        "cancelled in a wait",
        "cancelled with an attempt in flight",
    ):
        assert tally.coverage[situation] >= 20, situation
    # A cancel that finds a first failure held for the retry: left to another call's
    # retry from a wait, told with the retry in flight (rarer: it needs a breaker, a
    # retried failure and the cancel at the right moment).
    assert tally.coverage["cancelled in a wait, its first failure left to another retry"] >= 5
    assert tally.coverage["cancelled with its retry in flight, its first failure told"] >= 5
    assert tally.attempts > 1.5 * tally.sequences
    assert tally.outcomes["Succeed"] > 0
    assert len(tally.outcomes) >= 9  # every kind of ending, from Succeed to QuotaExhausted


def test_runs_are_reproducible() -> None:
    first = transcripts.run_many(200, 3)
    second = transcripts.run_many(200, 3)
    assert (first.attempts, first.waits, first.outcomes, first.checked) == (
        second.attempts,
        second.waits,
        second.outcomes,
        second.checked,
    )


# -- the known finding ------------------------------------------------------------------

_PACED_THEN_REFUSED = transcripts.Scenario(
    seed=1,
    policy=(("attempts", 1), ("deadline", math.inf)),
    breaker=True,
    admissions=(
        transcripts.AdmissionSpec("pacing", 2.0),
        transcripts.AdmissionSpec("denied", 15.0),
    ),
)


def test_a_paced_slot_is_released_when_the_breaker_refuses() -> None:
    """Found by these transcripts: the slot used to be kept, so pacing drifted behind."""
    run = transcripts.drive(_PACED_THEN_REFUSED)
    assert transcripts.check_run(run) == {}, transcripts.transcript(run)


# -- the checks have teeth --------------------------------------------------------------


def _violations(sequences: int = 1500) -> dict[str, int]:
    tally = transcripts.run_many(sequences, CI_SEED, keep=0)
    return dict(tally.violation_counts)


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, Any], None]:
    def breaks(name: str, value: Any) -> None:
        home = getattr(retrysafe.engine, name).__module__
        if is_compiled() and home in COMPILED_MODULES:
            # The compiled engine calls a compiled function directly, not through its
            # module's name, so no patch reaches it; the plain-Python run checks this.
            pytest.skip(f"{home}.{name} is compiled: a patch cannot reach the engine's call")
        monkeypatch.setattr(retrysafe.engine, name, value)

    return breaks


def test_a_repeat_of_unsafe_work_is_caught(broken: Callable[[str, Any], None]) -> None:
    broken("safe_to_repeat", lambda verdict, **_: True)
    assert _violations().get("no_unsafe_repeat", 0) > 0


def test_a_blank_key_taken_for_a_key_is_caught(broken: Callable[[str, Any], None]) -> None:
    broken("idempotency_key_of", lambda request: request.headers.get("Idempotency-Key"))
    assert _violations().get("no_unsafe_repeat", 0) > 0


def test_a_retry_before_its_retry_after_is_caught(broken: Callable[[str, Any], None]) -> None:
    real = retrysafe.engine.hinted_wait

    def early(hint: float, *args: Any) -> float | None:
        wait = real(hint, *args)
        return None if wait is None else wait / 2

    broken("hinted_wait", early)
    assert _violations().get("retry_after_respected", 0) > 0


def test_a_wait_past_the_deadline_is_caught(broken: Callable[[str, Any], None]) -> None:
    def careless(retries: int, policy: Any, deadline: Any, rand: float) -> float:
        return backoff_delay(retries, policy.backoff_base, policy.backoff_cap, rand) + 1.0

    broken("backoff_wait", careless)
    assert _violations().get("deadline_respected", 0) > 0


def test_a_retried_permanent_error_is_caught(broken: Callable[[str, Any], None]) -> None:
    real = retrysafe.engine.classify_response

    def lenient(*args: Any, **kwargs: Any) -> Verdict:
        verdict = real(*args, **kwargs)
        return Verdict.retry(verdict.reason) if verdict.kind == "permanent" else verdict

    broken("classify_response", lenient)
    assert _violations().get("no_retry_of_permanent", 0) > 0


def test_a_misread_not_replayable_409_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bug: the middleware's "result not replayable" 409 read as "in flight".
    monkeypatch.setattr(retrysafe.classify, "_key_problem", lambda response: None)
    found = _violations()
    assert found.get("classification_matches_spec", 0) > 0
    assert found.get("no_retry_of_permanent", 0) > 0


def test_a_cooldown_allowance_kept_across_attempts_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine that never forgets what an attempt waited out would let every later
    attempt through cooldowns a new caller waits for."""
    real = Call.start_attempt

    def forgetful(self: Call, admission: Admission = OPEN_ADMISSION) -> Any:
        waited = self._cooldown_waited
        result = real(self, admission)
        if type(result) is AttemptPlan:
            self._cooldown_waited = waited
        return result

    monkeypatch.setattr(Call, "start_attempt", forgetful)
    assert _violations().get("cooldown_waited_per_attempt", 0) > 0


def test_an_attempt_over_the_policy_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Call.__init__

    def generous(self: Call, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        self.max_attempts += 1

    monkeypatch.setattr(Call, "__init__", generous)
    assert _violations().get("attempts_within_policy", 0) > 0


def test_a_lost_health_report_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Call.take_effects

    def forgetful(self: Call) -> list[Any]:
        return [e for e in real(self) if type(e) is not RecordHealth]

    monkeypatch.setattr(Call, "take_effects", forgetful)
    assert _violations().get("effects_sane", 0) > 0
