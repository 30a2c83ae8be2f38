"""Migrating from ``HTTPAdapter(max_retries=Retry(...))``: what each field becomes.

Pure values (no sockets): ``policy_from_retry`` maps what has an equivalent and
refuses, naming the field and what to do, what has none.
"""

from __future__ import annotations

import pytest
from urllib3.util import Retry

from retrysafe import RetryPolicy
from retrysafe.requests import UnsupportedRetrySetting, policy_from_retry


def test_a_typical_retry_maps_field_by_field() -> None:
    retry = Retry(
        total=5,
        status_forcelist=[502, 503, 504],
        allowed_methods=["GET", "PUT"],
        backoff_factor=0.5,
        backoff_max=30,
    )
    policy = policy_from_retry(retry)
    assert policy.attempts == 6
    assert policy.retry_statuses == frozenset({429, 502, 503, 504})
    assert policy.idempotent_methods == frozenset({"GET", "PUT"})
    assert (policy.backoff_base, policy.backoff_cap) == (0.5, 30.0)


def test_the_fields_retrysafe_has_and_urllib3_has_not_come_from_base() -> None:
    base = RetryPolicy(deadline=12, attempt_timeout=3)
    policy = policy_from_retry(Retry(total=2), base=base)
    assert (policy.deadline, policy.attempt_timeout, policy.attempts) == (12, 3, 3)


def test_a_hedging_base_is_refused_saying_why() -> None:
    base = RetryPolicy(hedge_after=0.2, max_hedges=3)
    with pytest.raises(UnsupportedRetrySetting, match="pass a base without hedge_after"):
        policy_from_retry(Retry(total=2), base=base)


def test_a_429_and_a_503_with_retry_after_are_repeated_as_urllib3_repeats_them() -> None:
    """urllib3 repeats 413, 429 and 503 carrying Retry-After even without a forcelist (and
    retry_statuses decides a 429 as it does every status)."""
    policy = policy_from_retry(Retry(total=3))
    assert {429, 503} <= policy.retry_statuses
    assert 413 not in policy.retry_statuses  # too large: asking again cannot fix it


def test_a_backoff_max_below_the_factor_caps_every_wait_as_in_urllib3() -> None:
    policy = policy_from_retry(Retry(total=3, backoff_factor=1, backoff_max=0.1))
    assert (policy.backoff_base, policy.backoff_cap) == (0.1, 0.1)


@pytest.mark.parametrize("retry", [0, Retry(0, read=False), Retry(total=False)])
def test_no_retries_is_one_attempt(retry: Retry | int) -> None:
    """requests' own default is Retry(0, read=False): one attempt, nothing to refuse."""
    assert policy_from_retry(retry).attempts == 1


def test_an_int_is_read_as_urllib3_reads_it() -> None:
    assert policy_from_retry(3).attempts == 4


@pytest.mark.parametrize(
    ("retry", "named"),
    [
        (Retry(total=None, connect=3), "total=None"),
        (Retry(total=5, connect=2), "connect=2"),
        (Retry(total=1, connect=2), "connect=2"),
        (Retry(total=5, status=1), "status=1"),
        (Retry(total=3, allowed_methods=None), "allowed_methods=None"),
        (Retry(total=3, respect_retry_after_header=False), "respect_retry_after_header"),
        (Retry(total=3, status_forcelist=[502, 200, 302]), r"lists \[200, 302\]"),
    ],
)
def test_settings_without_an_equivalent_are_refused_by_name(retry: Retry, named: str) -> None:
    with pytest.raises(UnsupportedRetrySetting, match=named):
        policy_from_retry(retry)


def test_something_else_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"urllib3\.util\.Retry"):
        policy_from_retry("3")  # type: ignore[arg-type]
