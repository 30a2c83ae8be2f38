"""Test helpers for code that uses retrysafe.

:class:`FakeClock` makes backoff and deadline arithmetic instant and exact.
:func:`set_testing` (or a ``with in_testing_mode():`` block) is testing mode for a
user's own test suite: no waits, few attempts, no load protection. The pytest
plugin (``retrysafe.testing.pytest_plugin``, registered automatically) provides
the ``chaos_server``, ``chaos`` and ``retrysafe_testing`` fixtures.
"""

from retrysafe.testing.clock import FakeClock
from retrysafe.testing.mode import TestingSettings, in_testing_mode, is_testing, set_testing

__all__ = ["FakeClock", "TestingSettings", "in_testing_mode", "is_testing", "set_testing"]
