"""The testing-mode switch itself: what the drive loop reads on every call.

Kept apart from :mod:`retrysafe.testing.mode` (which sets it) so that
``import retrysafe`` loads only this module attribute, not the settings class and
the functions that switch it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retrysafe.testing.mode import TestingSettings

__all__ = ["active"]

#: The settings in force, or None when testing mode is off (see retrysafe.testing.mode).
active: TestingSettings | None = None
