"""Per-dependency latency, learned from attempts, for hedging on a percentile.

``RetryPolicy(hedge_after="p95")`` sends a hedged copy once the first has taken
longer than 95 % of the dependency's recent attempts did. This module keeps
those recent attempts (a window of the last :data:`WINDOW` per dependency) and
answers the question "after how long should a copy go?":

- until :data:`MIN_SAMPLES` attempts have been seen, the answer is
  :data:`WARMUP_DELAY`: nothing is known yet, so only a surely slow attempt is
  hedged (a cold start must not hedge everything on a guess);
- afterwards the percentile of the window, never below :data:`FLOOR`, so a
  dependency answering in a millisecond is not sent a copy on every jitter.

Samples are the time to a usable answer of winning attempts, and for a copy
cancelled because another won, the time it had taken so far: a lower bound of
its latency, which keeps the slow tail in the window (leaving losers out would
shrink the percentile and hedge more and more).

Only hedging calls record or read latency: a call without ``hedge_after``
never touches this module.
"""

from __future__ import annotations

import functools
import math
import re
import threading

__all__ = [
    "FLOOR",
    "MAX_WINDOWS",
    "MIN_SAMPLES",
    "WARMUP_DELAY",
    "WINDOW",
    "LatencyBook",
    "LatencyWindow",
    "parse_percentile",
]

#: Recent attempts kept per dependency.
WINDOW = 1000
#: Dependencies a book keeps windows for at most.
MAX_WINDOWS = 1024
#: Attempts seen before a percentile is trusted.
MIN_SAMPLES = 20
#: The hedge delay until then (seconds): slow for nearly any HTTP API.
WARMUP_DELAY = 0.5
#: A percentile delay is never shorter than this (seconds).
FLOOR = 0.005
#: The cached percentile is worked out again after this many new samples.
_REFRESH_EVERY = 25

_PERCENTILE = r"p(\d{1,3}(?:\.\d{1,3})?)"  # (compiled on first use, by re's cache)


@functools.lru_cache(maxsize=64)
def parse_percentile(text: str) -> float:
    """``"p95"`` -> ``95.0``; ``"p99.9"`` -> ``99.9``. Raises ValueError saying what to write.

    The percentile must be from 50 to below 100: hedging before the median would
    send a second copy for most calls.
    """
    match = re.fullmatch(_PERCENTILE, text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"must be seconds (a number) or a percentile such as 'p95' or 'p99.9', got {text!r}"
        )
    value = float(match.group(1))
    if not 50.0 <= value < 100.0:
        raise ValueError(
            f"must be a percentile from 'p50' to 'p99.999' (hedging before the median "
            f"would send a copy for most calls), got {text!r}"
        )
    return value


class LatencyWindow:
    """The last :data:`WINDOW` latencies of one dependency; thread-safe.

    Percentiles are read far more often than the window changes enough to move
    them, so each asked-for percentile is cached and worked out again (one sort
    of at most :data:`WINDOW` floats) only after :data:`_REFRESH_EVERY` new samples.
    """

    def __init__(self, size: int = WINDOW) -> None:
        self._size = size
        self._samples: list[float] = []
        self._next = 0
        self._seen = 0
        self._lock = threading.Lock()
        self._cache: dict[float, tuple[int, float]] = {}

    @property
    def seen(self) -> int:
        """Samples recorded so far (including those the window has since dropped)."""
        return self._seen

    def record(self, seconds: float) -> None:
        """Add one latency (seconds; negative or non-finite values are ignored)."""
        if not (seconds >= 0.0 and math.isfinite(seconds)):
            return
        with self._lock:
            if len(self._samples) < self._size:
                self._samples.append(seconds)
            else:
                self._samples[self._next] = seconds
                self._next = (self._next + 1) % self._size
            self._seen += 1

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (nearest rank) of the window, or None below MIN_SAMPLES."""
        with self._lock:
            seen = self._seen
            if len(self._samples) < MIN_SAMPLES:
                return None
            cached = self._cache.get(q)
            if cached is not None and seen - cached[0] < _REFRESH_EVERY:
                return cached[1]
            ordered = sorted(self._samples)
            # (rounded first: 99.9 / 100 * 1000 is 999.0000000000001 in floats, and its
            # ceiling would be the slowest sample, not the 999th)
            rank = max(1, math.ceil(round(q * len(ordered) / 100.0, 9)))
            value = ordered[rank - 1]
            self._cache[q] = (seen, value)
            return value

    def __repr__(self) -> str:
        return f"LatencyWindow({len(self._samples)} samples)"


class LatencyBook:
    """One :class:`LatencyWindow` per dependency, made on first use (kept on the Governor,
    so clients sharing a governor share what they learned).

    Bounded: the governor forgets the window of a dependency it forgets, and the book
    keeps at most :data:`MAX_WINDOWS`, dropping the longest-kept first (that
    dependency's percentile then warms up again)."""

    def __init__(self) -> None:
        self._windows: dict[str, LatencyWindow] = {}
        self._lock = threading.Lock()

    def window(self, dependency: str) -> LatencyWindow:
        """The window of ``dependency``, made on first use."""
        window = self._windows.get(dependency)
        if window is None:
            with self._lock:
                window = self._windows.get(dependency)
                if window is None:
                    if len(self._windows) >= MAX_WINDOWS:
                        del self._windows[next(iter(self._windows))]
                    window = self._windows[dependency] = LatencyWindow()
        return window

    def forget(self, dependency: str) -> None:
        """Drop what was learned of ``dependency`` (the governor no longer keeps it)."""
        with self._lock:
            self._windows.pop(dependency, None)

    def __len__(self) -> int:
        return len(self._windows)

    def record(self, dependency: str, seconds: float) -> None:
        """One attempt of ``dependency`` took ``seconds`` (or at least that, if cancelled)."""
        self.window(dependency).record(seconds)

    def hedge_delay(self, dependency: str, hedge_after: float | str) -> float:
        """Seconds after which a hedged copy goes: the fixed delay, or the percentile
        (:data:`WARMUP_DELAY` while fewer than :data:`MIN_SAMPLES` are known, and
        never below :data:`FLOOR`)."""
        if not isinstance(hedge_after, str):
            return float(hedge_after)
        observed = self.window(dependency).percentile(parse_percentile(hedge_after))
        if observed is None:
            return WARMUP_DELAY
        return max(FLOOR, observed)

    def __repr__(self) -> str:
        return f"LatencyBook({len(self._windows)} dependencies)"
