"""Reading a user's own settings from ``module:NAME`` (the command's --policy/--governor)."""

from __future__ import annotations

import importlib
import os
import sys

from retrysafe.governor import Governor, GovernorSettings
from retrysafe.policy import RetryPolicy

__all__ = ["SettingsNotFound", "load_governor", "load_policy"]


class SettingsNotFound(ValueError):
    """``module:NAME`` does not name the settings asked for; the message says what to fix."""


def _load(spec: str, what: str) -> object:
    module_name, colon, name = spec.partition(":")
    if not colon or not module_name or not name:
        raise SettingsNotFound(
            f"{what} must be given as module:NAME (e.g. myapp.settings:{what.upper()}), "
            f"got {spec!r}"
        )
    # A module in the working directory is found, as with `python -m`.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SettingsNotFound(f"cannot import {module_name!r} for {what}: {exc}") from None
    value: object = module
    for part in name.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise SettingsNotFound(f"module {module_name!r} has no {name!r} for {what}") from None
    return value


def load_policy(spec: str) -> RetryPolicy:
    """The :class:`~retrysafe.RetryPolicy` named by ``module:NAME``."""
    value = _load(spec, "policy")
    if not isinstance(value, RetryPolicy):
        raise SettingsNotFound(f"{spec} is a {type(value).__name__}, not a retrysafe.RetryPolicy")
    return value


def load_governor(spec: str) -> GovernorSettings:
    """The :class:`~retrysafe.GovernorSettings` named by ``module:NAME`` (a ``Governor``'s
    settings are taken from it)."""
    value = _load(spec, "governor")
    if isinstance(value, Governor):
        return value.settings
    if not isinstance(value, GovernorSettings):
        raise SettingsNotFound(
            f"{spec} is a {type(value).__name__}, not retrysafe.GovernorSettings or a Governor"
        )
    return value
