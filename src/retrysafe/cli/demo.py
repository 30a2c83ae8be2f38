"""The demo: failures an API client really meets, each with what retrysafe should do about it.

The cases are data (:data:`CASES`, :class:`DemoCase`). :func:`run_demo` starts a chaos
server on loopback, sends each case through :class:`retrysafe.Client`, and compares what
happened with what the case expects. A case whose behaviour differs fails; nothing here
prints (see :mod:`retrysafe.cli.demo_output`).

The first seven cases are the failures of the article the project grew from (a missing key,
a misspelled parameter, an unknown API, a refusing site, a POST timeout, a rate limit, a bad
gateway); the rest are the ones a careful client must also get right.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import httpx

from retrysafe import (
    ApiError,
    AttemptRecord,
    BadResponse,
    CallReport,
    Client,
    ClientError,
    EventHook,
    QuotaExhausted,
    RetryAfterTooLong,
    RetryEvent,
    RetryPolicy,
    ServerError,
    TransportError,
    Verdict,
)
from retrysafe.chaos import ChaosServer
from retrysafe.cli.demo_checks import (
    CheckResult,
    Evidence,
    Expected,
    FailsFast,
    Happened,
    LedgerEffects,
    RetryAfterIs,
    SameIdempotencyKey,
    ServerSaw,
    WaitedAtLeast,
)

__all__ = [
    "CASES",
    "DEMO_POLICY",
    "CaseResult",
    "DemoCase",
    "DemoProgress",
    "DemoReport",
    "error_in_body",
    "run_case",
    "run_demo",
    "website_refused",
]


# -- the policy every case uses: the example to copy ---------------------------------------

_WEBSITE_REFUSED = re.compile(r"website returned HTTP 4\d\d", re.IGNORECASE)


def website_refused(response: httpx.Response) -> Verdict | None:
    """A scraper's 503 saying the *target site* refused (HTTP 4xx) is about that site: final.

    The site will refuse again, so retrying only adds delay; the default treats 503 as
    "try later", which is right for the API's own outages.
    """
    if response.status_code == 503 and _WEBSITE_REFUSED.search(response.text):
        return Verdict.permanent("target_site_refused")
    return None


def error_in_body(response: httpx.Response) -> Verdict | None:
    """A 2xx whose JSON says ``"status": "error"`` is a failure the status code hides."""
    if not response.is_success:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    if isinstance(body, dict) and body.get("status") == "error":
        return Verdict.permanent("error_in_body")
    return None


#: Short timeouts and waits so the whole demo takes a few seconds; rules for the two
#: failures that a status code alone misreads.
DEMO_POLICY = RetryPolicy(
    attempts=4,
    attempt_timeout=1.0,
    deadline=10.0,
    backoff_base=0.3,
    backoff_cap=2.0,
    retry_after_jitter=0.05,
    rules=(website_refused, error_in_body),
)


@dataclasses.dataclass(frozen=True)
class DemoCase:
    """One failure to reproduce: the request to send and what retrysafe should do.

    ``path`` is on the chaos server; ``{key}`` in it (and the ``key`` parameter added to
    every URL) gives the case its own server state.
    """

    name: str
    shows: str
    method: str
    path: str
    expected: Expected
    params: Mapping[str, str | int] = dataclasses.field(default_factory=dict)
    json: Any = None
    idempotency_key: bool = False
    policy: RetryPolicy = DEMO_POLICY


CASES: tuple[DemoCase, ...] = (
    DemoCase(
        name="no API key",
        shows="401 says the key is missing; sending it again without one changes nothing.",
        method="GET",
        path="/auth",
        params={"email": "jane@example.com"},
        expected=Expected(ClientError, attempts=1, reason="unauthorized"),
    ),
    DemoCase(
        name="misspelled parameter (emial=)",
        shows="400 for a request that is wrong as written: fix it, do not repeat it.",
        method="GET",
        path="/validate",
        params={"require": "email", "emial": "jane@example.com"},
        expected=Expected(ClientError, attempts=1, reason="bad_request"),
    ),
    DemoCase(
        name="unknown API (emailvalidatr)",
        shows="404 for an API name that does not exist: no retry will make it exist.",
        method="GET",
        path="/emailvalidatr",
        params={"email": "jane@example.com"},
        expected=Expected(ClientError, attempts=1, reason="not_found"),
    ),
    DemoCase(
        name="target site refuses (503)",
        shows="A 503 reporting that the scraped site said 403: the rule website_refused "
        "makes it final instead of retrying a stable refusal.",
        method="GET",
        path="/refused-site",
        params={"url": "https://shop.example/"},
        expected=Expected(ServerError, attempts=1, reason="target_site_refused"),
    ),
    DemoCase(
        name="POST times out (1 s)",
        shows="A render that takes 3 s, cut at 1 s: the server may have done the work, so a "
        "POST without an idempotency key is sent once and never repeated.",
        method="POST",
        path="/delay",
        params={"ms": 3000},
        json={"html": "<h1>Invoice 1042</h1>"},
        expected=Expected(
            TransportError,
            attempts=1,
            reason="unsafe_to_repeat",
            sent="maybe",
            checks=(ServerSaw(1),),
        ),
    ),
    DemoCase(
        name="rate limited, Retry-After: 1",
        shows="429 'too fast' with Retry-After: 1: wait what the server asked, then succeed.",
        method="GET",
        path="/fail/{key}",
        params={"times": 1, "status": 429, "retry_after": 1},
        expected=Expected(None, attempts=2, checks=(WaitedAtLeast(1.0),)),
    ),
    DemoCase(
        name="upstream hiccup (502)",
        shows="A passing 502 on a GET: back off briefly with jitter, then succeed.",
        method="GET",
        path="/fail/{key}",
        params={"times": 1, "status": 502},
        expected=Expected(None, attempts=2),
    ),
    DemoCase(
        name="truncated body on GET",
        shows="The body stops at 100 of 1000 bytes: read inside the attempt, so a GET is "
        "retried rather than handed back half a response.",
        method="GET",
        path="/sequence/{key}",
        params={"steps": "truncate,200"},
        expected=Expected(None, attempts=2),
    ),
    DemoCase(
        name="POST reply lost after commit",
        shows="The order was stored, then the connection reset: retried with the same "
        "Idempotency-Key, the server replays its stored reply and charges once.",
        method="POST",
        path="/idempotent/orders",
        params={"fail_after_commit": "reset"},
        json={"sku": "book-42", "quantity": 1},
        idempotency_key=True,
        expected=Expected(
            None,
            attempts=2,
            checks=(SameIdempotencyKey(), LedgerEffects("orders", 1), ServerSaw(2)),
        ),
    ),
    DemoCase(
        name="Retry-After beyond deadline",
        shows="429 asking for 120 s with 10 s left: fail at once with the hint, instead of "
        "sleeping into the deadline or retrying early.",
        method="GET",
        path="/retry-after",
        params={"seconds": 120},
        expected=Expected(
            RetryAfterTooLong,
            attempts=1,
            reason="retry_after_too_long",
            checks=(RetryAfterIs(120.0), FailsFast(2.0)),
        ),
    ),
    DemoCase(
        name="out of credits (429)",
        shows="429 with x-api-remaining-credits: 0 means no credits until renewal, not "
        "'too fast': not retried.",
        method="GET",
        path="/quota",
        expected=Expected(QuotaExhausted, attempts=1, reason="quota_exhausted"),
    ),
    DemoCase(
        name='200 that says "error"',
        shows='A 200 whose body is {"status": "error"}: the rule error_in_body turns it '
        "into an error instead of a silent success.",
        method="GET",
        path="/ok-error",
        expected=Expected(BadResponse, attempts=1, reason="error_in_body"),
    ),
)


# -- running ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """A case, what happened when it ran, and how that compares with what it expected."""

    case: DemoCase
    url: str
    happened: Happened
    checks: tuple[CheckResult, ...]
    mismatches: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether the case behaved exactly as expected."""
        return not self.mismatches


@dataclasses.dataclass(frozen=True)
class DemoReport:
    """Every case's result, the server they ran against, and the wall time of the run."""

    results: tuple[CaseResult, ...]
    server_url: str
    elapsed: float

    @property
    def ok(self) -> bool:
        return all(result.ok for result in self.results)


class DemoProgress(Protocol):
    """Told what the runner is doing, so a front end can show it live."""

    def case_started(self, number: int, total: int, case: DemoCase) -> None: ...

    def retrying(self, case: DemoCase, event: RetryEvent) -> None: ...

    def case_finished(self, number: int, total: int, result: CaseResult) -> None: ...


def _retried_after(history: tuple[AttemptRecord, ...]) -> tuple[str, ...]:
    """What each attempt that was followed by a retry got: ``HTTP 429``, ``truncated_body``."""
    return tuple(
        record.outcome if record.status is None else f"HTTP {record.status}"
        for record in history[:-1]
    )


def _happened_from_response(response: httpx.Response) -> Happened:
    report = response.extensions["retrysafe"]
    assert isinstance(report, CallReport)
    return Happened(
        error=None,
        status=response.status_code,
        reason="success",
        attempts=report.attempts,
        waits=report.waits,
        elapsed=report.elapsed,
        retried_after=_retried_after(report.history),
        idempotency_key=report.idempotency_key,
    )


def _happened_from_error(error: ApiError) -> Happened:
    report = None if error.response is None else error.response.extensions.get("retrysafe")
    return Happened(
        error=type(error).__name__,
        status=error.status,
        reason=error.reason,
        attempts=error.attempts,
        waits=tuple(record.wait for record in error.history[:-1]),
        elapsed=error.elapsed,
        retried_after=_retried_after(error.history),
        sent=getattr(error, "sent", None),
        retry_after=getattr(error, "retry_after", None),
        idempotency_key=report.idempotency_key if isinstance(report, CallReport) else None,
        message=str(error),
    )


def _call(case: DemoCase, url: str, hooks: Sequence[EventHook]) -> Happened:
    """Send the case's request through retrysafe and describe what came of it."""
    # timeout=None: the policy's attempt_timeout alone bounds each attempt.
    # trust_env=False: its own loopback server is reached directly, whatever proxy the
    # environment names (HTTP_PROXY and the like would send these requests away).
    with Client(policy=case.policy, hooks=hooks, timeout=None, trust_env=False) as client:
        try:
            response = client.request(
                case.method,
                url,
                json=case.json,
                idempotency_key=True if case.idempotency_key else None,
            )
        except ApiError as error:
            return _happened_from_error(error)
    return _happened_from_response(response)


def run_case(
    server: ChaosServer, case: DemoCase, progress: DemoProgress | None = None
) -> CaseResult:
    """Run one case against ``server`` under a fresh state key, and judge it."""
    chaos = server.for_key(f"demo-{uuid.uuid4().hex[:12]}")
    url = chaos.url(case.path, **case.params)

    def report_retry(event: RetryEvent) -> None:
        if progress is not None and event.kind == "retry":
            progress.retrying(case, event)

    happened = _call(case, url, [report_retry])
    evidence = Evidence(happened, chaos)
    checks = tuple(check.evaluate(evidence) for check in case.expected.checks)
    mismatches = case.expected.mismatches(happened)
    mismatches += [
        f"check failed: {result.check} ({result.seen})" for result in checks if not result.ok
    ]
    return CaseResult(case, url, happened, checks, tuple(mismatches))


def run_demo(
    cases: Sequence[DemoCase] = CASES,
    *,
    progress: DemoProgress | None = None,
    host: str = "127.0.0.1",
) -> DemoReport:
    """Start a chaos server on a free port of ``host``, run every case, stop the server."""
    started = time.monotonic()
    results: list[CaseResult] = []
    with ChaosServer(host) as server:
        for number, case in enumerate(cases, start=1):
            if progress is not None:
                progress.case_started(number, len(cases), case)
            result = run_case(server, case, progress)
            results.append(result)
            if progress is not None:
                progress.case_finished(number, len(cases), result)
        server_url = server.url
    return DemoReport(tuple(results), server_url, time.monotonic() - started)
