"""Transcript checks of the hedging engine: generated calls with copies in flight.

The hedging twin of ``tests/engine_transcripts.py`` (whose outcome generator,
policies and responses it reuses). A *scenario* is plain data: a policy with
``hedge_after`` and ``max_hedges``, a request (any method, with or without an
idempotency key, a replayable body or a one-shot stream), the breaker permit
of the first attempt, and scripts of what the world answers: each copy's
outcome and how long it takes, the governor's answer to each hedge and to each
retry. :func:`drive` plays it against :class:`~retrysafe.hedged_call.HedgedCall`
as the hedging shells do (:mod:`retrysafe.hedged_shell`): a discrete-event
simulation on a :class:`~retrysafe.testing.FakeClock`, where the next event is
either a copy's outcome or the moment the engine said the next copy is due.

Invariants (each a ``check_*`` function over the run; :data:`INVARIANTS`):

- no unsafe copy: a second copy is only ever in flight for a request safe to
  send twice (idempotent method or idempotency key, and a replayable body);
- attempts within the policy: copies sent (first copies and hedges) never
  exceed the call's attempts, hedges never exceed ``max_hedges``;
- no deadline overrun: no copy is planned to run past the deadline, and the
  call ends by it;
- a copy only goes when the governor granted it, never after the call ended;
- the first usable answer wins: a retryable failure never ends the call while
  another copy is in flight, a success is always the call's end, and the
  report names the winning copy;
- every copy is accounted for: the report's history has one record per copy
  sent, losers as ``"hedge_lost"``, and the number of hedges it reports.

    .venv/bin/python tests/hedging/hedge_transcripts.py --sequences 20000 --seed 1
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine_transcripts as base
from retrysafe.classify import classify_exception
from retrysafe.decisions import (
    OPEN_ADMISSION,
    Admission,
    AskRetry,
    AttemptPlan,
    AwaitOthers,
    Fail,
    HedgeAnswer,
    ReadBody,
    RetryAnswer,
    Succeed,
    Wait,
)
from retrysafe.governor.breaker import CLOSED_PERMIT, Permit
from retrysafe.hedged_call import LOST, HedgedCall
from retrysafe.policy import RetryPolicy
from retrysafe.testing import FakeClock

EPS = 1e-6
MAX_EVENTS = 400
_REFUSALS = ("circuit_not_closed", "cooldown", "pacing", "budget_exhausted")
_METHODS = ("GET", "GET", "PUT", "DELETE", "POST", "POST", "PATCH")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One generated hedging call: everything the world will answer, as data."""

    seed: int
    policy: tuple[tuple[str, Any], ...]
    rules: tuple[str, ...]
    method: str
    key: str | None
    body: str
    stream: bool
    probe: bool
    outcomes: tuple[base.Outcome, ...]
    durations: tuple[float, ...]
    hedge_answers: tuple[str | None, ...]
    retry_answers: tuple[str | None, ...]
    hedge_delay: float

    def make_policy(self) -> RetryPolicy:
        return RetryPolicy(**dict(self.policy), rules=[base.RULES[name] for name in self.rules])

    def make_request(self) -> httpx.Request:
        headers = {} if self.key is None else {"Idempotency-Key": self.key}
        if self.body == "bytes":
            return httpx.Request(self.method, base.URL, headers=headers, content=b'{"n": 1}')
        if self.body == "stream":
            return httpx.Request(self.method, base.URL, headers=headers, content=iter([b"x"]))
        return httpx.Request(self.method, base.URL, headers=headers)


def generate(rng: random.Random, seed: int) -> Scenario:
    """A random hedging scenario (weighted toward copies racing each other)."""
    fields, rules = base._gen_policy(rng)
    # A hedging policy needs room for a copy: attempts >= 2 (RetryPolicy refuses fewer).
    fields = tuple(
        (name, max(2, value)) if name == "attempts" else (name, value) for name, value in fields
    )
    hedge_after = rng.choice((0.01, 0.05, 0.2, rng.uniform(0.001, 3.0)))
    # ... and at most attempts - 1 copies (each counts as an attempt; RetryPolicy refuses more).
    attempts = dict(fields).get("attempts", RetryPolicy().attempts)
    max_hedges = min(rng.choice((1, 1, 2, 3, 5)), attempts - 1)
    policy = (*fields, ("hedge_after", hedge_after), ("max_hedges", max_hedges))
    stream = rng.random() < 0.2
    profile = rng.choice(base.PROFILES)
    outcomes = tuple(base._gen_outcome(rng, stream, profile) for _ in range(rng.randint(1, 12)))
    # Heavy-tailed: most copies answer quickly, some very slowly.
    durations = tuple(
        rng.uniform(0, hedge_after * 2) if rng.random() < 0.7 else rng.uniform(0, 40)
        for _ in outcomes
    )
    return Scenario(
        seed=seed,
        policy=policy,
        rules=rules,
        method=rng.choice(_METHODS),
        key=rng.choice((None, None, "key-1")),
        body=rng.choice(("bytes", "bytes", "none", "stream")),
        stream=stream,
        probe=rng.random() < 0.1,
        outcomes=outcomes,
        durations=durations,
        hedge_answers=tuple(
            None if rng.random() < 0.75 else rng.choice(_REFUSALS) for _ in range(8)
        ),
        retry_answers=tuple(None if rng.random() < 0.85 else "budget_exhausted" for _ in range(8)),
        hedge_delay=hedge_after,
    )


@dataclasses.dataclass
class Copy:
    """One copy the simulated shell sent."""

    plan: AttemptPlan
    started: float
    ends: float
    outcome: base.Outcome
    hedge: bool
    in_flight_with: int  # other copies in flight when it started
    finished: bool = False


@dataclasses.dataclass
class Run:
    """What happened: every copy, every hedge answer, every result, and the end."""

    scenario: Scenario
    policy: RetryPolicy
    call: HedgedCall
    started: float
    deadline_at: float
    copies: list[Copy] = dataclasses.field(default_factory=list)
    refused: int = 0
    results: list[tuple[Copy, Any, str, int]] = dataclasses.field(default_factory=list)
    final: Succeed | Fail | None = None
    ended_at: float = 0.0
    late_starts: int = 0
    error: str = ""


def _copy_outcome(copy: Copy, request: httpx.Request, clock: FakeClock) -> tuple[Any, bool]:
    """The response (or exception) a copy gets, and whether it was cut by its timeout."""
    spec = copy.outcome
    if copy.ends >= copy.started + copy.plan.timeout - EPS and spec.kind == "response":
        return httpx.ReadTimeout("simulated: the copy ran out of time", request=request), True
    if spec.kind == "raise":
        return base._exception(spec.exception, request), False
    return base._make_response(spec, request, clock, read=copy.plan.read_body), False


def drive(scenario: Scenario) -> Run:
    """Play ``scenario`` against a fresh HedgedCall the way the hedging shells do."""
    clock = FakeClock(seed=scenario.seed)
    policy = scenario.make_policy()
    request = scenario.make_request()
    call = HedgedCall(
        request,
        hedge_delay=scenario.hedge_delay,
        policy=policy,
        clock=clock,
        stream=scenario.stream,
    )
    run = Run(scenario, policy, call, clock.monotonic(), call.deadline.at)
    outcomes = iter(zip(scenario.outcomes, scenario.durations, strict=True))
    hedge_answers = iter(scenario.hedge_answers)
    retry_answers = iter(scenario.retry_answers)
    in_flight: dict[AttemptPlan, Copy] = {}

    def launch(plan: AttemptPlan, hedge: bool) -> None:
        spec, duration = next(outcomes, (base.OK, 0.01))
        if spec.kind == "raise" and spec.exception in base.TIMEOUTS:
            duration = max(duration, plan.timeout)
        now = clock.monotonic()
        ends = now + min(duration, plan.timeout)
        copy = Copy(plan, now, ends, spec, hedge, len(in_flight))
        run.copies.append(copy)
        in_flight[plan] = copy

    first = True
    for _ in range(MAX_EVENTS):
        if call.state == "ready":
            admission = OPEN_ADMISSION
            if first and scenario.probe:
                admission = Admission(permit=Permit(allowed=True, probe=True, probe_token=1))
            elif first:
                admission = Admission(permit=CLOSED_PERMIT)
            first = False
            step: Any = call.start_attempt(admission)
            call.take_effects()
            if isinstance(step, Wait):
                clock.advance(step.seconds)
                continue
            if isinstance(step, Fail):
                run.final, run.ended_at = step, clock.monotonic()
                return run
            launch(step, hedge=False)
            continue
        if call.state == "done":
            run.error = "call done without a final step"
            return run
        hedge = call.next_hedge()
        next_end = min((c.ends for c in in_flight.values()), default=math.inf)
        if hedge is not None and hedge.at < next_end:
            clock.advance(max(0.0, hedge.at - clock.monotonic()))
            refusal = next(hedge_answers, None)
            plan = call.start_hedge(hedge, HedgeAnswer(refusal))  # type: ignore[arg-type]
            call.take_effects()
            if plan is None:
                run.refused += 1
            else:
                if refusal is not None:
                    run.error = "a refused hedge was planned"
                launch(plan, hedge=True)
            continue
        if not in_flight:
            run.error = "attempting with nothing in flight and no hedge due"
            return run
        copy = min(in_flight.values(), key=lambda c: (c.ends, c.plan.number))
        clock.advance(max(0.0, copy.ends - clock.monotonic()))
        del in_flight[copy.plan]
        copy.finished = True
        got, _ = _copy_outcome(copy, request, clock)
        others = len(in_flight)
        if isinstance(got, Exception):
            verdict_kind = classify_exception(got, during_body=copy.outcome.during_body).kind
            result: Any = call.attempt_raised(copy.plan, got, during_body=copy.outcome.during_body)
        else:
            result = call.attempt_returned(copy.plan, got)
            if isinstance(result, ReadBody):
                if copy.outcome.body_error:
                    got.close()
                    exc = base._exception(copy.outcome.body_error, request)
                    result = call.attempt_raised(copy.plan, exc, during_body=True)
                else:
                    got.read()
                    result = call.attempt_returned(copy.plan, got)
            verdict = call._verdict
            verdict_kind = verdict.kind if verdict is not None else "?"
        call.take_effects()
        run.results.append((copy, result, verdict_kind, others))
        if isinstance(result, AwaitOthers):
            continue
        if isinstance(result, AskRetry):
            refusal = next(retry_answers, None)
            answer = RetryAnswer(refusal)  # type: ignore[arg-type]
            result = call.retry_answered(result, answer)
            call.take_effects()
            if isinstance(result, Wait):
                clock.advance(result.seconds)
                continue
        if isinstance(result, (Succeed, Fail)):
            run.final, run.ended_at = result, clock.monotonic()
            run.late_starts = len(in_flight)  # abandoned: must be in the report as lost
            return run
        run.error = f"unexpected step {result!r}"
        return run
    run.error = "too many events"
    return run


# -- invariants ---------------------------------------------------------------------------

Check = Callable[[Run], list[str]]


def check_no_unsafe_copy(run: Run) -> list[str]:
    """Two copies are only ever in flight for a request safe to send twice."""
    scenario = run.scenario
    safe = scenario.body != "stream" and (
        scenario.method in run.policy.idempotent_methods or scenario.key is not None
    )
    overlapping = [c for c in run.copies if c.in_flight_with > 0]
    if overlapping and not safe:
        return [f"{len(overlapping)} copies overlapped for an unsafe {scenario.method}"]
    if any(c.hedge for c in run.copies) and not safe:
        return ["a hedged copy of an unsafe request"]
    return []


def check_attempts_within_policy(run: Run) -> list[str]:
    """Copies sent never exceed the call's attempts; hedges never exceed max_hedges."""
    problems = []
    if len(run.copies) > run.call.max_attempts:
        problems.append(f"{len(run.copies)} copies sent, attempts={run.call.max_attempts}")
    hedges = sum(c.hedge for c in run.copies)
    if hedges > run.policy.max_hedges * max(1, sum(not c.hedge for c in run.copies)):
        problems.append(f"{hedges} hedges, max_hedges={run.policy.max_hedges} per call")
    if hedges > run.policy.max_hedges:
        problems.append(f"{hedges} hedges, max_hedges={run.policy.max_hedges}")
    return problems


def check_no_deadline_overrun(run: Run) -> list[str]:
    """No copy planned past the deadline; the call ends by it."""
    problems = []
    for copy in run.copies:
        if copy.started + copy.plan.timeout > run.deadline_at + EPS:
            problems.append(
                f"copy {copy.plan.number} planned to {copy.started + copy.plan.timeout:.4f}"
                f" past the deadline {run.deadline_at:.4f}"
            )
    if run.final is not None and run.ended_at > run.deadline_at + EPS:
        problems.append(f"ended at {run.ended_at:.4f}, deadline {run.deadline_at:.4f}")
    return problems


def check_first_usable_answer_wins(run: Run) -> list[str]:
    """A retryable failure never ends the call while another copy is in flight; a
    success always does; a final answer of any copy ends it."""
    problems = []
    for copy, result, kind, others in run.results:
        if kind == "success" and not isinstance(result, Succeed):
            problems.append(f"copy {copy.plan.number} succeeded but the call went on")
        if others and kind not in ("success", "permanent") and not isinstance(result, AwaitOthers):
            problems.append(
                f"copy {copy.plan.number} failed ({kind}) with {others} in flight and ended"
                f" the round: {type(result).__name__}"
            )
        if isinstance(result, AwaitOthers) and not others:
            problems.append(f"copy {copy.plan.number}: AwaitOthers with nothing in flight")
    return problems


def check_every_copy_accounted_for(run: Run) -> list[str]:
    """The report has one record per copy sent (losers "hedge_lost") and the hedges."""
    if run.final is None:
        return []
    report = run.final.report
    problems = []
    numbers = sorted(record.attempt for record in report.history)
    if numbers != sorted(c.plan.number for c in run.copies):
        problems.append(f"history numbers {numbers}, copies {[c.plan.number for c in run.copies]}")
    lost = sum(record.outcome == LOST for record in report.history)
    if lost != run.late_starts:
        problems.append(f"{lost} lost records, {run.late_starts} copies abandoned")
    hedges = sum(c.hedge for c in run.copies)
    if report.hedges != hedges:
        problems.append(f"report says {report.hedges} hedges, {hedges} sent")
    if hedges:  # (a success or a failure: the copy whose answer ended the call)
        winner = [r for r in report.history if r.outcome not in (LOST,)][-1]
        if report.winner != winner.attempt:
            problems.append(f"winner {report.winner}, the deciding copy was {winner.attempt}")
    if report.attempts != len(run.copies):
        problems.append(f"report.attempts {report.attempts}, copies sent {len(run.copies)}")
    return problems


def check_the_run_completed(run: Run) -> list[str]:
    """The simulated shell never got an impossible step from the engine."""
    return [run.error] if run.error else []


INVARIANTS: dict[str, Check] = {
    "no unsafe copy": check_no_unsafe_copy,
    "attempts within policy": check_attempts_within_policy,
    "no deadline overrun": check_no_deadline_overrun,
    "first usable answer wins": check_first_usable_answer_wins,
    "every copy accounted for": check_every_copy_accounted_for,
    "run completed": check_the_run_completed,
}


@dataclasses.dataclass
class Tally:
    """What a batch of runs covered and broke."""

    sequences: int = 0
    violations: list[tuple[str, Scenario, str]] = dataclasses.field(default_factory=list)
    situations: Counter[str] = dataclasses.field(default_factory=Counter)


def _situations(run: Run) -> list[str]:
    seen = []
    hedges = sum(c.hedge for c in run.copies)
    if hedges:
        seen.append("hedged")
    if hedges > 1:
        seen.append("several hedges")
    if run.refused:
        seen.append("hedge refused")
    if run.late_starts:
        seen.append("loser abandoned")
    if any(isinstance(result, AwaitOthers) for _, result, _, _ in run.results):
        seen.append("failed copy awaited others")
    if isinstance(run.final, Succeed) and run.final.report.winner not in (None, 1):
        seen.append("a later copy won")
    if not run.call.hedgeable:
        seen.append("unsafe request (never hedged)")
    if any(c.plan.cut_by_deadline for c in run.copies if c.hedge):
        seen.append("hedge cut by the deadline")
    if isinstance(run.final, Fail):
        seen.append("call failed")
    return seen


def run_many(sequences: int, seed: int) -> Tally:
    """Generate and drive ``sequences`` scenarios from ``seed``; check every invariant."""
    rng = random.Random(seed)
    tally = Tally()
    for index in range(sequences):
        scenario = generate(rng, seed * 1_000_003 + index)
        try:
            run = drive(scenario)
        except Exception as exc:  # the engine raised: a violation, not a crash of the checker
            tally.violations.append(("engine raised", scenario, repr(exc)))
            tally.sequences += 1
            continue
        tally.sequences += 1
        tally.situations.update(_situations(run))
        for name, check in INVARIANTS.items():
            for problem in check(run):
                tally.violations.append((name, scenario, problem))
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sequences", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    tally = run_many(args.sequences, args.seed)
    print(f"{tally.sequences} sequences, {len(tally.violations)} violations")
    for name, count in sorted(tally.situations.items()):
        print(f"  {name:<32} {count}")
    for name, scenario, problem in tally.violations[:10]:
        print(f"VIOLATION {name}: {problem}\n  {scenario}")
    return 1 if tally.violations else 0


if __name__ == "__main__":
    sys.exit(main())
