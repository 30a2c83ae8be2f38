"""Test helpers for code that uses retrysafe.

:class:`FakeClock` makes backoff and deadline arithmetic instant and exact.
:func:`set_testing` (or a ``with in_testing_mode():`` block) is testing mode for a
user's own test suite: no waits, few attempts, no load protection. The pytest
plugin (``retrysafe.testing.pytest_plugin``, registered automatically) provides
the ``chaos_server``, ``chaos`` and ``retrysafe_testing`` fixtures.

The names load on first use: the drive loop reads testing mode's switch
(:mod:`retrysafe.testing.switch`) on every call, and ``import retrysafe`` must not
bring :class:`FakeClock`'s imports, or testing mode's own, along with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retrysafe.lazy_names import lazy_module_functions

if TYPE_CHECKING:
    from retrysafe.testing.clock import FakeClock
    from retrysafe.testing.mode import TestingSettings, in_testing_mode, is_testing, set_testing

__all__ = ["FakeClock", "TestingSettings", "in_testing_mode", "is_testing", "set_testing"]

_LAZY = {
    "FakeClock": "retrysafe.testing.clock",
    "TestingSettings": "retrysafe.testing.mode",
    "in_testing_mode": "retrysafe.testing.mode",
    "is_testing": "retrysafe.testing.mode",
    "set_testing": "retrysafe.testing.mode",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_module_functions(__name__, _LAZY, globals(), __all__)
