"""Test helpers for code that uses retrysafe.

:class:`FakeClock` makes backoff and deadline arithmetic instant and exact.
:func:`set_testing` (or the ``with testing():`` block) is testing mode for a
user's own test suite: no waits, few attempts, no load protection. The pytest
plugin (``retrysafe.testing.pytest_plugin``, registered automatically) provides
the ``chaos_server``, ``chaos`` and ``retrysafe_testing`` fixtures.
"""

from retrysafe.testing.clock import FakeClock
from retrysafe.testing.mode import TestingSettings, is_testing, set_testing, testing

__all__ = ["FakeClock", "TestingSettings", "is_testing", "set_testing", "testing"]
