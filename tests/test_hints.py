"""Server hints beyond Retry-After: retry-after-ms, should-retry, announced rate limits."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy, Verdict
from retrysafe.classify import classify_response, may_have_acted
from retrysafe.hints import (
    announced_limit,
    exhausted_until,
    parse_reset,
    parse_retry_after_ms,
    parse_should_retry,
    retry_after_hint,
    server_says_retry,
)
from retrysafe.testing import FakeClock
from retrysafe.timing import MAX_RETRY_AFTER, parse_retry_after

NOW = 1_700_000_000.0  # FakeClock's default wall start
POLICY = RetryPolicy()
#: Exact waits: no jitter on top of a server's hint.
EXACT = RetryPolicy(retry_after_jitter=0)
GARBLED = ["", "   ", "abc", "-5", "+5", "1e3", "inf", "nan", "1_000", "1,500", "1 500", "١٢"]


def response(status: int, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, headers=headers)


def classify(resp: httpx.Response, *, keyed: bool = False, policy: RetryPolicy = POLICY) -> Verdict:
    return classify_response(resp, policy, keyed=keyed, now=NOW)


# -- retry-after-ms -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1500", 1.5),
        ("1500.5", 1.5005),
        (" 250\t", 0.25),
        ("0", 0.0),
        (".5", 0.0005),
        ("007", 0.007),
        (b"2000", 2.0),
    ],
)
def test_retry_after_ms_reads_milliseconds_as_seconds(value: str | bytes, seconds: float) -> None:
    assert parse_retry_after_ms(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [*GARBLED, None, b"\xff"])
def test_retry_after_ms_garbled_negative_or_empty_is_no_hint(value: str | bytes | None) -> None:
    assert parse_retry_after_ms(value) is None


@pytest.mark.parametrize("value", ["9" * 19, "9" * 100_000, "99999999999999999999.5"])
def test_retry_after_ms_huge_is_capped(value: str) -> None:
    assert parse_retry_after_ms(value) == MAX_RETRY_AFTER


def test_retry_after_ms_wins_over_retry_after() -> None:
    resp = response(503, {"Retry-After": "7", "retry-after-ms": "1500"})
    assert retry_after_hint(resp, NOW) == 1.5


def test_unusable_retry_after_ms_falls_back_to_retry_after() -> None:
    resp = response(503, {"Retry-After": "7", "Retry-After-Ms": "soon"})
    assert retry_after_hint(resp, NOW) == 7.0


def test_a_retry_after_ms_of_zero_is_usable_and_wins_over_retry_after() -> None:
    resp = response(503, {"Retry-After": "7", "retry-after-ms": "0"})
    assert retry_after_hint(resp, NOW) == 0.0


def test_retry_after_http_date_still_read_without_retry_after_ms() -> None:
    resp = response(503, {"Retry-After": "Tue, 14 Nov 2023 22:13:30 GMT"})
    assert retry_after_hint(resp, NOW) == 10.0


@pytest.mark.parametrize(("value", "seconds"), [("1.5", 1.5), (" 2.25 ", 2.25), (".5", 0.5)])
def test_a_retry_after_in_decimal_seconds_is_waited_out_as_given(
    value: str, seconds: float
) -> None:
    # Not HTTP's form (parse_retry_after keeps to whole seconds), but what servers send
    # and the openai SDK honours: taken as no hint, the retry would come early.
    assert parse_retry_after(value) is None
    assert retry_after_hint(response(429, {"Retry-After": value}), NOW) == seconds


@pytest.mark.parametrize(
    "value", ["-1.5", "+1.5", "1e3", "1.5s", "nan", "inf", "2, x", " , 2", "2,,3", "1, -1"]
)
def test_a_retry_after_no_reading_makes_a_wait_of_is_still_no_hint(value: str) -> None:
    assert retry_after_hint(response(429, {"Retry-After": value}), NOW) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2, 3", 3.0),
        ("3,2", 3.0),
        ("1.5, 2", 2.0),
        # (a decimal comma reads as two waits: the longer, never an early retry)
        ("1,5", 5.0),
    ],
)
def test_two_retry_after_headers_joined_wait_out_the_longer(value: str, seconds: float) -> None:
    """A proxy's ``Retry-After`` and the application's reach the caller joined, as httpx
    joins a repeated header: read as no hint, the retry went out before either asked."""
    assert retry_after_hint(response(429, {"Retry-After": value}), NOW) == seconds
    joined = httpx.Response(429, headers=[("Retry-After", "2"), ("Retry-After", "3")])
    assert retry_after_hint(joined, NOW) == 3.0


def test_a_huge_decimal_retry_after_is_capped() -> None:
    hint = retry_after_hint(response(503, {"Retry-After": "9" * 30 + ".5"}), NOW)
    assert hint == MAX_RETRY_AFTER


def test_no_wait_hint_at_all_is_none() -> None:
    assert retry_after_hint(response(503), NOW) is None


def test_classify_takes_retry_after_ms_as_the_wait() -> None:
    verdict = classify(response(429, {"Retry-After": "2", "retry-after-ms": "250"}))
    assert (verdict.reason, verdict.after) == ("rate_limited", 0.25)


# -- x-should-retry / Stripe-Should-Retry -------------------------------------------------


@pytest.mark.parametrize(
    ("value", "answer"),
    [
        ("true", True),
        ("TRUE", True),
        (" True\t", True),
        ("false", False),
        ("FaLsE", False),
        (b"false", False),
    ],
)
def test_should_retry_reads_true_or_false_in_any_case(value: str | bytes, answer: bool) -> None:
    assert parse_should_retry(value) is answer


@pytest.mark.parametrize("value", ["", "  ", "1", "0", "yes", "no", "truee", "t rue", None])
def test_should_retry_anything_else_is_no_hint(value: str | None) -> None:
    assert parse_should_retry(value) is None


@pytest.mark.parametrize("name", ["x-should-retry", "X-Should-Retry", "Stripe-Should-Retry"])
def test_either_should_retry_header_is_read(name: str) -> None:
    assert server_says_retry(response(500, {name: "false"})) is False
    assert server_says_retry(response(500, {name: "true"})) is True


def test_should_retry_headers_that_disagree_read_as_false() -> None:
    resp = response(500, {"x-should-retry": "true", "stripe-should-retry": "false"})
    assert server_says_retry(resp) is False


def test_should_retry_false_makes_a_retryable_status_final() -> None:
    """Final, keeping what the status says of the work: a 503 refused it (processed "no"),
    a 500 may have done it."""
    verdict = classify(response(503, {"x-should-retry": "false"}))
    assert (verdict.kind, verdict.reason, verdict.processed) == (
        "permanent",
        "server_said_no_retry",
        "no",
    )
    assert classify(response(500, {"x-should-retry": "false"})).processed == "maybe"


def test_should_retry_false_makes_a_keyed_conflict_final_and_still_a_key_in_use() -> None:
    """A 409 in flight (by its Retry-After) that the server says not to ask again: final,
    and still the key in use, so the call's error says the server may have acted (an
    attempt under the key may still be running there), with the server's wait on it."""
    said = response(409, {"Stripe-Should-Retry": "false", "Retry-After": "1"})
    verdict = classify(said, keyed=True)
    assert (verdict.kind, verdict.reason, verdict.after) == (
        "permanent",
        "idempotency_key_in_use",
        1.0,
    )
    assert may_have_acted(verdict, said)


def test_a_key_in_use_the_server_says_not_to_retry_fails_as_maybe_processed() -> None:
    """The call stops, as the server asks; its error says the work may be under way and
    to ask again later under the same key."""
    clock, seen = FakeClock(), []
    reply = httpx.Response(
        409, headers={"Idempotency-Problem": "request-in-flight", "x-should-retry": "false"}
    )
    client = unguarded(clock, scripted([reply, httpx.Response(201)], seen))
    with pytest.raises(retrysafe.ClientError) as caught:
        client.post("http://api.test/charges", content=b"{}", headers={"Idempotency-Key": "k-1"})
    error = caught.value
    assert (len(seen), error.reason, error.retryable, error.processed) == (
        1,
        "idempotency_key_in_use",
        True,
        "maybe",
    )
    # never "fix the request": under another key, the work could be done twice
    assert "try again later under the same key" in str(error)
    assert "fix the request" not in str(error)


@pytest.mark.parametrize(
    ("status", "headers", "error_type"),
    [
        (503, {"x-should-retry": "false"}, retrysafe.ServerError),
        (501, {}, retrysafe.ServerError),
        (429, {"x-should-retry": "false"}, retrysafe.RateLimited),
    ],
)
def test_a_final_answer_keeps_the_servers_retry_after_on_its_error(
    status: int, headers: dict[str, str], error_type: type[retrysafe.ApiError]
) -> None:
    """Made final by the table or by the server's own advice, a failure still says when
    the server asked to be asked again: the error's ``retry_after``."""
    clock, seen = FakeClock(), []
    reply = httpx.Response(status, headers={"Retry-After": "30", **headers})
    client = unguarded(clock, scripted([reply], seen))
    with pytest.raises(error_type) as caught:
        client.get("http://api.test/")
    assert (len(seen), caught.value.retryable) == (1, False)
    assert getattr(caught.value, "retry_after", None) == 30.0


def test_should_retry_true_makes_a_conflict_retryable_but_maybe_processed() -> None:
    verdict = classify(response(409, {"Stripe-Should-Retry": "true", "Retry-After": "1"}))
    assert (verdict.kind, verdict.reason, verdict.processed, verdict.after) == (
        "retry",
        "server_said_retry",
        "maybe",
        1.0,
    )


def test_should_retry_true_on_a_status_refused_before_work_is_unprocessed() -> None:
    policy = RetryPolicy(retry_statuses=(500,))
    verdict = classify(response(503, {"x-should-retry": "true"}), policy=policy)
    assert (verdict.kind, verdict.processed) == ("retry", "no")


def test_should_retry_true_keeps_a_retryable_verdict_as_it_is() -> None:
    verdict = classify(response(503, {"x-should-retry": "true", "Retry-After": "3"}))
    assert (verdict.reason, verdict.processed, verdict.after) == ("service_unavailable", "no", 3.0)


def test_should_retry_true_does_not_reopen_a_replayed_response() -> None:
    resp = response(409, {"x-should-retry": "true", "Idempotent-Replayed": "true"})
    assert classify(resp, keyed=True).kind == "permanent"


def test_should_retry_true_does_not_reopen_quota_exhausted() -> None:
    resp = response(429, {"x-should-retry": "true", "x-api-remaining-credits": "0"})
    assert classify(resp).reason == "quota_exhausted"


def test_should_retry_false_keeps_a_final_verdict_as_it_is() -> None:
    """``false`` only stops a retry: a 404 the server also says not to retry stays the
    404 it was, never turned into a retry."""
    verdict = classify(response(404, {"x-should-retry": "false"}))
    assert (verdict.kind, verdict.reason) == ("permanent", "not_found")


def test_should_retry_false_does_not_fail_a_success() -> None:
    assert classify(response(200, {"x-should-retry": "false"})).kind == "success"


def test_should_retry_true_does_not_fail_a_success_a_rule_passed_over() -> None:
    """A success stays one under ``x-should-retry: true``, also when the policy's rules
    looked at it and had no verdict."""

    def no_opinion(resp: httpx.Response) -> Verdict | None:
        return None

    resp = response(200, {"x-should-retry": "true"})
    assert classify(resp, policy=RetryPolicy(rules=(no_opinion,))).kind == "success"


def test_a_rule_comes_before_should_retry() -> None:
    def final(resp: httpx.Response) -> Verdict | None:
        return Verdict.permanent("rule_says_no")

    resp = response(409, {"x-should-retry": "true"})
    assert classify(resp, policy=RetryPolicy(rules=(final,))).reason == "rule_says_no"


# -- reset values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("10", 10.0),
        (" 2.5 ", 2.5),
        ("0", 0.0),
        (str(int(NOW) + 30), 30.0),  # GitHub: Unix seconds
        (f"{NOW + 1.25:.3f}", 1.25),  # Discord: Unix seconds with a fraction
        (str(int(NOW * 1000) + 4500), 4.5),  # Unix milliseconds
        (str(int(NOW) - 100), 0.0),  # a reset already past
    ],
)
def test_reset_is_read_by_magnitude(value: str, seconds: float) -> None:
    assert parse_reset(value, NOW) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [*GARBLED, None])
def test_reset_garbled_negative_or_empty_is_none(value: str | None) -> None:
    assert parse_reset(value, NOW) is None


def test_reset_huge_is_capped() -> None:
    assert parse_reset("9" * 40, NOW) == MAX_RETRY_AFTER


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("999999999", 999_999_999.0),  # just below 1e9: still delta-seconds
        ("1000000000", 0.0),  # exactly 1e9: Unix seconds (2001-09-09), long past
        ("999999999999", 999_999_999_999 - NOW),  # just below 1e12: still Unix seconds
        ("1000000000000", 0.0),  # exactly 1e12: Unix milliseconds (2001-09-09), long past
    ],
)
def test_reset_unit_changes_exactly_at_its_thresholds(value: str, seconds: float) -> None:
    assert parse_reset(value, NOW) == seconds


# -- announced rate limits ----------------------------------------------------------------


def limited(headers: dict[str, str], status: int = 200) -> float | None:
    return exhausted_until(response(status, headers), NOW)


def test_ietf_ratelimit_with_zero_remaining_waits_its_reset() -> None:
    headers = {"RateLimit": '"default";r=0;t=10', "RateLimit-Policy": '"default";q=100;w=60'}
    assert limited(headers) == 10.0


def test_ietf_ratelimit_with_quota_left_is_no_wait() -> None:
    assert limited({"RateLimit": '"default";r=5;t=10'}) is None


def test_ietf_ratelimit_without_reset_waits_its_policy_window() -> None:
    headers = {
        "RateLimit": '"burst";r=0',
        "RateLimit-Policy": '"burst";q=10;w=6, "day";q=1000;w=86400',
    }
    assert limited(headers) == 6.0


def test_ietf_ratelimit_without_reset_or_policy_is_no_wait() -> None:
    assert limited({"RateLimit": '"default";r=0'}) is None


def test_ietf_ratelimit_waits_for_the_longest_exhausted_policy() -> None:
    headers = {"ratelimit": '"minute";r=0;t=20, "hour";r=0;t=900, "day";r=50;t=80000'}
    assert limited(headers) == 900.0


def test_ietf_ratelimit_tolerates_whitespace_and_mixed_case_names() -> None:
    assert limited({"RATELIMIT": '  "a" ; r=0 ; t=3 '}) == 3.0


@pytest.mark.parametrize(
    "value",
    [
        '"default;r=0;t=10',  # a string left open
        '"default";r=zero;t=10',
        '"default";r=-1;t=10',
        '"default";r=0;t=-5',
        '"default";r=0;t=1.5',  # an sf-integer, not a decimal
        "",
        ",,,",
    ],
)
def test_ietf_ratelimit_garbled_is_no_wait(value: str) -> None:
    assert limited({"RateLimit": value}) is None


def test_ietf_ratelimit_dictionary_form_is_read() -> None:
    assert limited({"RateLimit": "limit=100, remaining=0, reset=7"}) == 7.0
    assert limited({"RateLimit": "limit=100, remaining=3, reset=7"}) is None


def test_draft_ratelimit_remaining_zero_waits_its_reset() -> None:
    assert limited({"RateLimit-Remaining": "0", "RateLimit-Reset": "12"}) == 12.0


def test_x_ratelimit_remaining_zero_waits_a_delta_reset() -> None:
    assert limited({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "30"}) == 30.0


def test_x_ratelimit_remaining_zero_waits_a_github_epoch_reset() -> None:
    headers = {"x-ratelimit-remaining": " 0 ", "x-ratelimit-reset": str(int(NOW) + 42)}
    assert limited(headers) == 42.0


@pytest.mark.parametrize("prefix", ["", "X-"])
@pytest.mark.parametrize("remaining", ["1", "4999", "0.0", "-0", "zero", "", "0, 0"])
def test_remaining_other_than_exactly_zero_is_no_wait(prefix: str, remaining: str) -> None:
    headers = {f"{prefix}RateLimit-Remaining": remaining, f"{prefix}RateLimit-Reset": "5"}
    assert limited(headers) is None


@pytest.mark.parametrize("reset", [None, "", "soon", "-5"])
def test_remaining_zero_without_a_usable_reset_is_no_wait(reset: str | None) -> None:
    headers = {"X-RateLimit-Remaining": "0"}
    if reset is not None:
        headers["X-RateLimit-Reset"] = reset
    assert limited(headers) is None


def test_a_reset_already_past_is_zero() -> None:
    assert limited({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) - 5)}) == 0.0


def test_a_huge_reset_is_capped() -> None:
    assert limited({"RateLimit-Remaining": "0", "RateLimit-Reset": "9" * 30}) == MAX_RETRY_AFTER


def test_no_rate_limit_header_is_no_announcement() -> None:
    assert (
        announced_limit(response(200, {"Content-Type": "text/plain", "Retry-After": "3"})) is None
    )


def test_several_forms_wait_for_the_longest_exhausted_one() -> None:
    headers = {
        "RateLimit": '"default";r=0;t=4',
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": "9",
        "RateLimit-Remaining": "3",
        "RateLimit-Reset": "60",
    }
    assert limited(headers) == 9.0


@pytest.mark.parametrize(
    "headers",
    [
        {"RateLimit": '"default";r=0;t=0'},
        {"RateLimit": "limit=100, remaining=0, reset=0"},
        {"RateLimit-Remaining": "0", "RateLimit-Reset": "0"},
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "0"},
    ],
)
def test_a_reset_of_zero_is_a_wait_of_zero_not_no_reset(headers: dict[str, str]) -> None:
    assert limited(headers) == 0.0


@pytest.mark.parametrize(
    "lines",
    [
        [("RateLimit", '"minute";r=5;t=20'), ("RateLimit", '"hour";r=0;t=900')],
        [("RateLimit", '"hour";r=0;t=900'), ("RateLimit", '"minute";r=5;t=20')],
    ],
)
def test_a_ratelimit_field_sent_on_several_lines_is_read_as_one_list(
    lines: list[tuple[str, str]],
) -> None:
    assert exhausted_until(httpx.Response(200, headers=lines), NOW) == 900.0


def test_a_429_without_retry_after_waits_the_announced_reset() -> None:
    verdict = classify(response(429, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "6"}))
    assert (verdict.reason, verdict.after) == ("rate_limited", 6.0)


def test_a_429s_retry_after_wins_over_the_announced_reset() -> None:
    headers = {"Retry-After": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "6"}
    assert classify(response(429, headers)).after == 2.0


# -- through a client ---------------------------------------------------------------------

Handler = Callable[[httpx.Request], httpx.Response]


def unguarded(clock: FakeClock, handler: Handler) -> retrysafe.Client:
    """A client with no load protection: the hints alone are under test."""
    governor = retrysafe.Governor(retrysafe.GovernorSettings.off(), clock=clock)
    return retrysafe.Client(transport=httpx.MockTransport(handler), clock=clock, governor=governor)


def scripted(replies: list[httpx.Response], seen: list[httpx.Request]) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return replies[min(len(seen), len(replies)) - 1]

    return handle


def test_should_retry_false_stops_the_retry_of_a_503() -> None:
    clock, seen = FakeClock(), []
    reply = httpx.Response(503, headers={"x-should-retry": "false"})
    client = unguarded(clock, scripted([reply, httpx.Response(200)], seen))
    with pytest.raises(retrysafe.ServerError) as caught:
        client.get("http://api.test/")
    assert (len(seen), caught.value.reason, caught.value.retryable) == (
        1,
        "server_said_no_retry",
        False,
    )


def test_should_retry_true_retries_a_409_get() -> None:
    clock, seen = FakeClock(), []
    reply = httpx.Response(409, headers={"x-should-retry": "true"})
    client = unguarded(clock, scripted([reply, httpx.Response(200)], seen))
    assert client.get("http://api.test/").status_code == 200
    assert len(seen) == 2


def test_should_retry_true_never_repeats_a_post_without_a_key() -> None:
    clock, seen = FakeClock(), []
    reply = httpx.Response(409, headers={"Stripe-Should-Retry": "true"})
    client = unguarded(clock, scripted([reply, httpx.Response(200)], seen))
    with pytest.raises(retrysafe.ClientError) as caught:
        client.post("http://api.test/charges", content=b"{}")
    assert (len(seen), caught.value.reason) == (1, "unsafe_to_repeat")
    # Not repeated because the server may have acted; the error says so too.
    assert caught.value.processed == "maybe"


def test_should_retry_true_repeats_a_post_with_a_key() -> None:
    clock, seen = FakeClock(), []
    reply = httpx.Response(409, headers={"Stripe-Should-Retry": "true"})
    client = unguarded(clock, scripted([reply, httpx.Response(200)], seen))
    headers = {"Idempotency-Key": "charge-1"}
    assert client.post("http://api.test/charges", content=b"{}", headers=headers).is_success
    assert len(seen) == 2


def test_retry_after_ms_sets_the_wait_of_a_retry() -> None:
    clock, seen = FakeClock(), []
    reply = httpx.Response(503, headers={"Retry-After": "5", "retry-after-ms": "1250"})
    client = unguarded(clock, scripted([reply, httpx.Response(200)], seen))
    assert client.get("http://api.test/", policy=EXACT).status_code == 200
    assert clock.sleeps == [1.25]


# -- pacing by announced limits -----------------------------------------------------------


class AnnouncingServer:
    """Allows ``limit`` requests per window of ``window`` seconds on the fake clock,
    announcing what remains on every answer and refusing the rest with a 429."""

    def __init__(self, clock: FakeClock, *, limit: int, window: float, form: str) -> None:
        self.clock, self.limit, self.window, self.form = clock, limit, window, form
        self.started = clock.monotonic()
        self.used = 0
        self.arrivals: list[float] = []
        self.refused = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        now = self.clock.monotonic()
        self.arrivals.append(now)
        elapsed = now - self.started
        if elapsed >= self.window:
            self.started += self.window * (elapsed // self.window)
            self.used = 0
        reset = self.started + self.window - now
        if self.used >= self.limit:
            self.refused += 1
            return httpx.Response(429, headers={"Retry-After": str(max(1, round(reset)))})
        self.used += 1
        remaining = self.limit - self.used
        if self.form == "ietf":
            headers = {"RateLimit": f'"default";r={remaining};t={round(reset)}'}
        elif self.form == "github":
            wall = self.clock.time() + reset
            headers = {"X-RateLimit-Remaining": str(remaining), "X-RateLimit-Reset": str(int(wall))}
        else:
            headers = {"RateLimit-Remaining": str(remaining), "RateLimit-Reset": str(round(reset))}
        return httpx.Response(200, headers=headers)


def paced_client(clock: FakeClock, server: AnnouncingServer) -> retrysafe.Client:
    return retrysafe.Client(
        transport=httpx.MockTransport(server),
        clock=clock,
        governor=retrysafe.Governor(clock=clock),
        policy=EXACT,
    )


def test_remaining_zero_makes_the_next_call_wait_for_the_reset() -> None:
    clock = FakeClock()
    server = AnnouncingServer(clock, limit=1, window=2.0, form="draft")
    client = paced_client(clock, server)
    assert client.get("http://api.test/a").status_code == 200  # announces 0 left, reset in 2 s
    assert client.get("http://api.test/b").status_code == 200
    assert clock.sleeps[0] >= 2.0  # waited before sending
    assert server.arrivals == [0.0, pytest.approx(2.0)]  # nothing arrived inside the window
    assert server.refused == 0


@pytest.mark.parametrize("form", ["ietf", "github", "draft"])
def test_announced_limits_keep_a_burst_of_calls_free_of_429s(form: str) -> None:
    clock = FakeClock()
    server = AnnouncingServer(clock, limit=3, window=10.0, form=form)
    client = paced_client(clock, server)
    for index in range(7):
        assert client.get(f"http://api.test/{index}", policy=RetryPolicy(deadline=60)).is_success
    assert server.refused == 0
    assert len(server.arrivals) == 7


def test_the_pause_covers_the_whole_dependency() -> None:
    clock = FakeClock()
    seen: list[float] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(clock.monotonic())
        if request.url.path == "/first":
            return httpx.Response(
                200, headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3"}
            )
        return httpx.Response(200)

    governor = retrysafe.Governor(clock=clock)
    client = retrysafe.Client(
        transport=httpx.MockTransport(handle), clock=clock, governor=governor, policy=EXACT
    )
    client.get("http://api.test/first")
    client.get("http://api.test/other")
    client.get("http://elsewhere.test/")  # another origin: not paused
    assert seen == [0.0, 3.0, 3.0]


def test_a_reset_beyond_the_deadline_fails_at_once_without_sending() -> None:
    clock = FakeClock()
    server = AnnouncingServer(clock, limit=1, window=120.0, form="draft")
    client = paced_client(clock, server)
    client.get("http://api.test/a")
    with pytest.raises(retrysafe.ApiError) as caught:
        client.get("http://api.test/b", policy=RetryPolicy(deadline=5))
    assert caught.value.retry_after == pytest.approx(120.0)  # type: ignore[attr-defined]
    assert len(server.arrivals) == 1
    assert clock.sleeps == []


@pytest.mark.anyio
async def test_the_async_client_paces_by_announced_limits_too() -> None:
    clock = FakeClock()
    server = AnnouncingServer(clock, limit=1, window=2.0, form="github")
    async with retrysafe.AsyncClient(
        transport=httpx.MockTransport(server),
        clock=clock,
        governor=retrysafe.Governor(clock=clock),
        policy=EXACT,
    ) as client:
        await client.get("http://api.test/a")
        await client.get("http://api.test/b")
    assert (server.arrivals, server.refused) == ([0.0, 2.0], 0)


def test_quota_left_does_not_pace() -> None:
    clock = FakeClock()
    server = AnnouncingServer(clock, limit=5, window=60.0, form="ietf")
    client = paced_client(clock, server)
    for index in range(3):
        client.get(f"http://api.test/{index}")
    assert clock.sleeps == []


def test_without_a_limiter_announcements_are_only_read() -> None:
    clock = FakeClock()
    server = AnnouncingServer(clock, limit=1, window=2.0, form="draft")
    client = unguarded(clock, server)
    client.get("http://api.test/a")
    with pytest.raises(retrysafe.RateLimited):
        client.get("http://api.test/b", policy=RetryPolicy(attempts=1))
    assert server.refused == 1


def _announcing_then_counting(seen: list[float], clock: FakeClock) -> httpx.MockTransport:
    """A server whose first answer announces its limit used up for 2 s."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(clock.monotonic())
        if len(seen) == 1:
            return httpx.Response(200, headers={"RateLimit-Remaining": "0", "RateLimit-Reset": "2"})
        return httpx.Response(200)

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(
    ("limiter", "paused"),
    [
        (retrysafe.LimiterSettings(pace_on_rate_limit_headers=False), False),
        (retrysafe.LimiterSettings(cooldown_on_429=False), True),
    ],
)
def test_announced_pacing_has_its_own_switch(
    limiter: retrysafe.LimiterSettings, paused: bool
) -> None:
    clock = FakeClock()
    seen: list[float] = []
    governor = retrysafe.Governor(
        retrysafe.GovernorSettings(budget=None, breaker=None, limiter=limiter), clock=clock
    )
    with retrysafe.Client(
        transport=_announcing_then_counting(seen, clock), clock=clock, governor=governor
    ) as client:
        client.get("http://api.test/a")
        client.get("http://api.test/b")
    assert (seen[1] - seen[0] >= 2.0) is paused
