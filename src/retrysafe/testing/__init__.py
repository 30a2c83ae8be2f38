"""Test helpers for code that uses retrysafe.

:class:`FakeClock` makes backoff and deadline arithmetic instant and exact. The
pytest plugin (``retrysafe.testing.pytest_plugin``, registered automatically)
provides the ``chaos_server`` and ``chaos`` fixtures.
"""

from retrysafe.testing.clock import FakeClock

__all__ = ["FakeClock"]
