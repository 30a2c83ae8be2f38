"""How retrysafe's log records are levelled: :class:`LogSettings`, set process-wide.

Read through :mod:`retrysafe.observe` (``from retrysafe.observe import LogSettings``),
which loads this module only when an application first names it: most never do,
and ``import retrysafe`` is lighter without the class.
"""

from __future__ import annotations

import dataclasses
import logging

from retrysafe import observe

__all__ = ["LogSettings", "configure_logging", "log_settings"]


@dataclasses.dataclass(frozen=True)
class LogSettings:
    """How retrysafe's log records are levelled.

    ``client_error_level``: the level of a final failure the caller must fix (a
    ``ClientError``: 400, 401, 404, 422...). WARNING by default; an application
    where such answers are routine (a 404 meaning "not there") can make them
    ``logging.INFO`` or ``logging.DEBUG``.
    """

    client_error_level: int = logging.WARNING

    def __post_init__(self) -> None:
        if not isinstance(self.client_error_level, int) or isinstance(
            self.client_error_level, bool
        ):
            raise TypeError(
                "LogSettings.client_error_level must be a logging level such as logging.INFO, "
                f"got {self.client_error_level!r}"
            )


_current = LogSettings()


def configure_logging(settings: LogSettings) -> None:
    """Make ``settings`` the levels of every retrysafe log record from now on.

    Process-wide, like the configuration of the ``logging`` module itself.
    """
    global _current
    if not isinstance(settings, LogSettings):
        raise TypeError(f"configure_logging takes a LogSettings, got {type(settings).__name__}")
    _current = settings
    observe._client_error_level = settings.client_error_level


def log_settings() -> LogSettings:
    """The levels in force (see :func:`configure_logging`)."""
    return _current
