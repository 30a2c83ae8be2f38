"""Checks for frozen settings values: a bad field raises ValueError naming it and the rule.

``RetryPolicy`` and the governor settings validate themselves on construction
with these, so every message reads the same way: ``Owner.field must be ...``.
"""

from __future__ import annotations

import math

__all__ = ["check", "check_number", "check_whole"]


def check(condition: bool, owner: str, field: str, rule: str) -> None:
    """Raise ``ValueError("<owner>.<field> <rule>")`` unless ``condition`` holds."""
    if not condition:
        raise ValueError(f"{owner}.{field} {rule}")


def check_whole(owner: str, field: str, value: object, *, at_most: int) -> None:
    """A whole number (an int, not a bool) from 1 to ``at_most``."""
    check(
        isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= at_most,
        owner,
        field,
        f"must be a whole number from 1 to {at_most}, got {value!r}",
    )


def check_number(
    owner: str,
    field: str,
    value: object,
    *,
    positive: bool,
    infinite_ok: bool,
    unit: str = "",
) -> None:
    """A real number (not a bool, not NaN), finite unless allowed, > 0 or >= 0.

    ``unit`` (e.g. ``" seconds"``) is named in the messages.
    """
    kind = f"a number of{unit}" if unit else "a number"
    check(
        isinstance(value, (int, float)) and not isinstance(value, bool),
        owner,
        field,
        f"must be {kind}, got {value!r}",
    )
    assert isinstance(value, (int, float))
    check(not math.isnan(value), owner, field, f"must be {kind}, got nan")
    check(infinite_ok or math.isfinite(value), owner, field, f"must be finite, got {value!r}")
    bound = "> 0" if positive else ">= 0"
    check(
        value > 0 if positive else value >= 0, owner, field, f"must be {bound}{unit}, got {value!r}"
    )
