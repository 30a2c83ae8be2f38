"""Reproducible randomness: the same seed, key and attempt always draw the same number.

The chaos server never uses a global random generator, so a failing test replays
exactly: ``/flaky`` and weighted ``/status`` lists depend only on their inputs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["draw", "weighted_choice"]


def draw(seed: str, key: str, attempt: int) -> float:
    """A number in ``[0, 1)`` fixed by ``(seed, key, attempt)``, evenly spread."""
    digest = hashlib.sha256(f"{seed}\x00{key}\x00{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def weighted_choice(options: Sequence[tuple[int, float]], point: float) -> int:
    """The option whose share of the total weight contains ``point`` (in ``[0, 1)``).

    ``options`` are ``(value, weight)`` pairs with non-negative weights and a positive
    total; the result is deterministic for a given ``point``.
    """
    total = sum(weight for _, weight in options)
    if total <= 0:
        raise ValueError("weights must add up to more than zero")
    threshold = point * total
    running = 0.0
    for value, weight in options:
        running += weight
        if threshold < running:
            return value
    return next(value for value, weight in reversed(options) if weight > 0)
