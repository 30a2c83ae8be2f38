"""Backoff formulas retrysafe does NOT use, for comparison in the ``contention`` scenario.

These are the four strategies of the AWS Architecture Blog's "Exponential Backoff
and Jitter" besides full jitter, written out as formulas only, so that the
simulator can set them beside retrysafe. Full jitter is here too, but only to
check the simulator against the engine: the ``full`` strategy of the scenario is
driven through retrysafe's own engine, whose backoff is full jitter.

Every formula uses retrysafe's numbering: ``retries`` is the number of retries
made so far (0 before the first), and the exponential ceiling is
``min(cap, base * 2 ** retries)``; each strategy draws at most one random number
per wait, from the client's own stream.
"""

from __future__ import annotations

import random
from typing import Literal

__all__ = ["STRATEGIES", "FORMULA_LABELS", "Strategy", "formula_wait"]

Strategy = Literal["none", "exponential", "full", "equal", "decorrelated"]
#: The strategies of the contention scenario, in the order tables show them.
STRATEGIES: tuple[Strategy, ...] = ("none", "exponential", "full", "equal", "decorrelated")

#: What each formula computes (``c = min(cap, base * 2 ** retries)``).
FORMULA_LABELS: dict[Strategy, str] = {
    "none": "no wait at all (formula, not retrysafe)",
    "exponential": "c, no jitter (formula, not retrysafe)",
    "full": "random(0, c): retrysafe's engine and RetryPolicy",
    "equal": "c/2 + random(0, c/2) (formula, not retrysafe)",
    "decorrelated": "min(cap, random(base, 3 * previous wait)) (formula, not retrysafe)",
}


def formula_wait(
    strategy: Strategy,
    retries: int,
    previous: float,
    base: float,
    cap: float,
    rng: random.Random,
) -> float:
    """The wait before retry ``retries + 1`` under ``strategy`` (a comparison formula).

    ``previous`` is the last wait (``base`` before the first), used only by
    decorrelated jitter.
    """
    if strategy == "none":
        return 0.0
    if strategy == "decorrelated":
        return min(cap, base + rng.random() * (previous * 3.0 - base))
    ceiling = min(cap, base * 2.0 ** min(retries, 1023))
    if strategy == "exponential":
        return ceiling
    if strategy == "equal":
        return ceiling / 2.0 + rng.random() * ceiling / 2.0
    return rng.random() * ceiling  # full
