"""Testing mode: a switch that keeps a test suite using retrysafe from ever sleeping.

While it is on, in this process: every wait (backoff, ``Retry-After``, a
cooldown) is skipped, each call makes at most ``attempts`` attempts, and load
protection (budget, breaker, cooldowns, pacing) is left out, so one test's
failures never hold back the next. Every other decision (what is retried, what
is safe to repeat, which error is raised) stays as in production. The drive loop
reads the switch (:data:`retrysafe.testing.switch.active`) once per call (and once
per wait), so it costs a module attribute read when off.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from retrysafe.testing import switch

__all__ = ["TestingSettings", "is_testing", "in_testing_mode", "set_testing"]


@dataclasses.dataclass(frozen=True)
class TestingSettings:
    """What testing mode does: ``attempts`` is the most attempts any call makes."""

    __test__ = False  # not a pytest test class, whatever its name says

    attempts: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise TypeError(f"testing attempts must be an int, got {self.attempts!r}")
        if self.attempts < 1:
            raise ValueError(
                f"testing attempts must be >= 1 (1: no retries), got {self.attempts!r}"
            )


def set_testing(on: bool, *, attempts: int = 1) -> None:
    """Switch testing mode on (waits instant, at most ``attempts`` attempts a call,
    no load protection) or off, for the whole process.

    ``attempts=1`` (the default) makes every call a single attempt: a test sees the
    first failure's error at once. ``attempts=3`` lets a test check that a retry
    happens, still without waiting.
    """
    if not isinstance(on, bool):
        raise TypeError(f"set_testing takes True or False, got {on!r}")
    switch.active = TestingSettings(attempts=attempts) if on else None


def is_testing() -> bool:
    """Whether testing mode is on."""
    return switch.active is not None


class _Block:
    """One ``in_testing_mode`` block still running: its settings, and what to put back
    when it ends (what it replaced, or what a block it outlived had replaced)."""

    __slots__ = ("restores", "settings")

    def __init__(self, settings: TestingSettings, restores: TestingSettings | None) -> None:
        self.settings = settings
        self.restores = restores


#: The ``in_testing_mode`` blocks still running, in the order they began.
_blocks: list[_Block] = []


@contextlib.contextmanager
def in_testing_mode(*, attempts: int = 1) -> Iterator[None]:
    """Testing mode inside the ``with`` block only; what was in force before comes back.

    Blocks may overlap without nesting (tasks of one task group, each in a block): a
    block that ends while a later one still runs leaves that one in force, and hands
    it what it had replaced, so the last to end restores what came before them all.
    """
    block = _Block(TestingSettings(attempts=attempts), switch.active)
    _blocks.append(block)
    switch.active = block.settings
    try:
        yield
    finally:
        _blocks.remove(block)
        if any(switch.active is other.settings for other in _blocks):
            # A block that began inside this one runs on: it restores what this replaced.
            for other in _blocks:
                if other.restores is block.settings:
                    other.restores = block.restores
        else:
            switch.active = block.restores


def __getattr__(name: str) -> TestingSettings | None:
    """``mode.active``, read where it used to live: the switch now lives in
    :mod:`retrysafe.testing.switch` (set it with :func:`set_testing`)."""
    if name == "active":
        return switch.active
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
