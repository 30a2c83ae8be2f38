"""The httpx shells' socket tests, run over the requests and aiohttp shells.

Each function below is the very test the httpx shells pass (imported, not copied);
this directory's ``api`` fixture runs it through ``requests`` + ``RetryAdapter`` and
through ``aiohttp`` + ``RetryMiddleware`` against the same chaos server: the retry
table, the deadline, keys and redirects.

Left out, because they test something the other clients do not have:

- the drop-in httpx transport tests, HTTP/2 stream tests and the httpx pool timeout
  (httpx's ``Limits``): httpx-only objects;
- the blank key on ``httpx.MockTransport``: needs an httpx transport;
- the whitespace ``Idempotency-Key`` over requests: requests itself refuses to
  prepare a header value with leading whitespace (``InvalidHeader``) before any
  adapter sees it (it runs over aiohttp below).
"""

from __future__ import annotations

from typing import Any

import pytest

from test_client_chaos_endpoints import (
    test_a_close_without_response_is_not_repeated_for_a_post,
    test_a_reset_on_accept_is_retried_for_a_get,
    test_a_server_that_never_reads_times_out_per_attempt,
    test_a_slow_success_is_not_cut_short,
    test_an_outage_that_ends_is_ridden_out,
    test_malformed_bodies_are_unreadable_to_a_json_rule,
    test_retry_after_is_honoured_never_early,
)
from test_client_sockets import (
    full_backlog_url,
    test_a_409_on_a_keyed_request_is_waited_out,
    test_a_body_that_is_always_truncated_is_a_bad_response,
    test_a_dripping_body_is_bounded_by_the_attempt_timeout,
    test_a_garbage_status_line_is_a_remote_protocol_error,
    test_a_get_that_times_out_is_retried,
    test_a_granted_wait_is_not_refused_after_a_real_sleep,
    test_a_hanging_server_gives_deadline_exceeded_on_time,
    test_a_keyed_409_that_outlasts_the_attempts_says_to_try_again_later,
    test_a_post_refused_at_connect_is_retried,
    test_a_post_that_cannot_connect_in_time_is_retried,
    test_a_post_with_a_key_that_gets_502_twice_is_sent_three_times_with_that_key,
    test_a_post_without_key_that_times_out_is_sent_exactly_once,
    test_a_rate_limit_is_waited_out_and_carries_retry_after,
    test_a_reply_that_fails_after_the_work_is_retried_and_the_work_happens_once,
    test_a_reset_after_the_request_is_maybe_sent,
    test_a_reset_get_is_retried_and_succeeds,
    test_a_reset_mid_body_is_caught_inside_the_attempt,
    test_a_reset_post_without_key_is_not_repeated,
    test_a_retry_after_far_beyond_the_deadline_fails_at_once,
    test_a_rule_makes_a_stable_503_permanent,
    test_a_rule_reads_the_request_its_response_answers,
    test_a_rule_turns_a_200_error_body_into_a_failure,
    test_a_slow_drip_cannot_carry_an_attempt_past_the_deadline,
    test_a_truncated_body_on_get_is_retried,
    test_client_errors_fail_at_once,
    test_gateway_errors_are_not_repeated_for_a_post_without_key,
    test_gateway_errors_are_retried_for_a_get,
    test_no_timeout_at_all_is_allowed,
    test_out_of_credits_is_not_retried,
    test_refused_before_work_is_retried_even_for_a_post,
    test_success_returns_the_read_response_with_a_report,
    test_the_deadline_scope_spans_calls,
)
from test_engine_v2_sockets import (
    not_replayable,
    test_a_redirect_chain_shares_one_retry_allowance,
    test_a_redirect_chain_within_its_deadline_succeeds,
    test_a_redirect_chain_within_its_retry_allowance_succeeds,
    test_a_slow_redirect_chain_shares_one_deadline,
    test_an_empty_idempotency_key_header_is_no_key,
    test_the_not_replayable_409_is_final,
    test_trickled_headers_end_at_the_deadline,
    test_trickled_headers_end_at_the_deadline_for_a_post,
    test_trickled_headers_within_the_attempt_timeout_still_succeed,
)
from test_engine_v2_sockets import (
    test_a_whitespace_idempotency_key_header_is_not_repeated as whitespace_key_test,
)

__all__ = [
    "full_backlog_url",
    "not_replayable",
    "test_a_409_on_a_keyed_request_is_waited_out",
    "test_a_keyed_409_that_outlasts_the_attempts_says_to_try_again_later",
    "test_a_body_that_is_always_truncated_is_a_bad_response",
    "test_a_close_without_response_is_not_repeated_for_a_post",
    "test_a_dripping_body_is_bounded_by_the_attempt_timeout",
    "test_a_garbage_status_line_is_a_remote_protocol_error",
    "test_a_get_that_times_out_is_retried",
    "test_a_granted_wait_is_not_refused_after_a_real_sleep",
    "test_a_hanging_server_gives_deadline_exceeded_on_time",
    "test_a_post_refused_at_connect_is_retried",
    "test_a_post_that_cannot_connect_in_time_is_retried",
    "test_a_post_with_a_key_that_gets_502_twice_is_sent_three_times_with_that_key",
    "test_a_post_without_key_that_times_out_is_sent_exactly_once",
    "test_a_rate_limit_is_waited_out_and_carries_retry_after",
    "test_a_redirect_chain_shares_one_retry_allowance",
    "test_a_redirect_chain_within_its_deadline_succeeds",
    "test_a_redirect_chain_within_its_retry_allowance_succeeds",
    "test_a_reply_that_fails_after_the_work_is_retried_and_the_work_happens_once",
    "test_a_reset_after_the_request_is_maybe_sent",
    "test_a_reset_get_is_retried_and_succeeds",
    "test_a_reset_mid_body_is_caught_inside_the_attempt",
    "test_a_reset_on_accept_is_retried_for_a_get",
    "test_a_reset_post_without_key_is_not_repeated",
    "test_a_retry_after_far_beyond_the_deadline_fails_at_once",
    "test_a_rule_makes_a_stable_503_permanent",
    "test_a_rule_reads_the_request_its_response_answers",
    "test_a_rule_turns_a_200_error_body_into_a_failure",
    "test_a_server_that_never_reads_times_out_per_attempt",
    "test_a_slow_drip_cannot_carry_an_attempt_past_the_deadline",
    "test_a_slow_redirect_chain_shares_one_deadline",
    "test_a_slow_success_is_not_cut_short",
    "test_a_truncated_body_on_get_is_retried",
    "test_an_empty_idempotency_key_header_is_no_key",
    "test_an_outage_that_ends_is_ridden_out",
    "test_client_errors_fail_at_once",
    "test_gateway_errors_are_not_repeated_for_a_post_without_key",
    "test_gateway_errors_are_retried_for_a_get",
    "test_malformed_bodies_are_unreadable_to_a_json_rule",
    "test_no_timeout_at_all_is_allowed",
    "test_out_of_credits_is_not_retried",
    "test_refused_before_work_is_retried_even_for_a_post",
    "test_retry_after_is_honoured_never_early",
    "test_success_returns_the_read_response_with_a_report",
    "test_the_deadline_scope_spans_calls",
    "test_the_not_replayable_409_is_final",
    "test_trickled_headers_end_at_the_deadline",
    "test_trickled_headers_end_at_the_deadline_for_a_post",
    "test_trickled_headers_within_the_attempt_timeout_still_succeed",
    "test_whitespace_key_over_aiohttp",
]


@pytest.mark.parametrize("api", ["aiohttp"], indirect=True)
def test_whitespace_key_over_aiohttp(api: Any, chaos: Any) -> None:
    """The whitespace-key test, over aiohttp only (requests refuses the header itself)."""
    whitespace_key_test(api, chaos)
