"""What retrysafe remembers of connections that failed to open, to tell a cut attempt
that waited on one (a connect timeout) from one that waited in the client's own queue.

It remembers the latest failure per host of each pool. A long-lived client meeting ever
new unreachable hosts kept one entry per host for as long as the client lived (trial81:
2,962 after 55 s of a new host per call); it now keeps the latest hosts only.
"""

from __future__ import annotations

import time

import httpx

from retrysafe import attempt_deadline
from retrysafe.attempt_deadline import failed_to_open_since, note_failed_open


class _Pool:
    """A stand-in for an httpcore pool: only its identity matters here."""


class _Attempt:
    """A call's attempt in flight, as failed_to_open_since reads it."""

    def __init__(self, host: str, started_at: float) -> None:
        self.request = httpx.Request("GET", f"http://{host}/")
        self.attempt_started_at = started_at


def test_a_pool_remembers_the_latest_hosts_that_failed_only() -> None:
    pool = _Pool()
    for number in range(1000):
        note_failed_open(pool, f"10.0.{number // 256}.{number % 256}")
    kept = attempt_deadline._failed_opens[pool]
    assert len(kept) == attempt_deadline._FAILED_HOSTS_KEPT
    assert "10.0.3.231" in kept  # the last one
    assert "10.0.0.0" not in kept  # the first ones are forgotten


def test_a_host_failing_again_is_kept_as_the_latest() -> None:
    pool = _Pool()
    started = time.monotonic()
    note_failed_open(pool, "down.example")
    for number in range(attempt_deadline._FAILED_HOSTS_KEPT - 1):
        note_failed_open(pool, f"other-{number}.example")
    note_failed_open(pool, "down.example")  # (fails again: now the latest)
    note_failed_open(pool, "one-more.example")
    assert failed_to_open_since(pool, _Attempt("down.example", started))  # type: ignore[arg-type]
    assert "other-0.example" not in attempt_deadline._failed_opens[pool]


def test_a_failure_before_the_attempt_started_is_no_news_of_it() -> None:
    pool = _Pool()
    note_failed_open(pool, "down.example")
    later = time.monotonic() + 1
    assert not failed_to_open_since(pool, _Attempt("down.example", later))  # type: ignore[arg-type]
    assert not failed_to_open_since(pool, _Attempt("up.example", 0.0))  # type: ignore[arg-type]
