"""What the engine tells a shell to do next, and what a finished call reports.

A shell drives a :class:`~retrysafe.engine.Call` and gets back one of these
plain values: an :class:`AttemptPlan` to send, a :class:`Wait` to sleep, a
:class:`Succeed` to return or a :class:`Fail` to give up with.
"""

from __future__ import annotations

import dataclasses

import httpx

from retrysafe.errors import ApiError, AttemptRecord

__all__ = ["AttemptPlan", "CallReport", "Decision", "Fail", "Succeed", "Wait"]


@dataclasses.dataclass(frozen=True)
class CallReport:
    """What a call did, attached as ``response.extensions["retrysafe"]``."""

    attempts: int
    waits: tuple[float, ...]
    elapsed: float
    idempotency_key: str | None
    dependency: str
    history: tuple[AttemptRecord, ...]
    error: ApiError | None = None


@dataclasses.dataclass(frozen=True)
class AttemptPlan:
    """Start attempt ``number`` (1-based) and give it at most ``timeout`` seconds."""

    number: int
    timeout: float
    cut_by_deadline: bool


@dataclasses.dataclass(frozen=True)
class Succeed:
    """Return ``response``: the call succeeded (or reached a final, stored answer)."""

    response: httpx.Response
    report: CallReport


@dataclasses.dataclass(frozen=True)
class Wait:
    """Sleep ``seconds``, then ask for the next attempt."""

    seconds: float


@dataclasses.dataclass(frozen=True)
class Fail:
    """Give up with ``error``; ``response`` is the last response, ``cause`` the last exception."""

    error: ApiError
    response: httpx.Response | None
    cause: Exception | None
    report: CallReport


Decision = Succeed | Wait | Fail
