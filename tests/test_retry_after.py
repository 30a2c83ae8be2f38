"""parse_retry_after: every form RFC 9110 allows, and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrysafe import parse_retry_after
from retrysafe.timing import MAX_RETRY_AFTER

# Sun, 06 Nov 1994 08:49:37 GMT, the RFC's own example instant.
RFC_INSTANT = 784111777.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("1", 1.0),
        ("120", 120.0),
        ("  7  ", 7.0),
        ("\t3\r\n", 3.0),
        (b"5", 5.0),
        ("007", 7.0),
    ],
)
def test_delta_seconds_are_read_as_seconds(value: str | bytes, expected: float) -> None:
    assert parse_retry_after(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
        "Sunday, 06-Nov-94 08:49:37 GMT",  # RFC 850
        "Sun Nov  6 08:49:37 1994",  # asctime
        "Sun Nov 6 08:49:37 1994",
        "Sun, 06 Nov 1994 08:49:37",  # zone-less: GMT
        "Sun, 06 Nov 1994 08:49:37 UTC",
    ],
)
def test_each_http_date_form_is_read_against_now(value: str) -> None:
    assert parse_retry_after(value, now=RFC_INSTANT - 30) == 30.0


def test_http_date_as_bytes() -> None:
    assert parse_retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT", now=RFC_INSTANT - 2) == 2.0


@pytest.mark.parametrize(
    "value",
    ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"],
)
def test_a_past_date_means_no_wait(value: str) -> None:
    assert parse_retry_after(value, now=RFC_INSTANT + 3600) == 0.0


def test_rfc850_two_digit_year_far_ahead_means_last_century() -> None:
    # In 2026, "94" is 1994, not 2094 (RFC 9110 §5.6.7).
    now_2026 = 1_795_000_000.0
    assert parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now=now_2026) == 0.0
    # ...while "27" is next year.
    wait = parse_retry_after("Monday, 01-Nov-27 00:00:00 GMT", now=now_2026)
    assert wait is not None
    assert wait > 0


def test_a_leap_second_reads_as_the_next_second() -> None:
    # RFC 9110's second is 00-60: 23:59:60 is the instant before midnight's next second.
    midnight = 788918400.0  # Sun, 01 Jan 1995 00:00:00 GMT
    wait = parse_retry_after("Sat, 31 Dec 1994 23:59:60 GMT", now=midnight - 10)
    assert wait == 10.0


def test_rfc850_two_digit_year_exactly_fifty_years_ahead_stays_in_this_century() -> None:
    # Only a year *more* than 50 ahead means the last century: in 2026, "76" is 2076.
    now_2026 = 1_795_000_000.0
    wait = parse_retry_after("Sunday, 01-Nov-76 00:00:00 GMT", now=now_2026)
    assert wait is not None
    assert wait > 0


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "-1",
        "+1",
        "1.5",
        "1e3",
        "²",
        "٣",  # Arabic-Indic digit three: a digit to Python, not to HTTP
        "soon",
        "0x10",
        "1 2",
        "Sun, 31 Feb 1994 08:49:37 GMT",  # no such day
        "Sun, 06 Nov 1994 25:49:37 GMT",  # no such hour
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Xyz, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 PST",
        "Sun, 06 Nov 1994",
        b"\xff\xfe",
    ],
)
def test_invalid_values_give_none(value: str | bytes | None) -> None:
    assert parse_retry_after(value) is None


def test_huge_delta_seconds_do_not_overflow() -> None:
    assert parse_retry_after("9" * 40) == MAX_RETRY_AFTER
    assert parse_retry_after("9" * 5000) == MAX_RETRY_AFTER
    assert parse_retry_after("99999") == 99999.0


def test_far_future_date_is_finite() -> None:
    wait = parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now=RFC_INSTANT)
    assert wait is not None
    assert wait > 0
    assert wait < float("inf")


@given(st.one_of(st.text(max_size=60), st.binary(max_size=60)))
def test_never_raises_and_never_negative(value: str | bytes) -> None:
    result = parse_retry_after(value, now=RFC_INSTANT)
    assert result is None or 0.0 <= result <= MAX_RETRY_AFTER


@given(st.integers(min_value=0, max_value=10**12))
def test_any_non_negative_integer_round_trips(seconds: int) -> None:
    assert parse_retry_after(str(seconds)) == float(seconds)


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Chatham"])
def test_result_does_not_depend_on_the_local_time_zone(zone: str) -> None:
    script = textwrap.dedent(
        f"""
        import time
        time.tzset()
        from retrysafe import parse_retry_after
        values = [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ]
        print([parse_retry_after(v, now={RFC_INSTANT - 90}) for v in values])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "TZ": zone},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert result.stdout.strip() == "[90.0, 90.0, 90.0]"


@pytest.mark.parametrize("now", [float("nan"), float("inf"), 1e300, -1e300])
def test_an_absurd_now_gives_none_instead_of_raising(now: float) -> None:
    assert parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now=now) is None
