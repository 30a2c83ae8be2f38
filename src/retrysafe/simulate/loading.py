"""Reading a user's own settings from ``module:NAME`` (the command's --policy/--governor)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback

from retrysafe.governor import Governor, GovernorSettings
from retrysafe.policy import RetryPolicy

__all__ = ["SettingsNotFound", "load_governor", "load_policy"]


class SettingsNotFound(ValueError):
    """``module:NAME`` does not name the settings asked for, or its module fails to load;
    the message says what to fix."""


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
    except Exception as exc:
        # The module is found but fails as it runs (a syntax error, a RetryPolicy(...) that
        # refuses its values): the user's own code, so say where and what, not a traceback.
        raise SettingsNotFound(
            f"cannot load {module_name!r} for {what}: {_where(exc, module_name)}"
            f"{type(exc).__name__}: {_problem(exc)}"
        ) from None
    value: object = module
    for part in name.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise SettingsNotFound(f"module {module_name!r} has no {name!r} for {what}") from None
    return value


def _where(exc: Exception, module_name: str) -> str:
    """``"<file>, line <n>: "`` for the line of the user's module that failed, or ``""``.

    A syntax error names its own file and line; any other error is placed at the last line
    of the module's own file that the traceback passes through (the call that raised, not
    the library code it called).
    """
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}, line {exc.lineno}: " if exc.lineno else f"{exc.filename}: "
    try:
        spec = importlib.util.find_spec(module_name)
    except Exception:  # a parent package that fails too: no file to name
        return ""
    origin = spec.origin if spec is not None else None
    if origin is None:
        return ""
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename == origin and frame.lineno is not None
    ]
    return f"{origin}, line {lines[-1]}: " if lines else f"{origin}: "


def _problem(exc: Exception) -> str:
    """The error's message on one line (a syntax error's without its file and line)."""
    text = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return " ".join(text.split()) or "(no message)"


def load_policy(spec: str) -> RetryPolicy:
    """The :class:`~retrysafe.RetryPolicy` named by ``module:NAME``."""
    value = _load(spec, "policy")
    if not isinstance(value, RetryPolicy):
        raise SettingsNotFound(
            f"{spec} is of type {type(value).__name__}, not a retrysafe.RetryPolicy"
        )
    return value


def load_governor(spec: str) -> GovernorSettings:
    """The :class:`~retrysafe.GovernorSettings` named by ``module:NAME`` (a ``Governor``'s
    settings are taken from it)."""
    value = _load(spec, "governor")
    if isinstance(value, Governor):
        return value.settings
    if not isinstance(value, GovernorSettings):
        raise SettingsNotFound(
            f"{spec} is of type {type(value).__name__}, "
            "not retrysafe.GovernorSettings or a Governor"
        )
    return value
