"""A :class:`~retrysafe.drive.Drive` for one fresh GET, on a fake clock and a governor of
its own: for tests that step a drive by hand, as a shell would."""

from __future__ import annotations

from typing import Any

import httpx

from retrysafe import Governor, RetryPolicy
from retrysafe.call_options import OPTIONS_EXTENSION, CallOptions
from retrysafe.drive import Drive
from retrysafe.shell_settings import ShellSettings
from retrysafe.testing import FakeClock

__all__ = ["fresh_drive", "shell_settings"]


def shell_settings(policy: RetryPolicy, *, clock: FakeClock, governor: Governor) -> ShellSettings:
    """A shell's settings for drives under ``policy``, on ``clock``, sharing ``governor``:
    no hooks, no dependency named, errors handed back rather than raised."""
    return ShellSettings.build(
        policy=policy,
        clock=clock,
        governor=governor,
        hooks=(),
        dependency=None,
        raise_errors=False,
        deadline_header=None,
    )


def fresh_drive(policy: RetryPolicy | None = None, **options: Any) -> Drive:
    """A drive for ``GET https://api.example.com/`` under ``policy`` (the default one if
    None), with the call's own ``options`` (``CallOptions``'s fields) if any."""
    clock = FakeClock()
    settings = shell_settings(policy or RetryPolicy(), clock=clock, governor=Governor(clock=clock))
    request = httpx.Request("GET", "https://api.example.com/")
    if options:
        request.extensions[OPTIONS_EXTENSION] = CallOptions(**options)
    return Drive(settings, request)
