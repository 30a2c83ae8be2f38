"""RetryPolicy is a frozen, validated value with the documented defaults."""

from __future__ import annotations

import dataclasses
import math

import pytest

from retrysafe import RetryPolicy, Verdict


def test_defaults_match_the_design() -> None:
    policy = RetryPolicy()
    assert policy.attempts == 4
    assert policy.attempt_timeout == 10.0
    assert policy.deadline == 30.0
    assert policy.min_attempt_time == 0.5
    assert (policy.backoff_base, policy.backoff_cap) == (0.25, 8.0)
    assert policy.retry_after_jitter == 0.25
    assert policy.retry_statuses == {408, 429, 500, 502, 503, 504, 529}
    assert policy.idempotent_methods == {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}
    assert policy.quota_headers == ("x-api-remaining-credits",)
    assert policy.rules == ()


def test_is_frozen_and_keyword_only() -> None:
    policy = RetryPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.attempts = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        RetryPolicy(3)  # type: ignore[misc]


def test_replace_derives_a_validated_variant() -> None:
    derived = dataclasses.replace(RetryPolicy(), attempts=2)
    assert derived.attempts == 2
    with pytest.raises(ValueError, match="attempts"):
        dataclasses.replace(RetryPolicy(), attempts=0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"attempts": 0}, r"RetryPolicy\.attempts must be >= 1"),
        ({"attempts": 2.5}, r"attempts must be a whole number"),
        ({"attempts": True}, r"attempts must be a whole number"),
        ({"attempt_timeout": 0}, r"attempt_timeout must be > 0"),
        ({"deadline": -1}, r"deadline must be > 0"),
        ({"deadline": math.nan}, r"deadline must be a number of seconds"),
        ({"min_attempt_time": -0.1}, r"min_attempt_time must be >= 0"),
        ({"backoff_base": 9, "backoff_cap": 8}, r"backoff_base must be <= backoff_cap"),
        ({"backoff_cap": math.inf}, r"backoff_cap must be finite"),
        ({"retry_statuses": {99}}, r"retry_statuses must hold HTTP statuses 100-599"),
        ({"retry_statuses": {600}}, r"retry_statuses must hold HTTP statuses 100-599"),
        ({"retry_statuses": {503, 200}}, r"must hold error statuses \(400-599\): a 200 is never"),
        ({"retry_statuses": {304}}, r"must hold error statuses \(400-599\): a 304 is never"),
        ({"retry_statuses": "503"}, r"retry_statuses must be a collection"),
        ({"idempotent_methods": {"G E T"}}, r"idempotent_methods must hold method names"),
        ({"quota_headers": ("",)}, r"quota_headers must hold header names"),
        ({"quota_headers": ("  ",)}, r"quota_headers must hold header names"),
        ({"rules": ("not callable",)}, r"rules must hold callables"),
        ({"max_retry_after": -5}, r"max_retry_after must be >= 0"),
        ({"deadline": 0.2}, r"min_attempt_time must be <= deadline"),
        ({"deadline": True}, r"deadline must be a number of seconds, got True"),
        ({"retry_after_jitter": False}, r"retry_after_jitter must be a number of seconds"),
        (
            {"hedge_after": 0.1, "attempts": 3, "max_hedges": 3},
            r"max_hedges must be at most attempts - 1 = 2",
        ),
        ({"hedge_after": 0.1, "attempts": 1}, r"hedge_after needs attempts >= 2"),
    ],
)
def test_invalid_fields_name_the_field_and_the_rule(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**fields)  # type: ignore[arg-type]


def test_a_deadline_shorter_than_min_attempt_time_suggests_a_policy_that_works() -> None:
    with pytest.raises(ValueError, match="min_attempt_time must be <= deadline") as caught:
        RetryPolicy(deadline=0.3)
    suggested = str(caught.value).split("e.g. ", 1)[1]
    assert suggested == "RetryPolicy(deadline=0.3, min_attempt_time=0.15)"
    policy = RetryPolicy(deadline=0.3, min_attempt_time=0.15)  # as suggested: accepted
    assert policy.min_attempt_time < policy.deadline


def test_attempt_timeout_longer_than_deadline_is_allowed() -> None:
    policy = RetryPolicy(attempt_timeout=60, deadline=5)
    assert policy.attempt_timeout > policy.deadline


def test_inputs_are_normalised() -> None:
    policy = RetryPolicy(
        retry_statuses=[503, 503],
        idempotent_methods=["get", "Put"],
        quota_headers=["X-Credits-Left"],
        rules=[lambda response: Verdict.success()],
    )
    assert policy.retry_statuses == frozenset({503})
    assert policy.idempotent_methods == frozenset({"GET", "PUT"})
    assert policy.quota_headers == ("x-credits-left",)
    assert isinstance(policy.rules, tuple)
    hash(policy.retry_statuses)


def test_the_lowest_and_highest_error_statuses_may_be_retried() -> None:
    assert RetryPolicy(retry_statuses={400, 599}).retry_statuses == {400, 599}
