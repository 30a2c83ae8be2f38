"""Terminal output: optional ANSI colour, a live one-line spinner, and aligned tables.

Plain ANSI escape codes, no dependency: colour is on only for a terminal, and never with
``--no-color``, ``NO_COLOR`` set or ``TERM=dumb``.
"""

from __future__ import annotations

import contextvars
import os
import shutil
import threading
from collections.abc import Sequence
from typing import TextIO

from retrysafe.redact import Redactor, printable

__all__ = [
    "Cell",
    "Spinner",
    "Style",
    "render_table",
    "safe_line",
    "set_command_secrets",
    "wants_color",
]

#: The secret values found on the command line (see ``retrysafe.cli.argv_secrets``).
_command_secrets: contextvars.ContextVar[Redactor | None] = contextvars.ContextVar(
    "retrysafe_command_secrets", default=None
)


def set_command_secrets(redactor: Redactor) -> None:
    """Scrub these secrets from every line :func:`safe_line` makes, in this context."""
    _command_secrets.set(redactor)


def safe_line(text: str) -> str:
    """``text`` fit for the terminal: the command line's secrets scrubbed (however they
    were encoded) and every control character escaped, so it stays one inert line."""
    redactor = _command_secrets.get()
    return printable(text if redactor is None else redactor.scrub(text))


def wants_color(stream: TextIO, *, disabled: bool = False) -> bool:
    """Whether to colour ``stream``: a terminal, and nobody asked for plain text."""
    if disabled or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (closed or odd streams are not)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def can_encode(stream: TextIO, text: str) -> bool:
    """Whether ``stream``'s encoding can write ``text`` (ASCII-only consoles exist)."""
    try:
        text.encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


#: SGR codes of the tones a :class:`Style` can paint.
_TONES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


class Style:
    """Wraps text in ANSI colour codes when enabled, and returns it unchanged otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def paint(self, text: str, tone: str) -> str:
        """``text`` in ``tone`` (a name from ``_TONES``, or ``""`` for none)."""
        if not self.enabled or not tone or not text:
            return text
        return f"\x1b[{_TONES[tone]}m{text}\x1b[0m"


class Cell:
    """One table cell: its text and the tone it is painted in."""

    __slots__ = ("text", "tone")

    def __init__(self, text: str, tone: str = "") -> None:
        self.text = text
        self.tone = tone


def render_table(header: Sequence[str], rows: Sequence[Sequence[Cell]], style: Style) -> list[str]:
    """Left-aligned columns, two spaces apart, a bold header; padded before painting so
    colour codes never upset the alignment."""
    widths = [len(title) for title in header]
    for row in rows:
        for column, cell in enumerate(row):
            widths[column] = max(widths[column], len(cell.text))

    def line(cells: Sequence[Cell]) -> str:
        padded = [
            style.paint(cell.text.ljust(width), cell.tone)
            if column < len(cells) - 1
            # The last column is not padded, so lines carry no trailing spaces.
            else style.paint(cell.text, cell.tone)
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded)

    lines = [line([Cell(title, "bold") for title in header])]
    lines.extend(line(row) for row in rows)
    return lines


class Spinner:
    """A status line on a terminal, redrawn by a background thread until stopped.

    Only for a terminal: it moves the cursor back with ``\\r`` and clears the line.
    """

    _FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    _ASCII_FRAMES = "|/-\\"
    _INTERVAL = 0.08

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._frames = self._FRAMES if can_encode(stream, self._FRAMES) else self._ASCII_FRAMES
        self._text = ""
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retrysafe-spinner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def update(self, text: str) -> None:
        """Show ``text`` from the next frame on."""
        with self._lock:
            self._text = text

    def stop(self) -> None:
        """Stop redrawing and erase the line."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._lock:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()

    def _run(self) -> None:
        frame = 0
        while not self._stopped.wait(self._INTERVAL):
            with self._lock:
                symbol = self._frames[frame % len(self._frames)]
                # A line wider than the terminal would wrap, and "\r" returns to its last row only.
                width = shutil.get_terminal_size().columns - 3
                self._stream.write(f"\r\x1b[2K{symbol} {self._text[:width]}")
                self._stream.flush()
            frame += 1
