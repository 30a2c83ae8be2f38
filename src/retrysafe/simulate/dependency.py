"""A simulated dependency that fails on a schedule: what ``brownout``, ``outage`` and
``layers`` call.

Each attempt is answered after ``|Normal(latency, latency_sd)|`` seconds: ``200``, or
when it fails (with the probability ``failing(now)`` gives), a ``503`` (``fault="503"``)
or no answer at all (``fault="timeout"``: the attempt runs into its timeout).
It counts every attempt that reaches it, and when.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal

import httpx

from retrysafe.decisions import AttemptPlan
from retrysafe.simulate.events import EventLoop
from retrysafe.simulate.shell import Reply, SimCall

__all__ = ["FAULTS", "Fault", "FlakyDependency"]

Fault = Literal["503", "timeout"]
FAULTS: tuple[Fault, ...] = ("503", "timeout")


class FlakyDependency:
    """The server side: answers attempts, failing each with probability ``failing(now)``."""

    def __init__(
        self,
        loop: EventLoop,
        rng: random.Random,
        *,
        failing: Callable[[float], float],
        latency: float,
        latency_sd: float,
        fault: Fault = "503",
    ) -> None:
        self.loop = loop
        self.rng = rng
        self.failing = failing
        self.latency = latency
        self.latency_sd = latency_sd
        self.fault = fault
        #: When each attempt reached the dependency (virtual seconds).
        self.arrivals: list[float] = []

    @property
    def attempts(self) -> int:
        """Attempts that reached the dependency."""
        return len(self.arrivals)

    def send(self, call: SimCall, plan: AttemptPlan, reply: Reply) -> None:
        now = self.loop.now
        self.arrivals.append(now)
        fails = self.rng.random() < self.failing(now)
        if fails and self.fault == "timeout":
            return  # it never answers; the caller's attempt timeout ends the attempt
        response = httpx.Response(503 if fails else 200, request=call.request)
        delay = abs(self.rng.gauss(self.latency, self.latency_sd))
        self.loop.after(delay, reply, response)
