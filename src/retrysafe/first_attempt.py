"""A fresh call's first attempt, decided without building a :class:`~retrysafe.engine.Call`.

Most calls are *fresh*: not a later hop of a redirect chain, not inside a
deadline scope, not hedging, and with nobody listening for routine events. Most
of them succeed at once while their dependency is healthy. For such a call the
engine's decisions, up to a success on the first attempt, depend on the policy
and the response alone:

- the first attempt's plan: ``min(attempt_timeout, time left)`` seconds, the body
  read within the attempt unless the caller streams it;
- a response below 400, under a policy with no classification rules, that does
  not announce a used-up rate limit, is a success at once;
- the report: one attempt, no waits.

:class:`~retrysafe.drive.Drive` asks here first and builds the ``Call`` only when
an answer is not one of these; the ``Call`` then adopts the attempt in flight
(:meth:`~retrysafe.engine.Call.adopt_attempt`) and decides from there, as if it
had planned the attempt itself. That both give the same plan, the same success
and the same report is a tested property (``tests/test_first_attempt.py``).

A call is made for every request, so this is the path that sets retrysafe's
per-call cost: it builds three small values and reads the clock three times (the call's
start, the attempt's, and its end).
"""

from __future__ import annotations

from typing import Final

import httpx

from retrysafe.attempt_plan import plan_attempt
from retrysafe.decisions import AttemptPlan, CallReport, Succeed
from retrysafe.errors import AttemptRecord
from retrysafe.hints import announced_limit
from retrysafe.policy import RetryPolicy
from retrysafe.request_facts import idempotency_key_of

__all__ = ["first_plan", "first_success", "settled_at_once"]

_tuple: Final = tuple.__new__


def first_plan(policy: RetryPolicy, *, stream: bool, remaining: float) -> AttemptPlan:
    """The plan of a fresh call's first attempt, ``remaining`` seconds (> 0) before its
    deadline: as :meth:`~retrysafe.engine.Call.start_attempt` plans it."""
    return plan_attempt(1, policy.attempt_timeout, remaining, not stream)


def settled_at_once(policy: RetryPolicy, response: httpx.Response) -> bool:
    """Whether ``response`` ends the call as a success with nothing else to do.

    A status below 400 with no rules to consult is a success; a response that
    announces a used-up rate limit also starts a cooldown, so it is left to the Call.
    """
    return response.status_code < 400 and not policy.rules and announced_limit(response) is None


def first_success(
    request: httpx.Request,
    response: httpx.Response,
    plan: AttemptPlan,
    *,
    dependency: str,
    call_started: float,
    attempt_started: float,
    now: float,
) -> Succeed:
    """End the call with ``response``: its report (one attempt, which started at
    ``attempt_started`` in a call that started at ``call_started``, both ended ``now``,
    on the clock's monotonic seconds) rides on the response, as a Call's would."""
    # Built for every call, so built as the tuples they are: every field, in order (a
    # named tuple's own constructor is a Python function around this same call).
    record = _tuple(
        AttemptRecord,
        # number, outcome, status, exception, started, elapsed, timeout, wait
        (
            1,
            "success",
            response.status_code,
            None,
            attempt_started - call_started,
            now - attempt_started,
            plan.timeout,
            0.0,
        ),
    )
    report = _tuple(
        CallReport,
        # attempts, waits, elapsed, idempotency_key, dependency, history, error, hedges, winner
        (
            1,
            (),
            now - call_started,
            idempotency_key_of(request),
            dependency,
            (record,),
            None,
            0,
            None,
        ),
    )
    response.extensions["retrysafe"] = report
    return _tuple(Succeed, (response, report))
