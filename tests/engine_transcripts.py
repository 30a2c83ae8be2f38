"""Transcript tests of the pure engine: generate call scenarios, drive them, check invariants.

A *scenario* is plain data: a policy, a request (method, idempotency key, body
kind), whether the caller streams, and scripts of what the world answers: one
outcome per attempt (a response or an exception, how long it took), the
governor's admissions and retry answers, and how far each sleep overshoots.
:func:`drive` feeds a scenario to :class:`retrysafe.engine.Call` exactly as the
shells do (:mod:`retrysafe.drive`, :mod:`retrysafe.transport`), on a
:class:`~retrysafe.testing.FakeClock`, and keeps a transcript of every engine
call, its answer and its effects. The ``check_*`` functions (:data:`INVARIANTS`)
read a transcript and say what they checked and what failed.

Where a check needs to know what an outcome *means*, it asks
:mod:`retrysafe.classify` (the engine's own vocabulary), except
:func:`check_classification_matches_spec`, which holds classify to an
independent reading of the scenario.

Used by ``tests/test_engine_transcripts.py`` (a few thousand scenarios in CI)
and ``scripts/engine_transcripts.py`` (as many as asked, with a report).
"""

from __future__ import annotations

import collections
import dataclasses
import email.utils
import json
import math
import random
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, Literal

import httpx

from retrysafe.attempt_plan import HARD_END_GRACE
from retrysafe.classify import (
    AttemptTimedOut,
    Verdict,
    classify_exception,
    classify_response,
    health,
    may_have_acted,
)
from retrysafe.decisions import (
    ERROR_BODY_READ_AT_MOST,
    OPEN_ADMISSION,
    Admission,
    AskRetry,
    AttemptPlan,
    DeferFailure,
    EmitEvent,
    Fail,
    ReadBody,
    RecordHealth,
    RefundBudget,
    ReleasePacing,
    ReleaseProbe,
    RetryAnswer,
    RetryEnded,
    StartCooldown,
    Succeed,
    Wait,
)
from retrysafe.engine import HEALTHY_WHILE_CLOSED, Call
from retrysafe.errors import (
    ApiError,
    BadResponse,
    BudgetExhausted,
    CircuitOpen,
    ClientError,
    CooldownActive,
    DeadlineExceeded,
    PacingDelayed,
    QuotaExhausted,
    RateLimited,
    RetryAfterTooLong,
    ServerError,
    TransportError,
)
from retrysafe.governor.breaker import Permit
from retrysafe.governor.guard import waits_out
from retrysafe.policy import RetryPolicy
from retrysafe.testing import FakeClock
from retrysafe.timing import Deadline

__all__ = [
    "INVARIANTS",
    "Outcome",
    "Run",
    "Scenario",
    "Tally",
    "check_run",
    "drive",
    "generate",
    "run_many",
    "shrink",
    "transcript",
]

URL = "https://api.test/v1/things"
#: A scenario that has not ended after this many engine steps is a violation in itself.
MAX_STEPS = 500
#: Seconds an attempt takes, as a fraction of this, when its timeout is infinite.
UNBOUNDED_ATTEMPT = 30.0
QUOTA_HEADER = "x-api-remaining-credits"
NOT_REPLAYABLE_TYPE = "urn:retrysafe:idempotency:result-not-replayable"
IN_FLIGHT_TYPE = "urn:retrysafe:idempotency:request-in-flight"


def eps(*values: float) -> float:
    """Float slack for comparing sums of seconds: relative to the largest value."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    return 1e-9 * max([1.0, *finite])


# -- rules a policy may carry (the user's code, so their meaning is known here) -------


def rule_error_in_body(response: httpx.Response) -> Verdict | None:
    """A 2xx JSON body saying ``{"error": ...}`` is a failure worth retrying."""
    if response.status_code < 300 and "json" in response.headers.get("content-type", ""):
        document = response.json()
        if isinstance(document, dict) and "error" in document:
            return Verdict.retry("error_in_body")
    return None


def rule_fatal_in_body(response: httpx.Response) -> Verdict | None:
    """A 2xx JSON body saying ``{"fatal": true}`` is final."""
    if response.status_code < 300 and "json" in response.headers.get("content-type", ""):
        document = response.json()
        if isinstance(document, dict) and document.get("fatal") is True:
            return Verdict.permanent("fatal_in_body")
    return None


def rule_strict_json(response: httpx.Response) -> Verdict | None:
    """A 200 must carry JSON: parsing anything else raises ValueError (unreadable body)."""
    if response.status_code == 200:
        response.json()
    return None


def rule_header_retry(response: httpx.Response) -> Verdict | None:
    """``x-retry-rule: yes`` asks for a retry; the server did no work."""
    if response.headers.get("x-retry-rule") == "yes":
        return Verdict.retry("rule_says_retry", processed="no")
    return None


def rule_retry_404(response: httpx.Response) -> Verdict | None:
    """A 404 may be an eventually consistent read: retry, with a hint of its own."""
    if response.status_code == 404:
        return Verdict.retry("not_yet_visible", after=0.5, processed="no")
    return None


RULES: dict[str, Callable[[httpx.Response], Verdict | None]] = {
    "error_in_body": rule_error_in_body,
    "fatal_in_body": rule_fatal_in_body,
    "strict_json": rule_strict_json,
    "header_retry": rule_header_retry,
    "retry_404": rule_retry_404,
}

EXCEPTIONS: dict[str, type[Exception]] = {
    "ConnectError": httpx.ConnectError,
    "ConnectTimeout": httpx.ConnectTimeout,
    "PoolTimeout": httpx.PoolTimeout,
    "ReadTimeout": httpx.ReadTimeout,
    "WriteTimeout": httpx.WriteTimeout,
    "ReadError": httpx.ReadError,
    "WriteError": httpx.WriteError,
    "RemoteProtocolError": httpx.RemoteProtocolError,
    "AttemptTimedOut": AttemptTimedOut,
    "LocalProtocolError": httpx.LocalProtocolError,
    "DecodingError": httpx.DecodingError,
}
#: What can go wrong once the headers are in (the shell's ``during_body=True``).
BODY_EXCEPTIONS = ("ReadTimeout", "ReadError", "RemoteProtocolError", "AttemptTimedOut")
NEVER_SENT = frozenset({"ConnectError", "ConnectTimeout", "PoolTimeout"})
TIMEOUTS = frozenset(
    {"ConnectTimeout", "PoolTimeout", "ReadTimeout", "WriteTimeout", "AttemptTimedOut"}
)

BodyKind = Literal[
    "empty",
    "text",
    "json_ok",
    "json_error",
    "json_fatal",
    "problem_not_replayable",
    "problem_in_flight",
    "json_not_replayable",
    "middleware_in_flight",
    "middleware_not_replayable",
    "app_conflict",
]
_BODIES: dict[str, tuple[str | None, bytes]] = {
    "empty": (None, b""),
    "text": ("text/plain", b"oops, something went wrong"),
    "json_ok": ("application/json", b'{"ok": true}'),
    "json_error": ("application/json", b'{"error": "boom"}'),
    "json_fatal": ("application/json", b'{"fatal": true}'),
    "problem_not_replayable": (
        "application/problem+json",
        json.dumps({"type": NOT_REPLAYABLE_TYPE, "status": 409}).encode(),
    ),
    "problem_in_flight": (
        "application/problem+json",
        json.dumps({"type": IN_FLIGHT_TYPE, "status": 409}).encode(),
    ),
    # The not-replayable type, but not as a problem document: classify must not trust it.
    "json_not_replayable": (
        "application/json",
        json.dumps({"type": NOT_REPLAYABLE_TYPE}).encode(),
    ),
    # retrysafe.idempotency's own answers: the problem named by a header (_BODY_HEADERS).
    "middleware_in_flight": (
        "application/problem+json",
        json.dumps({"type": IN_FLIGHT_TYPE, "status": 409}).encode(),
    ),
    "middleware_not_replayable": (
        "application/problem+json",
        json.dumps({"type": NOT_REPLAYABLE_TYPE, "status": 409}).encode(),
    ),
    # The app's own conflict, which says nothing of the key.
    "app_conflict": ("application/json", b'{"error": "that name is taken"}'),
}
_BODY_HEADERS: dict[str, tuple[tuple[str, str], ...]] = {
    "middleware_in_flight": (("idempotency-problem", "request-in-flight"),),
    "middleware_not_replayable": (("idempotency-problem", "result-not-replayable"),),
}
#: Bodies by which a 409 says its key's request ran and its result was not kept.
_NOT_REPLAYABLE_BODIES = frozenset({"problem_not_replayable", "middleware_not_replayable"})
#: Bodies by which a 409 says its key's first request is still running.
_IN_FLIGHT_BODIES = frozenset({"problem_in_flight", "middleware_in_flight"})
_JSON_BODIES = frozenset(k for k, (ct, _) in _BODIES.items() if ct and "json" in ct)


# -- scenarios ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one attempt gets. ``kind`` ``"response"`` or ``"raise"``.

    ``retry_after``: ``("seconds", "7")``, ``("date", offset seconds from the moment the
    headers arrive)`` or ``("raw", "soon")``. ``duration``: the attempt's share of its
    plan's timeout; ``headers_share``: of that, the share before the headers (the rest
    is the body, read when the engine asks). ``body_error``: reading the body (when the
    engine asks for it: a streamed call's, or any error answer's) raises this.
    ``nested_gave_up``: a retrying call nested in this attempt retried and gave up.
    ``answered_meanwhile``: the dependency answered other calls while this attempt
    waited (the shell's fact: a timeout is then held for the retry, else told at once).
    ``late_share``: the shell tells the engine (``attempt_ended_late``) that the read
    that timed out ended this share of the attempt's time past its limit (a late event
    loop); None, it tells nothing (as a shell whose read did not time out tells 0).
    """

    kind: Literal["response", "raise"] = "response"
    status: int = 200
    retry_after: tuple[str, Any] | None = None
    quota: str | None = None
    replayed: bool = False
    body: BodyKind = "empty"
    rule_header: bool = False
    exception: str = ""
    during_body: bool = False
    duration: float = 0.5
    headers_share: float = 0.5
    body_error: str = ""
    nested_gave_up: bool = False
    answered_meanwhile: bool = False
    late_share: float | None = None

    def describe(self) -> str:
        if self.kind == "raise":
            where = ", during_body" if self.during_body else ""
            if self.late_share is not None:
                where += f", ended {self.late_share:.2f} of its time late"
            return f"{self.exception}{where}"
        parts = [str(self.status)]
        if self.retry_after is not None:
            parts.append(f"Retry-After={self.retry_after[0]}:{self.retry_after[1]!r}")
        if self.quota is not None:
            parts.append(f"{QUOTA_HEADER}={self.quota!r}")
        if self.replayed:
            parts.append("Idempotent-Replayed: true")
        if self.rule_header:
            parts.append("x-retry-rule: yes")
        if self.body != "empty":
            parts.append(f"body={self.body}")
        if self.body_error:
            parts.append(f"body read raises {self.body_error}")
        return " ".join(parts)


OK = Outcome()


@dataclasses.dataclass(frozen=True)
class AdmissionSpec:
    """The governor's answer to one ``start_attempt``: ``open`` (a permit if a breaker
    is on, ``probe`` for a half-open probe), ``cooldown``/``pacing`` for ``seconds``,
    ``full`` (the pacing queue has no room, for ``seconds``), or ``denied`` (retry
    ``seconds`` from now, or unknown when 0)."""

    kind: Literal["open", "cooldown", "pacing", "full", "denied"] = "open"
    seconds: float = 0.0
    probe: bool = False


OPEN = AdmissionSpec()


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One call: its policy, request, and every answer the world will give it."""

    seed: int
    policy: tuple[tuple[str, Any], ...]
    rules: tuple[str, ...] = ()
    method: str = "GET"
    key: str | None = None
    body: Literal["none", "bytes", "stream"] = "bytes"
    stream: bool = False
    #: A final answer goes back to the caller as the response (a drop-in transport),
    #: not as an error carrying its body (retrysafe.Client).
    returns_answers: bool = False
    breaker: bool = False
    retries_used: int = 0
    max_attempts: int | None = None
    shared_deadline: float | None = None
    outcomes: tuple[Outcome, ...] = ()
    admissions: tuple[AdmissionSpec, ...] = ()
    #: The governor's answers to the call's retries, in turn: None (granted), a refusal's
    #: name, or a float: granted with a paced slot held for the retry, that many seconds
    #: beyond the wait it asked for (a governor holds a slot only further away).
    answers: tuple[str | float | None, ...] = ()
    overshoots: tuple[float, ...] = ()
    #: The caller cancels the call at its ``cancel_at``-th chance (a wait, or an attempt
    #: in flight, counted from 0); None: never.
    cancel_at: int | None = None

    def make_policy(self) -> RetryPolicy:
        return RetryPolicy(**dict(self.policy), rules=[RULES[name] for name in self.rules])

    def make_request(self) -> httpx.Request:
        headers = {} if self.key is None else {"Idempotency-Key": self.key}
        if self.body == "bytes":
            return httpx.Request(self.method, URL, headers=headers, content=b'{"n": 1}')
        if self.body == "stream":
            return httpx.Request(self.method, URL, headers=headers, content=iter([b"chunk"]))
        return httpx.Request(self.method, URL, headers=headers)


# -- generating ------------------------------------------------------------------------

_STATUSES = (200, 201, 301, 304, 400, 401, 404, 408, 409, 422, 429, 500, 501, 502, 503, 504, 529)
_STATUS_WEIGHTS = (8, 2, 1, 1, 2, 1, 2, 3, 5, 1, 8, 5, 1, 6, 8, 5, 2)
_EXC_NAMES = tuple(EXCEPTIONS)
_EXC_WEIGHTS = (4, 3, 2, 4, 2, 3, 1, 3, 3, 1, 1)
_GARBAGE_RETRY_AFTER = ("soon", "-1", "1.5s", "1e3", "", "Wed, 99 Foo 2023 25:00:00 GMT")


def _chance(rng: random.Random, p: float) -> bool:
    return rng.random() < p


def _gen_policy(rng: random.Random) -> tuple[tuple[tuple[str, Any], ...], tuple[str, ...]]:
    deadline = rng.choices((math.inf, rng.uniform(0.1, 5), rng.uniform(5, 120)), (0.15, 0.25, 0.6))[
        0
    ]
    attempt_timeout = rng.choices(
        (math.inf, rng.uniform(0.05, 3), rng.uniform(0.05, 20)), (0.1, 0.45, 0.45)
    )[0]
    min_attempt_time = rng.choices(
        (0.0, rng.uniform(0, min(0.5, deadline)), rng.uniform(0, min(2.0, deadline))),
        (0.25, 0.5, 0.25),
    )[0]
    base = 0.0 if _chance(rng, 0.1) else rng.uniform(0, 2)
    cap = base if _chance(rng, 0.2) else base + rng.uniform(0, 10)
    jitter = 0.0 if _chance(rng, 0.2) else rng.uniform(0, 2)
    max_retry_after: float | None = None
    if _chance(rng, 0.5):
        max_retry_after = math.inf if _chance(rng, 0.1) else rng.uniform(0, 60)
    fields = (
        ("attempts", rng.randint(1, 10)),
        ("attempt_timeout", attempt_timeout),
        ("deadline", deadline),
        ("min_attempt_time", min_attempt_time),
        ("backoff_base", base),
        ("backoff_cap", cap),
        ("retry_after_jitter", jitter),
        ("max_retry_after", max_retry_after),
    )
    if _chance(rng, 0.15):
        # a status list that leaves 429 out (as one copied from urllib3's forcelist): a
        # rate limit is then final, yet retryable later
        fields += (("retry_statuses", _RETRY_STATUSES_WITHOUT_429),)
    rules: tuple[str, ...] = ()
    if _chance(rng, 0.25):
        rules = tuple(rng.sample(sorted(RULES), rng.randint(1, len(RULES))))
    return fields, rules


def _gen_retry_after(rng: random.Random) -> tuple[str, Any]:
    form = rng.choices(("seconds", "date", "raw"), (6, 2, 2))[0]
    if form == "seconds":
        if _chance(rng, 0.03):
            return ("seconds", "99999999999999999999")
        seconds = rng.choice((rng.randint(0, 3), rng.randint(0, 3), rng.randint(0, 120)))
        if _chance(rng, 0.2):  # decimal seconds: not HTTP's form, but what servers send
            return ("seconds", f"{seconds + rng.choice((0.25, 0.5, 0.75))}")
        return ("seconds", str(seconds))
    if form == "date":
        return ("date", rng.uniform(-10, 60))
    return ("raw", rng.choice(_GARBAGE_RETRY_AFTER))


#: A flaky dependency: mostly outcomes worth retrying, so calls run to many attempts.
_FLAKY_STATUSES = (200, 408, 409, 429, 500, 502, 503, 504)
_FLAKY_STATUS_WEIGHTS = (3, 2, 3, 6, 2, 3, 6, 3)
#: A dependency that keeps failing in ways worth retrying: calls run to their limits.
_PERSISTENT_STATUS_WEIGHTS = (1, 2, 1, 6, 2, 3, 6, 3)
_FLAKY_EXC_NAMES = (
    "ConnectError",
    "ConnectTimeout",
    "PoolTimeout",
    "ReadTimeout",
    "ReadError",
    "RemoteProtocolError",
    "AttemptTimedOut",
)


def _gen_outcome(rng: random.Random, streamed: bool, profile: str) -> Outcome:
    flaky = profile != "mixed"
    duration = 1.0 if _chance(rng, 0.2) else rng.random()
    if _chance(rng, 0.35):
        names, weights = (_FLAKY_EXC_NAMES, None) if flaky else (_EXC_NAMES, _EXC_WEIGHTS)
        name = rng.choices(names, weights)[0]
        during_body = False
        if name in BODY_EXCEPTIONS or name == "DecodingError":
            during_body = _chance(rng, 0.3)
        if name in TIMEOUTS and _chance(rng, 0.6):
            duration = 1.0
        late_share = None
        if _chance(rng, 0.3):
            late_share = rng.uniform(0.0, 0.95)
        return Outcome(
            kind="raise",
            exception=name,
            during_body=during_body,
            duration=duration,
            nested_gave_up=_chance(rng, 0.02),
            answered_meanwhile=_chance(rng, 0.5),
            late_share=late_share,
        )
    if profile == "persistent":
        status = rng.choices(_FLAKY_STATUSES, _PERSISTENT_STATUS_WEIGHTS)[0]
    elif flaky:
        status = rng.choices(_FLAKY_STATUSES, _FLAKY_STATUS_WEIGHTS)[0]
    else:
        status = rng.choices(_STATUSES, _STATUS_WEIGHTS)[0]
    hinted = 0.6 if status in (429, 503) else 0.2
    retry_after = _gen_retry_after(rng) if _chance(rng, hinted) else None
    quota = None
    if status == 429 and _chance(rng, 0.1 if flaky else 0.25):
        quota = rng.choice(("0", "0", " 0 ", "5", "", "-1"))
    body: BodyKind
    if status == 409:
        body = rng.choice(
            (
                "problem_not_replayable",
                "problem_in_flight",
                "json_not_replayable",
                "empty",
                "middleware_in_flight",
                "middleware_not_replayable",
                "app_conflict",
            )
        )
    elif status < 300:
        body = rng.choice(("json_ok", "json_ok", "json_error", "json_fatal", "text", "empty"))
    else:
        body = rng.choice(("text", "empty", "json_error"))
    body_error = ""
    if (streamed or status >= 400) and _chance(rng, 0.15):
        body_error = rng.choice((*BODY_EXCEPTIONS, "DecodingError"))
    return Outcome(
        status=status,
        retry_after=retry_after,
        quota=quota,
        replayed=_chance(rng, 0.03 if flaky else 0.1),
        body=body,
        rule_header=_chance(rng, 0.1),
        duration=duration,
        headers_share=rng.random(),
        body_error=body_error,
        nested_gave_up=_chance(rng, 0.02),
        answered_meanwhile=bool(body_error) and _chance(rng, 0.5),
    )


def _gen_admission(rng: random.Random, breaker: bool) -> AdmissionSpec:
    roll = rng.random()
    if roll < 0.06:
        return AdmissionSpec("cooldown", rng.choice((rng.uniform(0, 0.01), rng.uniform(0, 10))))
    if roll < 0.14:
        return AdmissionSpec("pacing", rng.uniform(0.001, 3))
    if roll < 0.16:
        return AdmissionSpec("full", rng.uniform(0.001, 1))
    if roll < 0.20 and breaker:
        return AdmissionSpec("denied", 0.0 if _chance(rng, 0.3) else rng.uniform(0, 30))
    return AdmissionSpec("open", probe=breaker and _chance(rng, 0.3))


#: Scenario profiles: "mixed" draws from every outcome, "flaky" leans to outcomes worth
#: retrying, "persistent" sends only what is safe to repeat into a long run of them.
PROFILES = ("mixed", "flaky", "persistent")


def _gen_answer(rng: random.Random, refusals: tuple[int, int, int]) -> str | float | None:
    """The governor's answer to a retry: mostly granted, sometimes refused, and sometimes
    (pacing on, the next slot further away than the retry's own wait) granted with a slot
    held for it, up to 3 s beyond that wait."""
    if _chance(rng, 0.1):
        return rng.uniform(0.001, 3)
    return rng.choices((None, "circuit_open", "budget_exhausted"), refusals)[0]


def _gen_cancel(rng: random.Random, attempts: int) -> int | None:
    """When the caller cancels, if it does: mostly at one of the first chances (the
    first attempt, the wait after it, the retry), where a first failure is held."""
    if not _chance(rng, 0.2):
        return None
    return rng.randint(0, 3) if _chance(rng, 0.7) else rng.randint(0, 2 * attempts)


def generate(rng: random.Random) -> Scenario:
    """One random scenario; everything random in it comes from ``rng``."""
    profile = rng.choices(PROFILES, (3, 4, 3))[0]
    persistent = profile == "persistent"
    policy, rules = _gen_policy(rng)
    if persistent:
        fields = dict(policy)
        fields["attempts"] = rng.randint(3, 10)
        if rng.random() < 0.7:
            fields["deadline"] = rng.choice((math.inf, rng.uniform(20, 300)))
        policy = tuple(fields.items())
    attempts = dict(policy)["attempts"]
    deadline = dict(policy)["deadline"]
    stream = _chance(rng, 0.4)
    returns_answers = _chance(rng, 0.4)
    breaker = _chance(rng, 0.4)
    shared = None
    if _chance(rng, 0.1):
        shared = rng.uniform(dict(policy)["min_attempt_time"], max(0.1, min(deadline, 30)))
    elif _chance(rng, 0.02):
        # A deadline shared with an enclosing scope that already has less than
        # min_attempt_time left: no attempt may start at all.
        shared = rng.uniform(0.0, dict(policy)["min_attempt_time"])
    if persistent:
        method = rng.choice(("GET", "PUT", "DELETE", "POST", "PATCH"))
        key = "key-7f3a" if method in ("POST", "PATCH") else rng.choice((None, "key-7f3a"))
        body = rng.choice(("bytes", "none"))
        refusals = (48, 1, 1)
    else:
        method = rng.choices(("GET", "PUT", "DELETE", "POST", "PATCH"), (3, 2, 1, 4, 2))[0]
        key = rng.choices((None, "key-7f3a", "", "   "), (4, 4, 1, 1))[0]
        body = rng.choices(("bytes", "stream", "none"), (7, 2, 1))[0]
        refusals = (18, 1, 1)
    return Scenario(
        seed=rng.getrandbits(32),
        policy=policy,
        rules=rules,
        method=method,
        key=key,
        body=body,  # type: ignore[arg-type]
        stream=stream,
        returns_answers=returns_answers,
        breaker=breaker,
        retries_used=0 if _chance(rng, 0.9) else rng.randint(1, 3),
        max_attempts=None if _chance(rng, 0.9) else rng.randint(1, 4),
        shared_deadline=shared,
        outcomes=tuple(_gen_outcome(rng, stream, profile) for _ in range(attempts + 2)),
        admissions=tuple(
            _gen_admission(rng, breaker and not (persistent and _chance(rng, 0.8)))
            for _ in range(2 * attempts + 2)
        ),
        answers=tuple(_gen_answer(rng, refusals) for _ in range(attempts + 1)),
        overshoots=tuple(
            0.0 if _chance(rng, 0.9) else rng.uniform(0, 0.005) for _ in range(2 * attempts + 2)
        ),
        cancel_at=_gen_cancel(rng, attempts),
    )


# -- driving -----------------------------------------------------------------------------


@dataclasses.dataclass
class StartRec:
    """``start_attempt(admission)`` at ``at`` with ``remaining`` seconds left."""

    at: float
    remaining: float
    admission: Admission
    after_wait: bool
    result: AttemptPlan | Wait | Fail
    effects: list[Any]
    #: ``call.cooldown_waited`` just after: the cooldown the next attempt waited out.
    cooldown_waited: float = 0.0


@dataclasses.dataclass
class OutcomeRec:
    """One attempt under ``plan``: sent at ``started``, reported to the engine at ``at``.

    ``verdict`` is what :mod:`retrysafe.classify` makes of the outcome at that moment.
    ``response``: the answer the outcome is judged by (None for an exception, or an
    answer whose body was needed and lost); ``exc`` with a response: its body was lost.
    """

    plan: AttemptPlan
    started: float
    at: float
    spec: Outcome
    response: httpx.Response | None
    exc: Exception | None
    during_body: bool
    verdict: Verdict
    read_body: ReadBody | None
    result: Any
    effects: list[Any]

    @property
    def body_lost(self) -> bool:
        """An answer judged on its headers, whose body failed to arrive."""
        return self.response is not None and self.exc is not None


@dataclasses.dataclass
class AnswerRec:
    """``retry_answered(ask, answer)``."""

    at: float
    ask: AskRetry
    answer: RetryAnswer
    result: Wait | Fail
    effects: list[Any]


@dataclasses.dataclass
class SleepRec:
    """The shell slept ``seconds`` (plus ``overshoot``, as a real sleep may)."""

    at: float
    seconds: float
    overshoot: float


@dataclasses.dataclass
class AbandonRec:
    """The caller cancelled the call (``attempt_abandoned()``): in a wait, or with an
    attempt in flight (``during_attempt``)."""

    at: float
    during_attempt: bool
    effects: list[Any]
    result: None = None


Record = StartRec | OutcomeRec | AnswerRec | SleepRec | AbandonRec


@dataclasses.dataclass
class Run:
    """A driven scenario: the transcript and what it ended with."""

    scenario: Scenario
    policy: RetryPolicy
    call: Call
    started: float
    deadline_at: float
    keyed: bool
    key: str | None
    replayable: bool
    records: list[Record]
    final: Succeed | Fail | None = None
    ended_at: float = 0.0
    error: BaseException | None = None
    #: Where ``error`` was raised: in retrysafe (a finding) or in this harness (a bug here).
    error_at: str = ""

    @property
    def cancelled(self) -> bool:
        """The caller cancelled the call (its last record is an AbandonRec)."""
        return bool(self.records) and isinstance(self.records[-1], AbandonRec)

    @property
    def plans(self) -> list[AttemptPlan]:
        return [
            r.result
            for r in self.records
            if isinstance(r, StartRec) and type(r.result) is AttemptPlan
        ]

    @property
    def outcomes(self) -> list[OutcomeRec]:
        return [r for r in self.records if isinstance(r, OutcomeRec)]


#: 9999-12-31T23:59:59Z, the last moment an HTTP-date can name.
_LAST_HTTP_DATE = 253_402_300_799.0


def _make_response(
    spec: Outcome, request: httpx.Request, clock: FakeClock, *, read: bool
) -> httpx.Response:
    headers: list[tuple[str, str]] = []
    content_type, body = _BODIES[spec.body]
    if content_type is not None:
        headers.append(("content-type", content_type))
    headers.extend(_BODY_HEADERS.get(spec.body, ()))
    if spec.retry_after is not None:
        form, value = spec.retry_after
        if form == "date":
            # Past year 9999 (a clock advanced by an absurd hint) no date can be written.
            moment = min(clock.time() + value, _LAST_HTTP_DATE)
            value = email.utils.formatdate(moment, usegmt=True)
        headers.append(("retry-after", str(value)))
    if spec.quota is not None:
        headers.append((QUOTA_HEADER, spec.quota))
    if spec.replayed:
        headers.append(("idempotent-replayed", "true"))
    if spec.rule_header:
        headers.append(("x-retry-rule", "yes"))
    if read:
        return httpx.Response(spec.status, headers=headers, content=body, request=request)
    return httpx.Response(spec.status, headers=headers, content=iter([body]), request=request)


def _exception(name: str, request: httpx.Request) -> Exception:
    kind = EXCEPTIONS[name]
    if issubclass(kind, httpx.RequestError):
        return kind(f"simulated {name}", request=request)
    return kind(f"simulated {name}")


class _Scripts:
    """The scenario's answer scripts, each falling back to a plain default when used up."""

    def __init__(self, scenario: Scenario) -> None:
        self.outcomes = iter(scenario.outcomes)
        self.admissions = iter(scenario.admissions)
        self.answers = iter(scenario.answers)
        self.overshoots = iter(scenario.overshoots)
        self.tokens = iter(range(1, 1_000_000))
        self.cancel_at = scenario.cancel_at
        self.chances = 0

    def cancels_now(self) -> bool:
        """Whether the caller cancels at this chance (a wait, or an attempt sent)."""
        now = self.chances == self.cancel_at
        self.chances += 1
        return now


def drive(scenario: Scenario) -> Run:
    """Play ``scenario`` against a fresh :class:`Call` the way the shells do."""
    clock = FakeClock(seed=scenario.seed)
    policy = scenario.make_policy()
    request = scenario.make_request()
    deadline = None
    if scenario.shared_deadline is not None:
        deadline = Deadline.after(scenario.shared_deadline, clock)
    call = Call(
        request,
        policy=policy,
        clock=clock,
        deadline=deadline,
        retries_used=scenario.retries_used,
        max_attempts=scenario.max_attempts,
        stream=scenario.stream,
        returns_answers=scenario.returns_answers,
    )
    key = scenario.key if scenario.key is not None and scenario.key.strip() else None
    run = Run(
        scenario=scenario,
        policy=policy,
        call=call,
        started=clock.monotonic(),
        deadline_at=call.deadline.at,
        keyed=key is not None,
        key=key,
        replayable=scenario.body != "stream",
        records=[],
    )
    scripts = _Scripts(scenario)
    try:
        _play(run, call, clock, request, scripts)
    except Exception as exc:  # an engine that raises is a finding, not a crash of the run
        run.error = exc
        frames = traceback.extract_tb(exc.__traceback__)
        run.error_at = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    run.ended_at = clock.monotonic()
    return run


def _admission(
    spec: AdmissionSpec, call: Call, clock: FakeClock, scripts: _Scripts, breaker: bool
) -> Admission:
    """What a governor would answer: it never reserves a second paced slot, and lets an
    attempt that waited out a cooldown go through a new one up to twice as long (the
    guard's own rule, ``waits_out``)."""
    if spec.kind == "cooldown" and waits_out(call, spec.seconds):
        return Admission(cooldown=spec.seconds)
    if spec.kind == "pacing" and not call.pacing_held:
        return Admission(pacing=spec.seconds, slot=float(next(scripts.tokens)))
    if spec.kind == "full" and not call.pacing_held:
        return Admission(pacing=spec.seconds, queue_full=True)
    if not breaker:
        return OPEN_ADMISSION
    if spec.kind == "denied":
        retry_at = clock.monotonic() + spec.seconds if spec.seconds > 0 else None
        return Admission(permit=Permit(allowed=False, retry_at=retry_at))
    return Admission(
        permit=Permit(allowed=True, probe=spec.probe, probe_token=next(scripts.tokens))
    )


def _abandon(run: Run, call: Call, clock: FakeClock, *, during_attempt: bool) -> None:
    """The caller cancels the call now, in a wait or with an attempt in flight (as the
    harness knows, not as the engine says), as a shell tells the engine (``abandoned``)."""
    call.attempt_abandoned()
    run.records.append(AbandonRec(clock.monotonic(), during_attempt, call.take_effects()))


def _sleep(run: Run, clock: FakeClock, seconds: float, scripts: _Scripts) -> None:
    overshoot = next(scripts.overshoots, 0.0)
    run.records.append(SleepRec(clock.monotonic(), seconds, overshoot))
    clock.sleep(seconds)
    clock.advance(overshoot)


def _play(
    run: Run, call: Call, clock: FakeClock, request: httpx.Request, scripts: _Scripts
) -> None:
    after_wait = False
    for _ in range(MAX_STEPS):
        spec = next(scripts.admissions, OPEN)
        admission = _admission(spec, call, clock, scripts, run.scenario.breaker)
        remaining = call.deadline.remaining()
        at = clock.monotonic()
        started = call.start_attempt(admission)
        run.records.append(
            StartRec(
                at,
                remaining,
                admission,
                after_wait,
                started,
                call.take_effects(),
                call.cooldown_waited,
            )
        )
        if type(started) is Wait:
            if scripts.cancels_now():
                _abandon(run, call, clock, during_attempt=False)
                return
            _sleep(run, clock, started.seconds, scripts)
            after_wait = True
            continue
        if type(started) is Fail:
            run.final = started
            return
        assert type(started) is AttemptPlan
        after_wait = False
        if scripts.cancels_now():
            clock.advance(started.timeout / 2)  # (cut halfway through the attempt)
            _abandon(run, call, clock, during_attempt=True)
            return
        result = _attempt(run, call, clock, request, started, next(scripts.outcomes, OK))
        if type(result) is AskRetry:
            answer_spec = next(scripts.answers, None)
            if answer_spec == "budget_exhausted" and not result.spends_budget:
                answer_spec = None  # a governor spends no budget on a wait the server asked for
            if isinstance(answer_spec, float):
                slot = float(next(scripts.tokens))
                answer = RetryAnswer(pacing=result.wait + answer_spec, slot=slot)
            else:
                answer = RetryAnswer(answer_spec)  # type: ignore[arg-type]
            at = clock.monotonic()
            answered = call.retry_answered(result, answer)
            run.records.append(AnswerRec(at, result, answer, answered, call.take_effects()))
            if type(answered) is Wait:
                if scripts.cancels_now():
                    _abandon(run, call, clock, during_attempt=False)
                    return
                _sleep(run, clock, answered.seconds, scripts)
                after_wait = True
                continue
            result = answered
        if type(result) in (Succeed, Fail):
            run.final = result
            return
        raise AssertionError(f"unexpected decision after an attempt: {result!r}")


def _attempt(
    run: Run, call: Call, clock: FakeClock, request: httpx.Request, plan: AttemptPlan, spec: Outcome
) -> Any:
    """Send one attempt: take a share of its timeout, then report the outcome."""
    started = clock.monotonic()
    total = (plan.timeout if math.isfinite(plan.timeout) else UNBOUNDED_ATTEMPT) * spec.duration
    if spec.nested_gave_up:
        call.nested_call_gave_up()
    read_body = None
    if spec.kind == "raise":
        clock.advance(total)
        exc = _exception(spec.exception, request)
        verdict = classify_exception(exc, during_body=spec.during_body)
        if spec.answered_meanwhile:
            call.answered_during_attempt()
        if spec.late_share is not None:
            call.attempt_ended_late((clock.monotonic() - started) * spec.late_share)
        result = call.attempt_raised(plan, exc, during_body=spec.during_body)
        run.records.append(
            OutcomeRec(
                plan,
                started,
                clock.monotonic(),
                spec,
                None,
                exc,
                spec.during_body,
                verdict,
                None,
                result,
                call.take_effects(),
            )
        )
        return result
    if plan.reads_at_once(spec.status):
        headers_at = total
        clock.advance(total)
        response = _make_response(spec, request, clock, read=True)
    else:
        headers_at = total * spec.headers_share
        clock.advance(headers_at)
        response = _make_response(spec, request, clock, read=False)
    result = call.attempt_returned(plan, response)
    early_effects = call.take_effects()
    if type(result) is ReadBody:
        read_body = result
        if read_body.plan is not plan:
            raise AssertionError("ReadBody names another plan")
        clock.advance(max(0.0, total - headers_at))
        if spec.body_error:
            exc = _exception(spec.body_error, request)
            response.close()
            # An error answer is judged on its status and headers, as if its lost body
            # said nothing (unless rules, which read bodies); any other outcome by how
            # far it got.
            settled = spec.status >= 400 and not run.scenario.rules
            if settled:
                verdict = _judge(response, run, clock.time())
            else:
                verdict = classify_exception(exc, during_body=True)
            if spec.answered_meanwhile:
                call.answered_during_attempt()
            result = call.attempt_raised(plan, exc, during_body=True, answer=response)
            run.records.append(
                OutcomeRec(
                    plan,
                    started,
                    clock.monotonic(),
                    spec,
                    response if settled else None,
                    exc,
                    True,
                    verdict,
                    read_body,
                    result,
                    early_effects + call.take_effects(),
                )
            )
            return result
        response.read()
        result = call.attempt_returned(plan, response)
    verdict = _judge(response, run, clock.time())
    run.records.append(
        OutcomeRec(
            plan,
            started,
            clock.monotonic(),
            spec,
            response,
            None,
            False,
            verdict,
            read_body,
            result,
            early_effects + call.take_effects(),
        )
    )
    return result


#: What :func:`_judge` says of a success the engine took on its headers while a rule
#: needed the body: not a verdict classify can give, so every check notices it.
BODY_NEEDED = Verdict("retry", "body_needed_but_not_read")


def _judge(response: httpx.Response, run: Run, now: float) -> Verdict:
    """What classify makes of ``response`` as the engine saw it: a read copy when the
    body was read, else the unread response itself (a streamed success on its headers).
    (Called before the attempt's record is added: every record in ``run`` came before.)"""
    in_use = key_may_be_in_use(run, len(run.records))
    try:
        content = response.content
    except httpx.ResponseNotRead:
        try:
            return classify_response(
                response, run.policy, keyed=run.keyed, now=now, key_may_be_in_use=in_use
            )
        except httpx.ResponseNotRead:
            return BODY_NEEDED
    copy = httpx.Response(
        response.status_code, headers=response.headers, content=content, request=response.request
    )
    return classify_response(copy, run.policy, keyed=run.keyed, now=now, key_may_be_in_use=in_use)


# -- what the scenario says an outcome means (independent of classify) ------------------


def _oracle_rule(name: str, spec: Outcome) -> tuple[str, str | None] | None:
    """What one of :data:`RULES` makes of ``spec``, read off the scenario."""
    status, body = spec.status, spec.body
    if name == "error_in_body":
        return ("retry", "maybe") if status < 300 and body == "json_error" else None
    if name == "fatal_in_body":
        return ("permanent", None) if status < 300 and body == "json_fatal" else None
    if name == "strict_json":
        return ("retry", "maybe") if status == 200 and body not in _JSON_BODIES else None
    if name == "header_retry":
        return ("retry", "no") if spec.rule_header else None
    if name == "retry_404":
        return ("retry", "no") if status == 404 else None
    raise ValueError(name)


#: The statuses retried by default, as docs/retries.md lists them: written out here rather
#: than read from retrysafe.policy, so that a wrong default there cannot move the oracle too.
_DOCUMENTED_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})


#: The retried statuses of a scenario whose policy leaves 429 out.
_RETRY_STATUSES_WITHOUT_429 = frozenset({408, 500, 502, 503, 504})


def retry_statuses_of(run: Run) -> frozenset[int]:
    """The statuses the scenario's policy retries: the documented ones unless it names its own."""
    named: frozenset[int] = dict(run.scenario.policy).get(
        "retry_statuses", _DOCUMENTED_RETRY_STATUSES
    )
    return named


def _oracle_default(
    spec: Outcome, keyed: bool, in_use: bool, statuses: frozenset[int]
) -> tuple[str, str | None]:
    status = spec.status
    if status < 400:
        return ("success", None)
    if status == 429:
        if spec.quota is not None and spec.quota.strip() == "0":
            return ("permanent", None)
        if status not in statuses:
            return ("permanent", None)  # final, yet retryable later (final_yet_retryable)
        return ("retry", "no")
    if status == 409 and keyed:
        if spec.body in _NOT_REPLAYABLE_BODIES:
            return ("permanent", None)  # the key's work ran; its result is gone for good
        if spec.body in _IN_FLIGHT_BODIES or spec.retry_after is not None or in_use:
            return ("retry", "no")  # the key is in use by an attempt still running
        return ("permanent", None)  # the app's own conflict
    if status in statuses:
        return ("retry", "no" if status in (408, 429, 503, 529) else "maybe")
    return ("permanent", None)


def final_yet_retryable(run: Run, rec: OutcomeRec) -> bool:
    """Whether a final outcome's error still says ``retryable``: a rate limit (a 429 not
    out of quota, answered live, no rule speaking) that the policy does not wait out."""
    spec = rec.spec
    return (
        rec.response is not None
        and spec.status == 429
        and not spec.replayed
        and not (spec.quota is not None and spec.quota.strip() == "0")
        and 429 not in retry_statuses_of(run)
        and _rule_meaning(run, spec) is None
    )


def headers_settle(run: Run, spec: Outcome) -> bool:
    """The scenario's reading of "this error answer's status and headers settle its
    verdict, whatever its body": no rule may read the body, and it is not a keyed 400,
    409 or 422 whose JSON body may speak of the key (the middleware's header says it
    without the body; a replay's answer never speaks of the key)."""
    if run.scenario.rules:
        return False
    if not run.keyed or spec.status not in (400, 409, 422) or spec.replayed:
        return True
    return spec.body in _BODY_HEADERS or spec.body not in _JSON_BODIES


def as_judged(run: Run, rec: OutcomeRec) -> Outcome:
    """The outcome as it could be judged: an answer whose body was lost, and needed (see
    headers_settle), is judged as one whose body says nothing."""
    if rec.body_lost and not headers_settle(run, rec.spec):
        return dataclasses.replace(rec.spec, body="empty")
    return rec.spec


def spec_meaning(run: Run, rec: OutcomeRec) -> tuple[str, str | None]:
    """``(kind, processed)`` of an outcome as the scenario describes it: ``processed``
    is only given for a retry ("no": the server surely did not act)."""
    spec = as_judged(run, rec)
    if rec.response is None:  # (no answer, or one whose body was needed and lost)
        if rec.during_body:
            return ("retry", "maybe")
        if spec.exception == "LocalProtocolError":
            return ("permanent", None)
        return ("retry", "no" if spec.exception in NEVER_SENT else "maybe")
    rule = _rule_meaning(run, spec)
    in_use = key_may_be_in_use(run, run.records.index(rec))
    statuses = retry_statuses_of(run)
    if spec.replayed:
        meaning = rule or _oracle_default(spec, run.keyed, in_use, statuses)
        return ("permanent", None) if meaning[0] == "retry" else meaning
    return rule or _oracle_default(spec, run.keyed, in_use, statuses)


def _rule_meaning(run: Run, spec: Outcome) -> tuple[str, str | None] | None:
    """What the first of the scenario's rules that speaks says of ``spec``, if one does."""
    for name in run.scenario.rules:
        rule = _oracle_rule(name, spec)
        if rule is not None:
            return rule
    return None


def key_may_be_in_use(run: Run, before: int) -> bool:
    """The scenario's reading of "an attempt under the key, among ``run``'s first
    ``before`` records, may still be running on the server": one that may have been
    acted on (a 4xx says it was not, but a keyed 409 in use or not replayable says it was)."""
    for rec in run.records[:before]:
        if not isinstance(rec, OutcomeRec):
            continue
        kind, processed = spec_meaning(run, rec)
        status = rec.spec.status if rec.response is not None else None
        if status == 409 and run.keyed:
            # (by the table's reading: a rule's verdict on a 409 says nothing of the key)
            if _rule_meaning(run, rec.spec) is None and (
                kind == "retry" or as_judged(run, rec).body in _NOT_REPLAYABLE_BODIES
            ):
                return True
        elif status is not None and 400 <= status < 500:
            continue
        elif kind == "retry" and processed == "maybe":
            return True
    return False


# -- invariants --------------------------------------------------------------------------

Expect = Callable[..., None]


def _later_plan(run: Run, index: int) -> AttemptPlan | None:
    for rec in run.records[index + 1 :]:
        if isinstance(rec, StartRec) and type(rec.result) is AttemptPlan:
            return rec.result
    return None


def _later_start(run: Run, index: int) -> StartRec | None:
    for rec in run.records[index + 1 :]:
        if isinstance(rec, StartRec) and type(rec.result) is AttemptPlan:
            return rec
    return None


def _wrote_body(rec: OutcomeRec) -> bool:
    """A response (or part of one) came back: a one-shot body may have been consumed."""
    return rec.response is not None or rec.during_body or rec.read_body is not None


def _unsafe_to_repeat(run: Run, rec: OutcomeRec) -> bool:
    """The scenario's own reading of "repeating this could do the work twice"."""
    maybe = rec.verdict.processed == "maybe"
    if not run.replayable:
        return _wrote_body(rec) or maybe
    return run.call.method not in run.policy.idempotent_methods and not run.keyed and maybe


def _retryable_later(run: Run, rec: OutcomeRec) -> bool:
    """Whether the caller's own later retry may help after ``rec``: safe to repeat, or
    safe but for a spent body, which the caller can send again."""
    maybe = rec.verdict.processed == "maybe"
    return not (run.call.method not in run.policy.idempotent_methods and not run.keyed and maybe)


def check_no_unsafe_repeat(run: Run, expect: Expect) -> None:
    """No unsafe repeat. After an attempt of a method outside the policy's idempotent
    methods (POST, PATCH), sent without a non-blank Idempotency-Key, whose outcome the
    server may have acted on (classify's ``verdict.processed == "maybe"``: a 5xx other
    than 503, a timeout after connecting, a reset, a protocol error, a truncated body, a
    rule's rejection...), no further attempt starts. A one-shot (streamed) request body
    is never sent again once it may have been written (any response came back, or the
    server may have acted). A blank or whitespace key counts as no key."""
    expect(
        run.call.idempotency_key == run.key,
        "the engine reads Idempotency-Key %r as %r",
        run.scenario.key,
        run.call.idempotency_key,
    )
    non_idempotent = run.call.method not in run.policy.idempotent_methods and not run.keyed
    for index, rec in enumerate(run.records):
        if not isinstance(rec, OutcomeRec) or rec.verdict.kind == "success":
            continue
        if non_idempotent and rec.verdict.processed == "maybe":
            later = _later_plan(run, index)
            expect(
                later is None,
                "%s without a key, attempt %d may have been acted on (%s: %s), "
                "yet attempt %s was sent",
                run.call.method,
                rec.plan.number,
                rec.spec.describe(),
                rec.verdict.reason,
                later and later.number,
            )
        if not run.replayable and (_wrote_body(rec) or rec.verdict.processed == "maybe"):
            later = _later_plan(run, index)
            expect(
                later is None,
                "one-shot body may have been written on attempt %d (%s), yet attempt %s was sent",
                rec.plan.number,
                rec.spec.describe(),
                later and later.number,
            )


def check_retry_after_respected(run: Run, expect: Expect) -> None:
    """No retry before a Retry-After. When an outcome carries a usable hint
    (classify's ``verdict.after``), the next attempt starts no earlier than the hint
    after the outcome (fake clock), and the retry's wait lies in
    ``[hint, hint + retry_after_jitter]``. A governor's cooldown is honoured the same
    way and its pacing wait exactly. A hint (or cooldown) above ``max_retry_after``
    ends the call. With no hint, the wait is full-jitter backoff: at most
    ``min(backoff_cap, backoff_base * 2^(n-1))`` after attempt n. A retry granted with
    a paced slot held for it waits exactly until that slot (further away than its own
    wait, which keeps the bounds above), and its attempt starts no earlier."""
    policy = run.policy
    jitter = policy.retry_after_jitter
    limit = policy.max_retry_after
    for index, rec in enumerate(run.records):
        hint: float | None = None
        wait: float | None = None
        what = ""
        if isinstance(rec, OutcomeRec) and rec.verdict.kind == "retry":
            hint = rec.verdict.after
            following = run.records[index + 1] if index + 1 < len(run.records) else None
            if isinstance(following, AnswerRec) and type(following.result) is Wait:
                wait = following.ask.wait  # the engine's own; a held slot's is checked below
                slot = following.answer.pacing
                expect(
                    following.result.seconds == max(wait, slot),
                    "attempt %d: asked to wait %r s, granted with a slot %r s away, waited %r s",
                    rec.plan.number,
                    wait,
                    slot,
                    following.result.seconds,
                )
                nxt = _later_start(run, index)
                if slot > 0 and nxt is not None:
                    expect(
                        nxt.at >= following.at + slot - eps(following.at, slot),
                        "attempt %d started at %r, before the slot held for it at %r",
                        nxt.result.number,
                        nxt.at,
                        following.at + slot,
                    )
                if hint is None:
                    # Full jitter: a backoff wait lies in [0, min(cap, base * 2^(n-1))].
                    ceiling = min(
                        policy.backoff_cap, policy.backoff_base * 2.0 ** (rec.plan.number - 1)
                    )
                    expect(
                        0 <= wait <= ceiling + eps(ceiling),
                        "attempt %d: a backoff wait of %r s, over its ceiling %r s (cap %r)",
                        rec.plan.number,
                        wait,
                        ceiling,
                        policy.backoff_cap,
                    )
            what = f"attempt {rec.plan.number} ({rec.spec.describe()})"
        elif isinstance(rec, StartRec) and rec.admission.cooldown > 0:
            hint = rec.admission.cooldown
            wait = rec.result.seconds if type(rec.result) is Wait else None
            what = f"a governor cooldown of {hint!r}s"
        elif isinstance(rec, StartRec) and rec.admission.pacing > 0 and type(rec.result) is Wait:
            expect(
                rec.result.seconds == rec.admission.pacing,
                "a pacing slot %r s away was waited %r s",
                rec.admission.pacing,
                rec.result.seconds,
            )
            nxt = _later_start(run, index)
            if nxt is not None:
                expect(
                    nxt.at >= rec.at + rec.admission.pacing - eps(rec.at, rec.admission.pacing),
                    "attempt %d started at %r, before its paced slot at %r",
                    nxt.result.number,
                    nxt.at,
                    rec.at + rec.admission.pacing,
                )
            continue
        if hint is None:
            continue
        at = rec.at
        slack = eps(at, hint)
        if wait is not None:
            expect(
                hint - slack <= wait <= hint + jitter + slack,
                "%s hinted %r s, but the wait was %r s (jitter %r)",
                what,
                hint,
                wait,
                jitter,
            )
        nxt = _later_start(run, index)
        if nxt is not None:
            expect(
                nxt.at >= at + hint - slack,
                "%s hinted %r s at t=%r, but attempt %d started at t=%r",
                what,
                hint,
                at,
                nxt.result.number,
                nxt.at,
            )
        if limit is not None and hint > limit:
            expect(
                nxt is None,
                "%s hinted %r s, over max_retry_after=%r, but attempt %s followed",
                what,
                hint,
                limit,
                nxt and nxt.result.number,
            )


def check_deadline_respected(run: Run, expect: Expect) -> None:
    """No deadline overrun. No wait ends past the deadline, nor leaves less than
    ``min_attempt_time`` before it; no attempt starts with no time left, or with less
    than ``min_attempt_time`` left unless a wait was just granted for it; each attempt's
    timeout is ``min(attempt_timeout, time left)``; and the whole call ends within
    ``policy.deadline`` (plus float slack, plus the overshoot of a real sleep just
    before the end, which the engine cannot prevent)."""
    policy = run.policy
    at_most = run.deadline_at
    min_time = policy.min_attempt_time
    for rec in run.records:
        wait: float | None = None
        if isinstance(rec, StartRec):
            result = rec.result
            if type(result) is AttemptPlan:
                expect(rec.remaining > 0, "attempt %d started with no time left", result.number)
                expect(
                    rec.remaining >= min_time or rec.after_wait,
                    "attempt %d started with %r s left, under min_attempt_time=%r, no wait granted",
                    result.number,
                    rec.remaining,
                    min_time,
                )
                expect(
                    result.timeout <= rec.remaining,
                    "attempt %d got timeout %r with only %r s left",
                    result.number,
                    result.timeout,
                    rec.remaining,
                )
                expect(
                    result.timeout == min(policy.attempt_timeout, rec.remaining),
                    "attempt %d got timeout %r, not min(attempt_timeout=%r, left=%r)",
                    result.number,
                    result.timeout,
                    policy.attempt_timeout,
                    rec.remaining,
                )
                # (cut when its own hard end, a grace past its limit, would pass the deadline)
                expect(
                    result.cut_by_deadline
                    == (rec.remaining < policy.attempt_timeout + HARD_END_GRACE),
                    "attempt %d: cut_by_deadline=%r with %r left, attempt_timeout %r",
                    result.number,
                    result.cut_by_deadline,
                    rec.remaining,
                    policy.attempt_timeout,
                )
            elif type(result) is Wait:
                wait = result.seconds
        elif isinstance(rec, AnswerRec) and type(rec.result) is Wait:
            wait = rec.result.seconds
        if wait is not None:
            expect(wait >= 0, "a negative wait %r at t=%r", wait, rec.at)
            ends = rec.at + wait
            expect(
                ends <= at_most + eps(ends, at_most),
                "a wait of %r s at t=%r ends at %r, past the deadline %r",
                wait,
                rec.at,
                ends,
                at_most,
            )
            expect(
                ends + min_time <= at_most + eps(ends, at_most),
                "a wait of %r s at t=%r leaves %r s before the deadline, under min_attempt_time=%r",
                wait,
                rec.at,
                at_most - ends,
                min_time,
            )
    if run.final is None:
        return
    allowance = 0.0
    if len(run.records) >= 2 and isinstance(run.records[-2], SleepRec):
        allowance = run.records[-2].overshoot
    elapsed = run.ended_at - run.started
    budget = policy.deadline
    if run.scenario.shared_deadline is not None:
        budget = min(budget, run.scenario.shared_deadline)
    expect(
        elapsed <= budget + allowance + eps(elapsed, budget),
        "the call took %r s, over its deadline of %r s",
        elapsed,
        budget,
    )
    expect(
        abs(run.final.report.elapsed - elapsed) <= eps(elapsed),
        "the report says %r s elapsed, the clock %r s",
        run.final.report.elapsed,
        elapsed,
    )


def check_no_retry_of_permanent(run: Run, expect: Expect) -> None:
    """No retry of a permanent error. After an outcome the scenario says is final (a
    4xx other than 408, 429 and a keyed 409 still in flight; a 429 out of quota; the
    not-replayable 409; a replayed failure; a rule's permanent verdict; a request this
    side cannot send; a 429 the policy's statuses leave out), the call ends at once, with
    ``retryable=False`` (``True`` for that last one: asked later, it may go through)."""
    for index, rec in enumerate(run.records):
        if not isinstance(rec, OutcomeRec) or spec_meaning(run, rec)[0] != "permanent":
            continue
        result = rec.result
        expect(
            type(result) is Fail,
            "attempt %d got a final outcome (%s), but the engine answered %r",
            rec.plan.number,
            rec.spec.describe(),
            result,
        )
        if type(result) is Fail:
            retryable_later = final_yet_retryable(run, rec)
            expect(
                result.error.retryable is retryable_later,
                "attempt %d got a final outcome (%s), but the error says retryable=%r (%r)",
                rec.plan.number,
                rec.spec.describe(),
                result.error.retryable,
                result.error,
            )
        later = _later_plan(run, index)
        expect(
            later is None,
            "attempt %d got a final outcome (%s), yet attempt %s followed",
            rec.plan.number,
            rec.spec.describe(),
            later and later.number,
        )


def check_attempts_within_policy(run: Run, expect: Expect) -> None:
    """Attempts within the policy. No more attempts than ``policy.attempts`` (nor than
    what a redirect chain or a nesting left); attempts are numbered 1..n; the report
    counts n attempts, with one history record per attempt and the granted retry waits;
    a Fail's ``error.attempts`` is n."""
    policy, scenario = run.policy, run.scenario
    plans = run.plans
    n = len(plans)
    limit = (
        policy.attempts
        if scenario.max_attempts is None
        else min(policy.attempts, scenario.max_attempts)
    )
    limit = max(1, limit - scenario.retries_used)
    expect(n <= policy.attempts, "%d attempts, over policy.attempts=%d", n, policy.attempts)
    expect(n <= limit, "%d attempts, over the %d this call was left", n, limit)
    for number, plan in enumerate(plans, start=1):
        expect(plan.number == number, "attempt %d was numbered %d", number, plan.number)
    final = run.final
    if final is None:
        return
    report = final.report
    expect(report.attempts == n, "the report counts %d attempts, %d were sent", report.attempts, n)
    expect(
        len(report.history) == n,
        "the report's history has %d records for %d attempts",
        len(report.history),
        n,
    )
    for record, rec in zip(report.history, run.outcomes, strict=False):
        status = rec.response.status_code if rec.response is not None else None
        exception = type(rec.exc).__name__ if rec.exc is not None else None
        expect(
            (record.attempt, record.status, record.exception, record.timeout)
            == (rec.plan.number, status, exception, rec.plan.timeout),
            "history record %r does not match attempt %d (%s, timeout %r)",
            record,
            rec.plan.number,
            rec.spec.describe(),
            rec.plan.timeout,
        )
    # (the call's own waits: a paced slot held further away is load protection's)
    granted = [
        r.ask.wait for r in run.records if isinstance(r, AnswerRec) and type(r.result) is Wait
    ]
    expected_waits = tuple(granted[: n - 1]) if n > 1 else ()
    expect(
        report.waits == expected_waits,
        "the report's waits %r, granted %r",
        report.waits,
        expected_waits,
    )
    if type(final) is Fail:
        expect(
            final.error.attempts == n,
            "the error counts %d attempts, %d were sent",
            final.error.attempts,
            n,
        )


def _class_by_outcome(rec: OutcomeRec) -> type[ApiError]:
    if rec.response is not None:
        status = rec.response.status_code
        if rec.verdict.reason == "quota_exhausted":
            return QuotaExhausted
        if status == 429:
            return RateLimited
        if 400 <= status < 500:
            return ClientError
        if status >= 500:
            return ServerError
        return BadResponse
    if rec.during_body and not isinstance(rec.exc, httpx.TimeoutException):
        return BadResponse
    return TransportError


def _expected_error(run: Run) -> tuple[type[ApiError], bool, str]:
    """The error class a Fail should carry, its ``retryable``, and why."""
    last = run.records[-1]
    min_time = run.policy.min_attempt_time
    if isinstance(last, StartRec):
        admission = last.admission
        if last.remaining <= 0 or (not last.after_wait and last.remaining < min_time):
            return DeadlineExceeded, True, "no time left to start an attempt"
        if admission.cooldown > 0:
            return CooldownActive, True, "a cooldown longer than the time or limit left"
        if admission.pacing > 0:
            return PacingDelayed, True, "a paced slot beyond the deadline"
        if admission.permit is not None and not admission.permit.allowed:
            return CircuitOpen, True, "the breaker refused the attempt"
        return ApiError, True, "start_attempt failed with no reason the scenario knows of"
    outcome = next(r for r in reversed(run.records) if isinstance(r, OutcomeRec))
    by_outcome = _class_by_outcome(outcome)
    if isinstance(last, AnswerRec) and last.answer.refusal is None:
        return PacingDelayed, True, "the retry's paced slot beyond the deadline"
    if isinstance(last, AnswerRec):
        refused = CircuitOpen if last.answer.refusal == "circuit_open" else BudgetExhausted
        return refused, True, f"the governor refused the retry ({last.answer.refusal})"
    assert isinstance(last, OutcomeRec)
    if last.verdict.kind == "permanent":
        return by_outcome, final_yet_retryable(run, last), "a final outcome"
    if (
        isinstance(last.exc, httpx.TimeoutException)
        and last.plan.cut_by_deadline
        and (run.deadline_at - last.at <= 0 or run.deadline_at - last.at < min_time)
    ):
        # Out of time; retryable only if the work may be repeated blindly. (A timeout
        # that fires with time to spare for another attempt is an ordinary failure.)
        retryable = _retryable_later(run, last)
        return DeadlineExceeded, retryable, "an attempt cut short by the deadline timed out"
    if _unsafe_to_repeat(run, last):
        return by_outcome, _retryable_later(run, last), "unsafe to repeat"
    if isinstance(run.final, Fail) and run.final.error.reason == "retry_after_too_long":
        return RetryAfterTooLong, True, "a Retry-After longer than the time or limit left"
    return by_outcome, True, "retries stopped"


def _error_says_processed(error: ApiError) -> bool:
    """Whether the error says the server may have acted (``processed == "maybe"``; named
    ``may_have_processed`` before the 0.x renames)."""
    processed = getattr(error, "processed", None)
    if processed in ("no", "maybe"):
        return processed == "maybe"
    return bool(getattr(error, "may_have_processed"))  # noqa: B009


def check_single_ending(run: Run, expect: Expect) -> None:
    """One ending. Every call ends in exactly one Succeed or Fail, within bounded steps,
    without the engine raising. A Succeed hands back the last attempt's response, whose
    ``extensions["retrysafe"]`` is the report; a Fail carries an ApiError subclass
    matching why it stopped, ``retryable=False`` exactly when the outcome was final or
    unsafe to repeat even with the body sent again, the report (also on its last
    response) and ``may_have_processed``
    as classify's ``may_have_acted`` over the attempts."""
    expect(run.error is None, "raised %r at %s", run.error, run.error_at)
    expect(
        run.final is not None or run.error is not None or run.cancelled,
        "no ending after %d steps",
        MAX_STEPS,
    )
    if run.cancelled:
        expect(run.call.state == "done", "a cancelled call left in state %r", run.call.state)
    final = run.final
    if final is None:
        return
    expect(run.call.state == "done", "the call ended in state %r", run.call.state)
    endings = [
        r
        for r in run.records
        if isinstance(r, (StartRec, OutcomeRec, AnswerRec)) and type(r.result) in (Succeed, Fail)
    ]
    expect(len(endings) == 1 and endings[0] is run.records[-1], "%d endings", len(endings))
    report = final.report
    expect(
        report.idempotency_key == run.key,
        "the report's key %r, the request's %r",
        report.idempotency_key,
        run.key,
    )
    last = run.records[-1]
    if type(final) is Succeed:
        expect(isinstance(last, OutcomeRec), "a Succeed with no attempt just before it")
        if isinstance(last, OutcomeRec):
            expect(
                final.response is last.response, "the Succeed's response is not the last attempt's"
            )
            meaning = spec_meaning(run, last)[0]
            expect(
                last.verdict.kind == "success" and meaning == "success",
                "a Succeed on %s (classify: %s %s; scenario: %s)",
                last.spec.describe(),
                last.verdict.kind,
                last.verdict.reason,
                meaning,
            )
        expect(
            final.response.extensions.get("retrysafe") is report,
            "the response does not carry the report",
        )
        expect(report.error is None, "a Succeed's report carries an error %r", report.error)
        return
    error = final.error
    expect(isinstance(error, ApiError), "a Fail with %r, not an ApiError", error)
    expect(report.error is error, "the report's error %r is not the Fail's %r", report.error, error)
    outcomes = run.outcomes
    expected_response = outcomes[-1].response if outcomes else None
    if outcomes and outcomes[-1].body_lost and isinstance(last, OutcomeRec):
        # An answer whose body never came: its error names it, with no body, and there is
        # no response for the shell to hand over.
        assert expected_response is not None
        expect(
            (error.status, error.body) == (expected_response.status_code, None),
            "ended on %s with its body lost, yet the error says status=%r body=%r",
            last.spec.describe(),
            error.status,
            error.body,
        )
        expected_response = None
    expect(final.response is expected_response, "the Fail's response is not the last attempt's")
    if final.response is not None:
        expect(
            final.response.extensions.get("retrysafe") is report,
            "the last response does not carry the report",
        )
    kind, retryable, why = _expected_error(run)
    expect(
        isinstance(error, kind),
        "gave up (%s) with %s (reason %r), expected %s",
        why,
        type(error).__name__,
        error.reason,
        kind.__name__,
    )
    expect(
        error.retryable is retryable,
        "gave up (%s) with retryable=%r (reason %r), expected %r",
        why,
        error.retryable,
        error.reason,
        retryable,
    )
    if why == "unsafe to repeat":
        expect(error.reason == "unsafe_to_repeat", "gave up as unsafe with reason %r", error.reason)
    acted = any(
        may_have_acted(r.verdict, r.response) for r in outcomes if r.verdict.kind != "success"
    )
    said = _error_says_processed(error)
    expect(
        said is acted,
        "the error says processed=%r, but classify says the attempts %s have been acted on",
        said,
        "may" if acted else "cannot",
    )
    if isinstance(error, TransportError):
        expect(error.sent == ("maybe" if acted else "no"), "TransportError.sent=%r", error.sent)


def check_no_retry_after_nested_give_up(run: Run, expect: Expect) -> None:
    """No multiplied retries. When a retrying call nested in an attempt already retried
    and gave up, the failure is not retried again by this call."""
    for index, rec in enumerate(run.records):
        if (
            isinstance(rec, OutcomeRec)
            and rec.spec.nested_gave_up
            and rec.verdict.kind != "success"
        ):
            later = _later_plan(run, index)
            expect(
                later is None,
                "attempt %d's nested call gave up, yet attempt %s followed",
                rec.plan.number,
                later and later.number,
            )


def check_effects_sane(run: Run, expect: Expect) -> None:
    """Sane effects. Every allowed breaker permit handed in is either reported once with
    RecordHealth (its attempt started; health and open_for as classify's ``health`` and
    the 503's hint) or released once with ReleaseProbe (its attempt never started),
    never both; refused permits need neither. But a call's first failure under a closed
    period's permit (not a timeout, not one with the server's wait) is held back while
    the call may retry: reported as the call ends without a retry (giving up, or a
    refusal other than the budget's or the circuit's), or just before its retry's
    failure (then a repeat); dropped by its success, or by the circuit refusing its
    retry; handed to the breaker to defer (DeferFailure) when the budget refuses it. A
    retry of a call that had failed (held, or told) tells its end (RetryEnded: failed
    or not) after any health it reports; a probe's does not.
    Every paced slot granted (with an attempt's admission or a retry's grant) is used by
    the attempt that follows its wait or released once. A 429 with a hint starts one
    cooldown of that hint; nothing else does. A retry granted on a budget token
    (``spends_budget``) whose attempt is never sent, the call ending first, gives the
    token back once (RefundBudget); nothing else does. A call its caller cancels
    (``attempt_abandoned``) releases the permit of an attempt in flight, a paced slot it
    holds and a budget token spent on a retry never sent; its held first failure is told
    if its retry was in flight, or handed to the breaker to defer (DeferFailure) if the
    call was cancelled in a wait. Events: one "retry" per granted retry, one "success"
    or "failure" at the end (or "interrupted", when cancelled), numbered with the
    attempts so far (started: with the one in flight); one "attempt" as each attempt
    ends, before the others."""
    in_flight: Permit | None = None
    spent_unsent = False  # a granted retry spent a budget token; its attempt is not sent
    held = 0
    held_slot: float | None = None  # the slot the call holds, as the governor named it
    failed_before = False  # the call already told the breaker of a failure
    held_failure: RecordHealth | None = None  # its first failure, held back while it may retry
    attempts = 0
    for rec in run.records:
        if isinstance(rec, SleepRec):
            continue
        effects = rec.effects
        health_effects = [e for e in effects if type(e) is RecordHealth]
        probes = [e for e in effects if type(e) is ReleaseProbe]
        pacings = [e for e in effects if type(e) is ReleasePacing]
        cooldowns = [e for e in effects if type(e) is StartCooldown]
        events = [e.event for e in effects if type(e) is EmitEvent]
        refunds = [e for e in effects if type(e) is RefundBudget]
        defers = [e for e in effects if type(e) is DeferFailure]
        retry_ends = [e for e in effects if type(e) is RetryEnded]
        known = (
            RecordHealth,
            ReleaseProbe,
            ReleasePacing,
            StartCooldown,
            RefundBudget,
            DeferFailure,
            RetryEnded,
            EmitEvent,
        )
        unknown = [e for e in effects if type(e) not in known]
        expect(not unknown, "unknown effects %r", unknown)
        expected_refunds: list[RefundBudget] = []
        expected_defers: list[DeferFailure] = []
        expected_retry_ends: list[RetryEnded] = []
        expected_events: list[str] = []
        expected_probes: list[Permit] = []
        expected_pacing = 0
        expected_cooldowns: list[float] = []
        expected_health: list[RecordHealth] = []
        if isinstance(rec, StartRec):
            permit = rec.admission.permit
            if rec.admission.queue_full:
                expect(
                    type(rec.result) is Fail,
                    "a full pacing queue gave %r, not a refusal",
                    rec.result,
                )
            elif rec.admission.pacing > 0:
                held += 1
                held_slot = rec.admission.slot
                expect(held <= 1, "the call holds %d paced slots at once", held)
            if type(rec.result) is AttemptPlan:
                spent_unsent = False  # (the retry went out: its token was used)
            elif type(rec.result) is Fail and spent_unsent:
                spent_unsent = False
                expected_refunds.append(RefundBudget(1.0))
            if type(rec.result) is AttemptPlan:
                attempts += 1
                held = 0
                if permit is not None and permit.allowed:
                    in_flight = permit
            else:
                if permit is not None and permit.allowed:
                    expected_probes.append(permit)
                if not (type(rec.result) is Wait and rec.admission.pacing > 0):
                    expected_pacing, held = held, 0
            if type(rec.result) is Fail:
                expected_events.append("failure")
        elif isinstance(rec, OutcomeRec):
            status = rec.response.status_code if rec.response is not None else None
            if in_flight is not None:
                outcome_health = health(rec.verdict, status)
                # How long the attempt took, for a success or a timeout (the breaker
                # learns the one and weighs the other against it); None otherwise.
                timed = outcome_health == "healthy" or (
                    outcome_health == "unhealthy" and rec.verdict.reason in _TIMEOUTS
                )
                open_for = rec.verdict.after if status == 503 else None
                seconds = rec.at - rec.started if timed else None
                if (
                    seconds is not None
                    and outcome_health == "unhealthy"
                    and rec.spec.late_share is not None
                ):
                    # (a timeout weighs the time less how late the shell said it ended)
                    late = (rec.at - rec.started) * rec.spec.late_share
                    seconds = max(0.0, seconds - late)
                # A retry of a call that had failed decides the deferred failures.
                if (
                    outcome_health != "neutral"
                    and not in_flight.probe
                    and (held_failure is not None or failed_before)
                ):
                    expected_retry_ends.append(RetryEnded(outcome_health == "unhealthy"))
                if outcome_health == "unhealthy" and held_failure is not None:
                    # Its retry failed too: the held failure counts now, this one repeats.
                    expected_health.append(held_failure)
                    held_failure, failed_before = None, True
                holds = (
                    outcome_health == "unhealthy"
                    and not failed_before
                    and not in_flight.probe
                    # (a timeout, only when others were answered as it waited)
                    and (rec.verdict.reason not in _TIMEOUTS or rec.spec.answered_meanwhile)
                    and rec.verdict.reason != "connect_timeout"
                    and rec.verdict.after is None
                )
                expected = RecordHealth(
                    in_flight,
                    outcome_health,
                    open_for,
                    failed_before,  # a repeat: the call already counts as failing
                    seconds,
                )
                if holds:
                    held_failure = expected  # (reported below if the call ends here)
                else:
                    if expected.health == "unhealthy":
                        failed_before = True
                    elif expected.health == "healthy":
                        held_failure = None  # (taken back by a success)
                    # A healthy first report under a closed period's permit (not a probe)
                    # may be the one shared effect: the breaker counts it the same for any
                    # period.
                    shared = (
                        expected.health == "healthy"
                        and not expected.repeat
                        and expected.open_for is None
                        and not in_flight.probe
                        and health_effects[-1:] == [HEALTHY_WHILE_CLOSED]
                    )
                    expected_health.append(HEALTHY_WHILE_CLOSED if shared else expected)
                in_flight = None
            if status == 429 and rec.verdict.after is not None:
                expected_cooldowns.append(rec.verdict.after)
            if type(rec.result) is not ReadBody:  # the attempt ended: its own event first
                expected_events.append("attempt")
            if type(rec.result) is Succeed:
                expected_events.append("success")
            elif type(rec.result) is Fail:
                expected_events.append("failure")
        elif isinstance(rec, AnswerRec):
            expected_events.append("retry" if type(rec.result) is Wait else "failure")
            spent_unsent = type(rec.result) is Wait and rec.ask.spends_budget
            if rec.answer.refusal is None and rec.answer.pacing > 0:
                # A slot held for the retry: kept through the wait, or (too late for the
                # deadline) given back at once, with the budget token the grant spent.
                held_slot = rec.answer.slot
                if type(rec.result) is Wait:
                    held += 1
                    expect(held <= 1, "the call holds %d paced slots at once", held)
                else:
                    expected_pacing = 1
                    if rec.ask.spends_budget:
                        expected_refunds.append(RefundBudget(1.0))
        elif isinstance(rec, AbandonRec):
            # Cancelled: the listeners hear it; what it held goes back (the permit of an
            # attempt in flight, a paced slot, a budget token spent on a retry never
            # sent), and its held first failure counts if the retry was in flight, or is
            # left to another call's retry if it was never sent.
            if rec.during_attempt:
                expected_events.append("attempt")  # (the attempt it cut ends first)
            expected_events.append("interrupted")
            if in_flight is not None:
                expected_probes.append(in_flight)
                in_flight = None
            expected_pacing, held = held, 0
            if spent_unsent:
                spent_unsent = False
                expected_refunds.append(RefundBudget(1.0))
            if held_failure is not None:
                # (a timeout counts however the call ends; another failure is left to
                # another call's retry when the retry was never sent)
                if rec.during_attempt or held_failure.seconds is not None:
                    expected_health.append(held_failure)
                    failed_before = True
                else:
                    expected_defers.append(DeferFailure(held_failure))
                held_failure = None
        if type(rec.result) is Fail and held_failure is not None:
            if isinstance(rec.result.error, BudgetExhausted) and held_failure.seconds is None:
                expected_defers.append(DeferFailure(held_failure))  # for another retry
                held_failure = None
            elif isinstance(rec.result.error, CircuitOpen):
                held_failure = None  # the breaker is not closed: nothing to tell it
            else:
                expected_health.append(held_failure)  # the call ends without a retry: told now
                held_failure, failed_before = None, True
        expect(
            health_effects == expected_health,
            "breaker told %r, expected %r (%s -> %s)",
            health_effects,
            expected_health,
            type(rec).__name__,
            _fmt(rec.result),
        )
        expect(
            defers == expected_defers,
            "deferred failures %r, expected %r (%s -> %s)",
            defers,
            expected_defers,
            type(rec).__name__,
            _fmt(rec.result),
        )
        expect(
            retry_ends == expected_retry_ends,
            "retries ended %r, expected %r (%s -> %s)",
            retry_ends,
            expected_retry_ends,
            type(rec).__name__,
            _fmt(rec.result),
        )
        expect(
            refunds == expected_refunds,
            "budget refunds %r, expected %r (%s -> %s)",
            refunds,
            expected_refunds,
            type(rec).__name__,
            _fmt(rec.result),
        )
        expect(
            probes == [ReleaseProbe(p) for p in expected_probes],
            "released probes %r, expected %r (%s -> %s)",
            probes,
            expected_probes,
            type(rec).__name__,
            _fmt(rec.result),
        )
        expect(
            len(pacings) == expected_pacing,
            "released %d paced slots, expected %d (%s -> %s)",
            len(pacings),
            expected_pacing,
            _fmt(getattr(rec, "admission", None)),
            _fmt(rec.result),
        )
        expect(
            all(release.slot == held_slot for release in pacings),
            "released paced slots %r, but the call held slot %r",
            [release.slot for release in pacings],
            held_slot,
        )
        expect(
            [c.seconds for c in cooldowns] == expected_cooldowns,
            "cooldowns %r, expected %r",
            cooldowns,
            expected_cooldowns,
        )
        expect(
            [e.kind for e in events] == expected_events,
            "events %r, expected %r (%s -> %s)",
            [e.kind for e in events],
            expected_events,
            type(rec).__name__,
            _fmt(rec.result),
        )
        for event in events:
            expect(
                event.attempt == attempts,
                "a %s event numbered attempt %d of %d",
                event.kind,
                event.attempt,
                attempts,
            )
    expect(
        in_flight is None or run.final is None,
        "permit %r of the last attempt never reported",
        in_flight,
    )


def check_classification_matches_spec(run: Run, expect: Expect) -> None:
    """Classify agrees with the scenario. Each outcome's verdict kind (and, for a
    retry, whether the server surely did not act) is what the scenario says it is:
    the table in docs/retries.md, the not-replayable 409 final, a keyed 409 in flight
    retryable, a replay final, rules first. A retry's hint is the Retry-After header's
    seconds, and it spends retry budget unless the server said the client was too fast
    (a 429, a key in use). A streamed success is judged on its headers only when no rule
    needs the body."""
    for rec in run.outcomes:
        expect(
            rec.verdict is not BODY_NEEDED,
            "attempt %d: a rule needed the body, but the engine took the headers",
            rec.plan.number,
        )
        kind, processed = spec_meaning(run, rec)
        got = (rec.verdict.kind, rec.verdict.processed if rec.verdict.kind == "retry" else None)
        expect(
            got == (kind, processed),
            "attempt %d (%s%s): classify says %s %s processed=%s, the scenario %s processed=%s",
            rec.plan.number,
            rec.spec.describe(),
            ", keyed" if run.keyed else "",
            rec.verdict.kind,
            rec.verdict.reason,
            rec.verdict.processed,
            kind,
            processed,
        )
        header = rec.spec.retry_after
        if (
            rec.response is not None
            and rec.verdict.kind == "retry"
            and header is not None
            and header[0] == "seconds"
            and _rule_meaning(run, rec.spec) is None
        ):
            # The hint every wait is checked against is classify's own: read the header
            # here too, so that a hint classify loses or misreads is caught.
            sent = min(float(header[1]), 1e15)
            expect(
                rec.verdict.after == sent,
                "attempt %d (%s): classify's hint is %r, the Retry-After header says %r",
                rec.plan.number,
                rec.spec.describe(),
                rec.verdict.after,
                sent,
            )
        if type(rec.result) is AskRetry:
            # A wait the server asked for because the client was too fast (a 429, a key
            # still in use), or the retry of a request the client's own pool held back
            # (a pool timeout: never sent), spends no retry budget; every other retry does.
            too_fast = _rule_meaning(run, rec.spec) is None and (
                rec.spec.status == 429 or (rec.spec.status == 409 and run.keyed)
            )
            free = isinstance(rec.exc, httpx.PoolTimeout) if rec.response is None else too_fast
            expect(
                rec.result.spends_budget is not free,
                "attempt %d (%s): the retry's spends_budget is %r",
                rec.plan.number,
                rec.spec.describe(),
                rec.result.spends_budget,
            )
        # An error answer's body is read for the error it may become, or for a verdict
        # it may change; a drop-in caller's answer the headers settle is not read: handed
        # over if final, closed if sent again.
        hands_over = (
            rec.spec.kind == "response"
            and rec.spec.status >= 400
            and run.scenario.returns_answers
            and headers_settle(run, rec.spec)
        )
        if rec.read_body is not None:
            expect(
                not rec.plan.reads_at_once(rec.spec.status),
                "attempt %d: ReadBody for a body the shell reads at once",
                rec.plan.number,
            )
            expect(
                not hands_over,
                "attempt %d (%s): the engine read an answer its headers settle for a drop-in",
                rec.plan.number,
                rec.spec.describe(),
            )
            # A streamed call that raises reads only a bounded part of an error body that
            # matters to the error alone; a body a verdict may rest on is read whole.
            bounded = (
                not rec.plan.read_body
                and not run.scenario.returns_answers
                and rec.spec.kind == "response"
                and rec.spec.status >= 400
                and headers_settle(run, rec.spec)
            )
            expect(
                rec.read_body.at_most == (ERROR_BODY_READ_AT_MOST if bounded else None),
                "attempt %d (%s): ReadBody reads at most %r",
                rec.plan.number,
                rec.spec.describe(),
                rec.read_body.at_most,
            )
        elif rec.spec.kind == "response" and rec.spec.status >= 400:
            expect(
                hands_over,
                "attempt %d (%s): the engine judged an error answer unread%s",
                rec.plan.number,
                rec.spec.describe(),
                "" if run.scenario.returns_answers else " for an error that carries its body",
            )


def check_cooldown_waited_per_attempt(run: Run, expect: Expect) -> None:
    """What an attempt waited out of cooldowns (``Call.cooldown_waited``, which lets it
    through a new one up to twice as long) is the longest cooldown it waited for since the
    last attempt started, and nothing once an attempt starts: a retry waits like any new
    caller."""
    waited = 0.0
    for rec in run.records:
        if not isinstance(rec, StartRec):
            continue
        if type(rec.result) is AttemptPlan:
            waited = 0.0
        elif type(rec.result) is Wait and rec.admission.cooldown > 0:
            waited = max(waited, rec.admission.cooldown)
        expect(
            rec.cooldown_waited == waited,
            "after start_attempt (%s) the call says it waited out %r s of cooldown, not %r",
            type(rec.result).__name__,
            rec.cooldown_waited,
            waited,
        )


#: Every invariant, by name, in the order they are reported.
INVARIANTS: dict[str, Callable[[Run, Expect], None]] = {
    "no_unsafe_repeat": check_no_unsafe_repeat,
    "retry_after_respected": check_retry_after_respected,
    "deadline_respected": check_deadline_respected,
    "no_retry_of_permanent": check_no_retry_of_permanent,
    "attempts_within_policy": check_attempts_within_policy,
    "single_ending": check_single_ending,
    "no_retry_after_nested_give_up": check_no_retry_after_nested_give_up,
    "effects_sane": check_effects_sane,
    "classification_matches_spec": check_classification_matches_spec,
    "cooldown_waited_per_attempt": check_cooldown_waited_per_attempt,
}


class _Expect:
    """The ``expect(condition, message, *args)`` a check calls: counts, and keeps failures
    (the message is only formatted when the condition fails)."""

    __slots__ = ("checked", "found")

    def __init__(self) -> None:
        self.checked = 0
        self.found: list[str] = []

    def __call__(self, condition: bool, message: str, *args: Any) -> None:
        self.checked += 1
        if not condition:
            self.found.append(message % args if args else message)


def check_run(run: Run, counts: collections.Counter[str] | None = None) -> dict[str, list[str]]:
    """Run every invariant on ``run``: ``{name: [violation messages]}`` for those that
    failed. ``counts`` (if given) gains, per invariant, the conditions it checked."""
    failures: dict[str, list[str]] = {}
    for name, check in INVARIANTS.items():
        expect = _Expect()
        try:
            check(run, expect)
        except Exception as exc:  # a check that cannot even read the transcript
            expect.found.append(f"the check raised {exc!r}")
        if counts is not None:
            counts[name] += expect.checked
        if expect.found:
            failures[name] = expect.found
    return failures


# -- many runs ---------------------------------------------------------------------------


def scenario_rng(seed: int, index: int) -> random.Random:
    """The generator of sequence ``index`` under ``seed``: each can be replayed alone."""
    return random.Random(f"retrysafe-transcripts:{seed}:{index}")


def coverage(run: Run) -> collections.Counter[str]:
    """How many of the situations the invariants are about this run went through."""
    seen: collections.Counter[str] = collections.Counter()
    scenario = run.scenario
    if scenario.key is not None and not scenario.key.strip():
        seen["blank Idempotency-Key"] += 1
    for index, rec in enumerate(run.records):
        if isinstance(rec, OutcomeRec):
            verdict = rec.verdict
            if verdict.kind == "retry" and _unsafe_to_repeat(run, rec):
                seen["outcome unsafe to repeat"] += 1
            if spec_meaning(run, rec)[0] == "permanent":
                seen["permanent outcome"] += 1
            if verdict.kind == "retry" and verdict.after is not None:
                following = run.records[index + 1] if index + 1 < len(run.records) else None
                if isinstance(following, AnswerRec) and type(following.result) is Wait:
                    seen["retry after a Retry-After hint"] += 1
                else:
                    seen["Retry-After hint, no retry"] += 1
            if rec.read_body is not None:
                seen["ReadBody asked"] += 1
                if rec.read_body.at_most is not None:
                    seen["streamed error body read bounded"] += 1
            if rec.body_lost:
                seen["error answer judged on its headers, its body lost"] += 1
            elif rec.response is not None and rec.read_body is None and rec.spec.status >= 400:
                if type(rec.result) is Fail:
                    seen["final answer handed over unread (drop-in)"] += 1
                elif run.scenario.returns_answers:
                    seen["answer sent again without reading its body (drop-in)"] += 1
            if rec.plan.cut_by_deadline:
                seen["attempt cut by the deadline"] += 1
            if rec.spec.nested_gave_up:
                seen["nested call gave up"] += 1
            if rec.response is not None and rec.response.status_code == 409 and run.keyed:
                seen["keyed 409"] += 1
        elif isinstance(rec, StartRec):
            admission = rec.admission
            if admission.cooldown > 0:
                seen["governor cooldown"] += 1
            if rec.cooldown_waited > 0 and rec.admission.cooldown == 0:
                seen["new cooldown let through (one waited out)"] += 1
            if admission.pacing > 0:
                seen["paced slot"] += 1
            if admission.permit is not None:
                if not admission.permit.allowed:
                    seen["permit refused"] += 1
                elif admission.permit.probe:
                    seen["probe permit"] += 1
            if (
                type(rec.result) is AttemptPlan
                and rec.after_wait
                and rec.remaining < run.policy.min_attempt_time
            ):
                seen["attempt after a wait with under min_attempt_time left"] += 1
        elif isinstance(rec, AnswerRec):
            if rec.answer.pacing > 0:
                held = type(rec.result) is Wait
                seen["retry waits for its held slot" if held else "retry's slot too late"] += 1
            if rec.answer.refusal is not None:
                seen[f"retry refused ({rec.answer.refusal})"] += 1
            elif type(rec.result) is Wait and rec.at + rec.result.seconds >= run.deadline_at:
                # Within the invariant (it does not end *past* the deadline), but the
                # attempt it was granted for can never start: noted, not a violation.
                seen["retry granted whose wait leaves no time at all"] += 1
        elif isinstance(rec, AbandonRec):
            where = "with an attempt in flight" if rec.during_attempt else "in a wait"
            seen[f"cancelled {where}"] += 1
            if any(type(e) is DeferFailure for e in rec.effects):
                seen["cancelled in a wait, its first failure left to another retry"] += 1
            elif rec.during_attempt and any(type(e) is RecordHealth for e in rec.effects):
                seen["cancelled with its retry in flight, its first failure told"] += 1
    if type(run.final) is Fail and run.final.error.reason == "attempts_exhausted":
        seen["attempts exhausted"] += 1
    return seen


@dataclasses.dataclass
class Violation:
    invariant: str
    messages: list[str]
    index: int
    scenario: Scenario


@dataclasses.dataclass
class Tally:
    """What a batch of runs did and what its checks found."""

    sequences: int = 0
    attempts: int = 0
    waits: int = 0
    retry_waits: int = 0
    checked: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    reasons: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    violation_counts: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter
    )
    coverage: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    violations: list[Violation] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    stopped_early: bool = False

    def add(self, run: Run) -> None:
        self.sequences += 1
        self.coverage.update(coverage(run))
        self.attempts += len(run.plans)
        for rec in run.records:
            if isinstance(rec, SleepRec):
                self.waits += 1
            elif isinstance(rec, AnswerRec) and type(rec.result) is Wait:
                self.retry_waits += 1
        final = run.final
        if type(final) is Succeed:
            self.outcomes["Succeed"] += 1
        elif type(final) is Fail:
            self.outcomes[f"Fail {type(final.error).__name__}"] += 1
            self.reasons[final.error.reason] += 1
        elif run.cancelled:
            self.outcomes["cancelled by the caller"] += 1
        else:
            self.outcomes["no ending"] += 1


def run_many(
    sequences: int,
    seed: int,
    *,
    time_limit: float = math.inf,
    keep: int = 20,
    start: int = 0,
) -> Tally:
    """Generate, drive and check ``sequences`` scenarios (stopping at ``time_limit``
    seconds); keep the first ``keep`` violations of each invariant."""
    tally = Tally()
    began = time.perf_counter()
    for index in range(start, start + sequences):
        if time.perf_counter() - began > time_limit:
            tally.stopped_early = True
            break
        scenario = generate(scenario_rng(seed, index))
        run = drive(scenario)
        tally.add(run)
        for name, messages in check_run(run, tally.checked).items():
            tally.violation_counts[name] += 1
            if tally.violation_counts[name] <= keep:
                tally.violations.append(Violation(name, messages, index, scenario))
    tally.seconds = time.perf_counter() - began
    return tally


# -- shrinking ---------------------------------------------------------------------------


def _fails(scenario: Scenario, invariant: str) -> bool:
    return invariant in check_run(drive(scenario))


def _candidates(scenario: Scenario) -> Iterator[Scenario]:
    """Simpler variants of ``scenario``, simplest first. Each change goes one way only
    (towards a canonical value), so shrinking cannot cycle."""
    replace = dataclasses.replace
    run = drive(scenario)
    used = len(run.outcomes)
    for field in ("outcomes", "admissions", "answers", "overshoots"):
        items: tuple[Any, ...] = getattr(scenario, field)
        if field == "outcomes" and len(items) > used:
            yield replace(scenario, outcomes=items[:used])
        for i in range(len(items)):
            yield replace(scenario, **{field: items[:i] + items[i + 1 :]})
    for field, value in (
        ("rules", ()),
        ("key", None),
        ("body", "bytes"),
        ("stream", False),
        ("breaker", False),
        ("retries_used", 0),
        ("max_attempts", None),
        ("shared_deadline", None),
        ("cancel_at", None),
        ("method", "GET"),
    ):
        if getattr(scenario, field) != value:
            yield replace(scenario, **{field: value})
    if len(scenario.rules) > 1:
        for i in range(len(scenario.rules)):
            yield replace(scenario, rules=scenario.rules[:i] + scenario.rules[i + 1 :])
    policy = dict(scenario.policy)
    simpler: dict[str, list[Any]] = {
        "attempts": list(range(1, policy["attempts"])),
        "max_retry_after": [None],
        "retry_after_jitter": [0.0],
        "min_attempt_time": [0.0],
        "backoff_base": [0.0],
        "backoff_cap": [policy["backoff_base"]],
        "deadline": [math.inf],
        "attempt_timeout": [10.0],
    }
    for name, values in simpler.items():
        for value in values:
            if policy[name] != value:
                yield replace(
                    scenario,
                    policy=tuple((k, value if k == name else v) for k, v in scenario.policy),
                )
    simple_outcome = {
        "retry_after": None,
        "quota": None,
        "replayed": False,
        "body": "empty",
        "rule_header": False,
        "during_body": False,
        "duration": 0.5,
        "headers_share": 0.5,
        "body_error": "",
        "nested_gave_up": False,
        "answered_meanwhile": False,
    }
    for i, outcome in enumerate(scenario.outcomes):
        for name, value in simple_outcome.items():
            if getattr(outcome, name) != value:
                changed = replace(outcome, **{name: value})
                yield replace(
                    scenario,
                    outcomes=(*scenario.outcomes[:i], changed, *scenario.outcomes[i + 1 :]),
                )
    for i, admission in enumerate(scenario.admissions):
        if admission != OPEN:
            yield replace(
                scenario,
                admissions=(*scenario.admissions[:i], OPEN, *scenario.admissions[i + 1 :]),
            )


def _valid(scenario: Scenario) -> bool:
    try:
        scenario.make_policy()
    except (ValueError, TypeError):
        return False
    return True


def shrink(scenario: Scenario, invariant: str, *, budget: int = 3000) -> Scenario:
    """A smaller scenario that still breaks ``invariant`` (greedy, at most ``budget`` tries)."""
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for candidate in _candidates(scenario):
            tries += 1
            if tries >= budget:
                break
            if _valid(candidate) and _fails(candidate, invariant):
                scenario = candidate
                improved = True
                break
    return scenario


# -- reading a transcript ----------------------------------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, AttemptPlan):
        cut = ", cut by deadline" if value.cut_by_deadline else ""
        body = "" if value.read_body else ", headers only"
        return f"AttemptPlan(number={value.number}, timeout={value.timeout:.6g}{cut}{body})"
    if isinstance(value, Wait):
        return f"Wait({value.seconds:.6g})"
    if isinstance(value, AskRetry):
        return f"AskRetry(wait={value.wait:.6g}, spends_budget={value.spends_budget})"
    if isinstance(value, Succeed):
        return f"Succeed({value.response.status_code})"
    if isinstance(value, Fail):
        error = value.error
        return f"Fail({type(error).__name__}, reason={error.reason!r}, retryable={error.retryable})"
    if isinstance(value, Admission):
        if value == OPEN_ADMISSION:
            return "open"
        parts = []
        if value.cooldown:
            parts.append(f"cooldown={value.cooldown:.6g}")
        if value.pacing:
            parts.append(f"pacing={value.pacing:.6g}")
        if value.permit is not None:
            permit = value.permit
            if not permit.allowed:
                parts.append(f"permit=denied(retry_at={permit.retry_at})")
            else:
                parts.append(f"permit#{permit.probe_token}{' probe' if permit.probe else ''}")
        return ", ".join(parts)
    return repr(value)


#: The outcomes of an attempt that ran out of time waiting for its answer (classify's
#: names; a connect or pool timeout is not about answers).
_TIMEOUTS = frozenset({"attempt_timeout", "write_timeout", "read_timeout", "timeout"})


def _fmt_effect(effect: Any) -> str:
    if type(effect) is EmitEvent:
        event = effect.event
        why = event.reason or event.outcome
        return f"EmitEvent({event.kind} attempt={event.attempt} {why})"
    if type(effect) is RecordHealth:
        permit = effect.permit.probe_token
        return (
            f"RecordHealth(permit#{permit}, {effect.health}, open_for={effect.open_for}, "
            f"seconds={effect.seconds})"
        )
    if type(effect) is ReleaseProbe:
        return f"ReleaseProbe(permit#{effect.permit.probe_token})"
    return repr(effect)


def describe_scenario(scenario: Scenario) -> str:
    policy = ", ".join(f"{k}={v!r}" for k, v in scenario.policy)
    rules = f" rules={list(scenario.rules)}" if scenario.rules else ""
    extras = []
    if scenario.retries_used:
        extras.append(f"retries_used={scenario.retries_used}")
    if scenario.max_attempts is not None:
        extras.append(f"max_attempts={scenario.max_attempts}")
    if scenario.shared_deadline is not None:
        extras.append(f"shared deadline={scenario.shared_deadline!r}")
    if scenario.cancel_at is not None:
        extras.append(f"cancelled at chance {scenario.cancel_at}")
    return (
        f"RetryPolicy({policy}){rules}\n"
        f"{scenario.method} {URL} key={scenario.key!r} body={scenario.body} "
        f"stream={scenario.stream} returns_answers={scenario.returns_answers} "
        f"breaker={scenario.breaker} {' '.join(extras)}".rstrip()
    )


def transcript(run: Run) -> str:
    """The run, one engine call a line, with the clock and the effects."""
    lines = [describe_scenario(run.scenario), f"deadline at t={run.deadline_at!r}"]
    for rec in run.records:
        if isinstance(rec, SleepRec):
            over = f" (+{rec.overshoot:.6g} overshoot)" if rec.overshoot else ""
            lines.append(f"  t={rec.at:<12.6g} sleep {rec.seconds:.6g}{over}")
            continue
        if isinstance(rec, StartRec):
            admission, result = _fmt(rec.admission), _fmt(rec.result)
            line = f"start_attempt({admission}) [left {rec.remaining:.6g}] -> {result}"
        elif isinstance(rec, OutcomeRec):
            reported = "attempt_raised" if rec.exc is not None else "attempt_returned"
            read = " [ReadBody asked, body read]" if rec.read_body is not None else ""
            verdict = rec.verdict
            after = f" after={verdict.after:.6g}" if verdict.after is not None else ""
            line = (
                f"{reported}({rec.spec.describe()}) sent t={rec.started:.6g}{read} "
                f"[classify: {verdict.kind} {verdict.reason} processed={verdict.processed}{after}]"
                f" -> {_fmt(rec.result)}"
            )
        elif isinstance(rec, AbandonRec):
            where = "with an attempt in flight" if rec.during_attempt else "in a wait"
            line = f"attempt_abandoned() (the caller cancelled, {where})"
        else:
            refusal = rec.answer.refusal or "granted"
            if rec.answer.pacing > 0:
                refusal += f", paced slot {rec.answer.pacing:.6g} s away"
            line = f"retry_answered({refusal}) -> {_fmt(rec.result)}"
        lines.append(f"  t={rec.at:<12.6g} {line}")
        if rec.effects:
            lines.append(
                "                   effects: " + ", ".join(_fmt_effect(e) for e in rec.effects)
            )
    if run.error is not None:
        lines.append(f"  raised {run.error!r} at {run.error_at}")
    lines.append(f"  ended t={run.ended_at!r} (elapsed {run.ended_at - run.started:.6g})")
    return "\n".join(lines)


def report_violation(violation: Violation, *, minimal: bool = True) -> str:
    """A violation, its messages, and the (shrunk) transcript that shows it."""
    scenario = shrink(violation.scenario, violation.invariant) if minimal else violation.scenario
    run = drive(scenario)
    messages = check_run(run).get(violation.invariant, violation.messages)
    head = f"VIOLATION {violation.invariant} (sequence {violation.index})"
    body = "\n".join(f"  - {m}" for m in messages)
    return f"{head}\n{body}\n{transcript(run)}\nscenario: {scenario!r}"
