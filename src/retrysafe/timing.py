"""Pure time arithmetic: reading Retry-After, full-jitter backoff, and deadlines.

Nothing here sleeps or reads a socket; the wall clock is read only to
interpret an HTTP-date, and a :class:`Deadline` asks its injected clock.
"""

from __future__ import annotations

import calendar
import datetime
import functools
import math
import re
import time

from retrysafe.clock import Clock, SystemClock

__all__ = ["MAX_RETRY_AFTER", "Deadline", "backoff_delay", "parse_retry_after"]

#: Delta-seconds above this (about 31.7 million years) read as this value, so an
#: absurd hint stays a finite float that every comparison handles.
MAX_RETRY_AFTER = 1e15

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_SHORT_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_LONG_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_ZONE = r"(?:\s+(?:GMT|UTC))?"
_CLOCK = r"(\d{2}):(\d{2}):(\d{2})"


@functools.cache
def _date_forms() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The three HTTP-date forms, compiled when a date is first read (most Retry-After
    values are seconds, and ``import retrysafe`` is lighter without them)."""
    return (
        # Sun, 06 Nov 1994 08:49:37 GMT
        re.compile(
            rf"([A-Za-z]{{3}}),\s*(\d{{1,2}})\s+([A-Za-z]{{3}})\s+(\d{{4}})\s+{_CLOCK}{_ZONE}",
            re.ASCII,
        ),
        # Sunday, 06-Nov-94 08:49:37 GMT
        re.compile(
            rf"([A-Za-z]{{6,9}}),\s*(\d{{1,2}})-([A-Za-z]{{3}})-(\d{{2}})\s+{_CLOCK}{_ZONE}",
            re.ASCII,
        ),
        # Sun Nov  6 08:49:37 1994
        re.compile(
            rf"([A-Za-z]{{3}})\s+([A-Za-z]{{3}})\s+(\d{{1,2}})\s+{_CLOCK}\s+(\d{{4}}){_ZONE}",
            re.ASCII,
        ),
    )


_WHITESPACE = " \t\r\n"


def parse_retry_after(value: str | bytes | None, now: float | None = None) -> float | None:
    """Read a ``Retry-After`` header value as seconds to wait.

    ASCII digits (optionally surrounded by whitespace) are delta-seconds. An
    IMF-fixdate, RFC 850 or asctime HTTP-date is compared with ``now`` (epoch
    seconds, default ``time.time()``); a date with no zone is GMT, and a past
    date gives ``0.0``. Anything else, including ``-1``, ``+1``, ``1.5`` and
    ``1e3``, gives ``None``: "no usable hint", never zero. It never raises.
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            text = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    else:
        text = value
    text = text.strip(_WHITESPACE)
    if not text:
        return None
    if text.isascii() and text.isdigit():
        # Compare as text length first: int() of a 100,000-digit string is slow and
        # Python caps it; anything with more than 16 digits is over the ceiling anyway.
        digits = text.lstrip("0") or "0"
        if len(digits) > 16:
            return MAX_RETRY_AFTER
        return min(float(int(digits)), MAX_RETRY_AFTER)
    reference = time.time() if now is None else now
    if not math.isfinite(reference):
        return None
    try:
        moment = _parse_http_date(text, reference)
    except (OverflowError, ValueError, OSError):  # a `now` beyond any calendar
        return None
    if moment is None:
        return None
    return max(0.0, moment - reference)


def _parse_http_date(text: str, now: float) -> float | None:
    """Return the epoch seconds of an HTTP-date in any of its three forms, else None."""
    imf_fixdate, rfc850_date, asctime_date = _date_forms()
    match = imf_fixdate.fullmatch(text)
    if match:
        weekday, day, month, year, hour, minute, second = match.groups()
        if weekday.lower() not in _SHORT_DAYS:
            return None
        return _epoch(int(year), month, int(day), int(hour), int(minute), int(second))
    match = rfc850_date.fullmatch(text)
    if match:
        weekday, day, month, short_year, hour, minute, second = match.groups()
        if weekday.lower() not in _LONG_DAYS:
            return None
        year = _expand_two_digit_year(int(short_year), now)
        return _epoch(year, month, int(day), int(hour), int(minute), int(second))
    match = asctime_date.fullmatch(text)
    if match:
        weekday, month, day, hour, minute, second, year = match.groups()
        if weekday.lower() not in _SHORT_DAYS:
            return None
        return _epoch(int(year), month, int(day), int(hour), int(minute), int(second))
    return None


def _expand_two_digit_year(short_year: int, now: float) -> int:
    """RFC 9110 §5.6.7: a two-digit year more than 50 years ahead means the last century."""
    current = datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc).year
    year = current - current % 100 + short_year
    if year > current + 50:
        year -= 100
    return year


def _epoch(
    year: int, month_name: str, day: int, hour: int, minute: int, second: int
) -> float | None:
    """Epoch seconds for a GMT calendar time, or None if the fields are not a real time."""
    month = _MONTHS.get(month_name.lower())
    if month is None:
        return None
    # Leap second 60 is allowed by the grammar; fold it onto the next second.
    leap = 1 if second == 60 else 0
    try:
        moment = datetime.datetime(year, month, day, hour, minute, second - leap)
    except ValueError:
        return None
    return float(calendar.timegm(moment.timetuple()) + leap)


def backoff_delay(attempt: int, base: float, cap: float, rand: float) -> float:
    """Full-jitter exponential backoff: ``rand * min(cap, base * 2**attempt)``.

    ``attempt`` is zero-based (0 is the wait after the first failure) and may be
    any size: the exponent is clamped before it can overflow, and the cap binds.
    ``rand`` is a number in ``[0, 1]``, injected so tests are deterministic.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0 (zero-based), got {attempt!r}")
    if not 0.0 <= rand <= 1.0:
        raise ValueError(f"rand must be in [0, 1], got {rand!r}")
    if base < 0 or cap < 0:
        raise ValueError(f"base and cap must be >= 0, got base={base!r} cap={cap!r}")
    # 2.0 ** 1023 is the largest finite power of two; beyond it the cap binds anyway.
    ceiling = min(cap, base * 2.0 ** min(attempt, 1023))
    return rand * ceiling


class Deadline:
    """One instant by which a whole operation must be finished, however many attempts.

    Each attempt's timeout is the smaller of its own limit and the time left,
    and no wait is allowed that would leave less than a useful attempt.
    """

    __slots__ = ("_clock", "at")

    def __init__(self, at: float, clock: Clock | None = None) -> None:
        self.at = at
        self._clock: Clock = clock if clock is not None else SystemClock()

    @classmethod
    def after(cls, seconds: float, clock: Clock | None = None) -> Deadline:
        """The deadline ``seconds`` from now on ``clock`` (``math.inf`` for none)."""
        if math.isnan(seconds) or seconds < 0:
            raise ValueError(f"a deadline needs seconds >= 0, got {seconds!r}")
        clock = clock if clock is not None else SystemClock()
        return cls(clock.monotonic() + seconds, clock)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - self._clock.monotonic())

    @property
    def expired(self) -> bool:
        """True once no time is left."""
        return self.remaining() <= 0.0

    def attempt_timeout(self, per_attempt: float) -> float:
        """The timeout for an attempt starting now: ``min(per_attempt, remaining())``."""
        return min(per_attempt, self.remaining())

    def allows(self, wait: float, min_attempt: float = 0.0) -> bool:
        """Whether sleeping ``wait`` still leaves ``min_attempt`` for a worthwhile attempt."""
        return wait + min_attempt <= self.remaining()

    def spent(self, seconds: float) -> Deadline:
        """This deadline with ``seconds`` counted as gone without waiting them: a new one,
        since others may share this one (calls in one deadline scope, running at once).
        Testing mode's skipped waits use up a call's deadline so, and the call gives up
        where it would in production."""
        return Deadline(self.at - seconds, self._clock)

    def tighter(self, other: Deadline | None) -> Deadline:
        """Whichever of the two deadlines leaves less time (each read on its own clock)."""
        if other is None or self.remaining() <= other.remaining():
            return self
        return other

    def __repr__(self) -> str:
        return f"Deadline(remaining={self.remaining():.3f}s)"
