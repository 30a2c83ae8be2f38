"""A fresh call's first attempt, decided without a Call, is decided as a Call decides it.

:mod:`retrysafe.first_attempt` lets :class:`retrysafe.drive.Drive` plan a fresh
call's first attempt and end the call on a plain success without building the
engine. These tests drive generated scenarios twice on a fake clock: once as a
shell does (the short path where it applies) and once with the engine made at
the start (``drive.call`` asked for before the first step), and require the same
steps, the same report on the response, the same error, and the same load
protection state afterwards.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fresh_drive import fresh_drive, shell_settings
from retrysafe import Governor, GovernorSettings, RetryPolicy
from retrysafe.call_options import OPTIONS_EXTENSION, CallOptions
from retrysafe.classify import Verdict
from retrysafe.decisions import AttemptPlan, Fail, ReadBody, Succeed, Wait
from retrysafe.drive import Drive, Step
from retrysafe.governor.settings import LimiterSettings
from retrysafe.testing import FakeClock

SCENARIOS = 2500

_STATUSES = (200, 201, 204, 301, 304, 400, 404, 409, 429, 500, 502, 503, 504)
_HEADER_SETS: tuple[dict[str, str], ...] = (
    {},
    {"content-type": "application/json"},
    {"retry-after": "2"},
    {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "5"},
    {"ratelimit": '"default";r=0;t=3'},
    {"ratelimit-remaining": "7", "ratelimit-reset": "9"},
)


def _rule_503_is_fine(response: httpx.Response) -> Verdict | None:
    return Verdict.success() if response.status_code == 503 else None


def _rule_201_is_pending(response: httpx.Response) -> Verdict | None:
    return Verdict.retry("still_pending", processed="no") if response.status_code == 201 else None


@dataclasses.dataclass(frozen=True)
class Scenario:
    policy: RetryPolicy
    governor: GovernorSettings
    method: str
    key: str | None
    body: str
    stream: bool
    status: int
    headers: dict[str, str]
    took: float
    raises: bool
    cooling: bool
    #: Seconds between the call's start and its first attempt (a real clock moves).
    lag: float
    #: The clock's reading when the call starts (a monotonic clock's is arbitrary).
    start: float


def scenario(rng: random.Random) -> Scenario:
    # Equal values are edges on purpose: a deadline equal to the attempt timeout (is the
    # attempt cut by the deadline?), a min_attempt_time equal to the deadline (may the
    # first attempt start once the clock has moved?).
    # 0.3 is not a sum of powers of two: (start + 0.3) - start may round below 0.3.
    attempt_timeout = rng.choice((0.3, 0.5, 2.0, 5.0, 10.0, math.inf))
    deadline = rng.choice((0.3, 0.5, 1.0, 5.0, 30.0, math.inf))
    policy = RetryPolicy(
        attempts=rng.choice((1, 2, 4)),
        attempt_timeout=attempt_timeout,
        deadline=deadline,
        min_attempt_time=rng.choice((min(0.5, deadline), min(deadline, 5.0), min(deadline, 0.3))),
        rules=(_rule_503_is_fine, _rule_201_is_pending) if rng.random() < 0.2 else (),
    )
    governor = rng.choice(
        (
            GovernorSettings(),
            GovernorSettings.off(),
            GovernorSettings(breaker=None),
            GovernorSettings(budget=None, limiter=None),
            GovernorSettings(limiter=LimiterSettings(requests_per_second=1000.0, burst=5)),
        )
    )
    return Scenario(
        policy=policy,
        governor=governor,
        method=rng.choice(("GET", "POST", "PUT")),
        key=rng.choice((None, "k-1", "  ")),
        body=rng.choice(("none", "bytes", "one-shot")),
        stream=rng.random() < 0.3,
        status=rng.choice(_STATUSES),
        headers=rng.choice(_HEADER_SETS),
        took=rng.choice((0.0, 0.01, 0.3, 4.0)),
        raises=rng.random() < 0.15,
        cooling=rng.random() < 0.1,
        lag=rng.choice((0.0, 1e-6, 0.001, 0.6)),
        start=rng.choice((100.0, 1000.1, 12345.678)),
    )


def _request(case: Scenario) -> httpx.Request:
    headers = {} if case.key is None else {"Idempotency-Key": case.key}
    content: bytes | Iterator[bytes] | None = None
    if case.body == "bytes":
        content = b'{"n": 1}'
    elif case.body == "one-shot":
        content = iter([b'{"n": ', b"1}"])
    request = httpx.Request(
        case.method, "https://api.example.com/v1/items", headers=headers, content=content
    )
    request.extensions[OPTIONS_EXTENSION] = CallOptions(stream=case.stream)
    return request


def _settled(step: Step) -> Any:
    """What a step says, as comparable plain data."""
    if type(step) is AttemptPlan:
        return ("plan", step.number, step.timeout, step.cut_by_deadline, step.read_body)
    if type(step) is ReadBody:
        return ("read_body", step.plan.number)
    if type(step) is Wait:
        return ("wait", step.seconds)
    if type(step) is Succeed:
        return ("succeed", step.response.status_code, step.report)
    assert isinstance(step, Fail)
    error = step.error
    return (
        "fail",
        type(error).__name__,
        error.reason,
        error.status,
        error.attempts,
        error.retryable,
        step.retried,
        step.report.attempts,
        step.report.history,
    )


def _protection(governor: Governor, dependency: str) -> Any:
    """The dependency's load protection state, as comparable plain data."""
    guard = governor.guard(dependency)
    budget = guard.budget._tokens if guard.budget is not None else None
    breaker = None
    if guard.breaker is not None:
        breaker = (guard.breaker.state, [list(cell) for cell in guard.breaker._window])
    limiter = guard.limiter._cooldown_until if guard.limiter is not None else None
    return budget, breaker, limiter


def run(case: Scenario, *, engine_from_start: bool) -> tuple[list[Any], bool]:
    """Drive the scenario's first attempt and what follows, up to six steps: the
    transcript, and whether the call ended without its engine ever being made."""
    clock = FakeClock(seed=3, start=case.start)
    governor = Governor(case.governor, clock=clock)
    settings = shell_settings(case.policy, clock=clock, governor=governor)
    request = _request(case)
    drive = Drive(settings, request)
    if case.cooling:
        limiter = governor.guard(drive.dependency).limiter
        if limiter is not None:
            limiter.start_cooldown(0.2)
    if engine_from_start:
        drive.call  # noqa: B018 - the engine made at once: the path the short one must match
    clock.advance(case.lag)
    transcript: list[Any] = []
    try:
        step = drive.next_attempt()
        for _ in range(6):
            transcript.append(_settled(step))
            if type(step) is Wait:
                clock.sleep(step.seconds)
                step = drive.next_attempt()
                continue
            if type(step) is not AttemptPlan:
                break
            request.read()  # as a transport sends it (a one-shot body is then held as bytes)
            clock.advance(case.took)
            if case.raises:
                step = drive.raised(step, httpx.ConnectError("refused"), during_body=False)
                continue
            response = httpx.Response(
                case.status, headers=case.headers, content=b"{}", request=request
            )
            step = drive.returned(step, response)
            if type(step) is ReadBody:
                transcript.append(_settled(step))
                step = drive.returned(step.plan, response)
            if type(step) is Succeed:
                transcript.append(("extension", response.extensions.get(OPTIONS_EXTENSION)))
    finally:
        drive.close()
    transcript.append(("protection", _protection(governor, drive.dependency)))
    return transcript, drive._call is None


def test_the_short_path_decides_as_the_engine_does() -> None:
    rng = random.Random(20261201)
    without_engine = 0
    for number in range(SCENARIOS):
        case = scenario(rng)
        short, no_engine = run(case, engine_from_start=False)
        full, _ = run(case, engine_from_start=True)
        assert short == full, f"scenario {number}: {case}"
        without_engine += no_engine
    # The comparison means something only if both paths were taken often.
    assert without_engine > SCENARIOS // 10
    assert SCENARIOS - without_engine > SCENARIOS // 10


def test_a_plain_success_never_builds_the_engine() -> None:
    drive = fresh_drive()
    plan = drive.next_attempt()
    assert type(plan) is AttemptPlan
    step = drive.returned(plan, httpx.Response(200, request=drive.request))
    assert type(step) is Succeed
    assert drive._call is None
    drive.close()


@pytest.mark.parametrize(
    ("response", "why"),
    [
        (httpx.Response(503, content=b""), "a failure"),
        (
            httpx.Response(
                200, headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "9"}, content=b""
            ),
            "a used-up rate limit starts a cooldown",
        ),
    ],
)
def test_anything_else_hands_the_attempt_to_the_engine(response: httpx.Response, why: str) -> None:
    drive = fresh_drive(stream=False)
    plan = drive.next_attempt()
    assert type(plan) is AttemptPlan
    drive.returned(plan, response)
    assert drive._call is not None, why
    assert drive._call.attempts == 1
    drive.close()


def test_a_call_that_is_not_fresh_has_its_engine_from_the_start() -> None:
    hedging = RetryPolicy(attempts=2, hedge_after=0.5)
    drive = fresh_drive(hedging)
    try:
        assert drive._call is not None
    finally:
        drive.close()  # (a Drive left open would make every later call here nested in it)


@pytest.mark.parametrize("seconds", [0.5, 0.3])
@pytest.mark.parametrize(
    "path", ["short path", "engine", "in a deadline scope", "hedging"], ids=str
)
def test_a_deadline_equal_to_min_attempt_time_still_sends_on_a_real_clock(
    path: str, seconds: float
) -> None:
    """On a real clock a little time passes between a call's start and its first
    attempt; a policy whose deadline is its min_attempt_time must send anyway,
    whichever path the call takes (0.3 s: a sum that does not subtract exactly)."""
    import contextlib

    import retrysafe

    events: list[retrysafe.RetryEvent] = []
    policy = RetryPolicy(deadline=seconds, min_attempt_time=seconds)
    if path == "hedging":
        policy = RetryPolicy(deadline=seconds, min_attempt_time=seconds, hedge_after=1.0)
    client = retrysafe.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        policy=policy,
        hooks=[events.append] if path == "engine" else [],
    )
    scope = retrysafe.deadline(10) if path == "in a deadline scope" else contextlib.nullcontext()
    with client, scope:
        for _ in range(50):  # (the rounding depends on the clock's reading: try several)
            assert client.get("http://upstream.test/").status_code == 200
    assert bool(events) == (path == "engine")


def test_a_timeout_at_the_deadline_ends_the_call_on_either_path() -> None:
    """An attempt cut by the deadline (attempt_timeout=5, deadline=4) that times out at
    its end ends the call; one whose timeout fires with time to spare is retried like
    any other failure. The short path (no hooks) and the engine's agree."""
    import retrysafe

    def times_out(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        clock.advance(took)
        raise httpx.ConnectTimeout("slow", request=request)

    seen: list[httpx.Request] = []
    for took, expected in ((4.0, (1, "deadline_exceeded")), (0.1, (3, "attempts_exhausted"))):
        for hooks in ([], [lambda event: None]):
            seen.clear()
            clock = FakeClock()
            client = retrysafe.Client(
                transport=httpx.MockTransport(times_out),
                policy=RetryPolicy(attempts=3, attempt_timeout=5.0, deadline=4.0),
                hooks=hooks,
                clock=clock,
            )
            with client, pytest.raises(retrysafe.ApiError) as caught:
                client.get("http://upstream.test/")
            assert (len(seen), caught.value.reason) == expected, (took, hooks)


class _StalledClock(FakeClock):
    """A fake clock on which ``stall`` seconds pass just after its first reading once
    armed (the call's start), as if the process stalled before the first attempt."""

    def __init__(self, stall: float) -> None:
        super().__init__()
        self.stall = stall
        self.armed = False

    def monotonic(self) -> float:
        now = super().monotonic()
        if self.armed:
            self.armed = False
            self.advance(self.stall)
        return now


def test_a_call_whose_deadline_passed_before_its_first_attempt_sends_nothing() -> None:
    """With no time left at all (not even a moment) when the first attempt would start,
    the call ends with deadline_exceeded and nothing is sent. The short path (no hooks)
    and the engine's agree."""
    import retrysafe

    def answers(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    seen: list[httpx.Request] = []
    for hooks in ([], [lambda event: None]):
        seen.clear()
        clock = _StalledClock(3.0)
        client = retrysafe.Client(
            transport=httpx.MockTransport(answers),
            policy=RetryPolicy(deadline=3.0),
            hooks=hooks,
            clock=clock,
            governor=Governor(clock=FakeClock()),  # (its own clock: the stall is the call's)
        )
        clock.armed = True
        with client, pytest.raises(retrysafe.DeadlineExceeded) as caught:
            client.get("http://upstream.test/")
        assert (seen, caught.value.reason) == ([], "deadline_exceeded"), hooks
