"""Classification: what each outcome means, per the retry table in docs/retries.md."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from retrysafe import RetryPolicy, Verdict
from retrysafe.classify import (
    AttemptTimedOut,
    InvalidVerdict,
    classify_exception,
    classify_response,
    health,
    may_have_acted,
)

NOW = 1_700_000_000.0
POLICY = RetryPolicy()


def response(
    status: int, headers: dict[str, str] | None = None, **kwargs: object
) -> httpx.Response:
    return httpx.Response(status, headers=headers, **kwargs)  # type: ignore[arg-type]


def classify(resp: httpx.Response, *, keyed: bool = False, policy: RetryPolicy = POLICY) -> Verdict:
    return classify_response(resp, policy, keyed=keyed, now=NOW)


@pytest.mark.parametrize("status", [200, 201, 204, 301, 304])
def test_success_statuses(status: int) -> None:
    assert classify(response(status)).kind == "success"


@pytest.mark.parametrize(
    ("status", "reason"),
    [(408, "request_timeout"), (429, "rate_limited"), (503, "service_unavailable")],
)
def test_refused_before_work_is_retryable_and_unprocessed(status: int, reason: str) -> None:
    verdict = classify(response(status))
    assert (verdict.kind, verdict.reason, verdict.processed) == ("retry", reason, "no")


@pytest.mark.parametrize(
    ("status", "reason"),
    [(500, "internal_server_error"), (502, "bad_gateway"), (504, "gateway_timeout")],
)
def test_gateway_failures_are_retryable_but_maybe_processed(status: int, reason: str) -> None:
    verdict = classify(response(status))
    assert (verdict.kind, verdict.reason, verdict.processed) == ("retry", reason, "maybe")


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (400, "bad_request"),
        (401, "unauthorized"),
        (403, "forbidden"),
        (404, "not_found"),
        (409, "conflict"),
        (422, "unprocessable_content"),
        (418, "im_a_teapot"),
        (499, "status_499"),
        (501, "not_implemented"),
    ],
)
def test_client_errors_and_unlisted_statuses_are_permanent(status: int, reason: str) -> None:
    verdict = classify(response(status))
    assert (verdict.kind, verdict.reason) == ("permanent", reason)


def test_retry_after_is_carried_in_seconds() -> None:
    assert classify(response(503, {"Retry-After": "7"})).after == 7.0
    assert classify(response(429, {"Retry-After": "soon"})).after is None


def test_quota_header_exactly_zero_means_out_of_credits() -> None:
    verdict = classify(response(429, {"x-api-remaining-credits": "0"}))
    assert (verdict.kind, verdict.reason) == ("permanent", "quota_exhausted")


@pytest.mark.parametrize("value", ["", "-1", "abc", "00x", "5"])
def test_no_value_is_not_zero(value: str) -> None:
    verdict = classify(response(429, {"x-api-remaining-credits": value}))
    assert (verdict.kind, verdict.reason) == ("retry", "rate_limited")


def test_quota_header_names_come_from_the_policy() -> None:
    policy = RetryPolicy(quota_headers=("X-Credits",))
    assert classify(response(429, {"x-credits": "0"}), policy=policy).reason == "quota_exhausted"
    assert classify(response(429, {"x-api-remaining-credits": "0"}), policy=policy).reason == (
        "rate_limited"
    )


def test_409_with_a_key_waits_for_the_request_in_flight() -> None:
    verdict = classify(response(409, {"Retry-After": "1"}), keyed=True)
    assert (verdict.kind, verdict.reason, verdict.after, verdict.processed) == (
        "retry",
        "idempotency_key_in_use",
        1.0,
        "no",
    )
    assert classify(response(409), keyed=False).kind == "permanent"


def test_a_keyed_409_is_in_use_when_the_server_says_so_or_our_attempt_may_still_run() -> None:
    in_flight = {"Idempotency-Problem": "request-in-flight"}  # (retrysafe.idempotency's)
    assert classify(response(409, in_flight), keyed=True).reason == "idempotency_key_in_use"
    # Saying nothing of the key: in use only while an earlier attempt under it may run.
    silent = response(409, {"content-type": "application/json"})
    assert classify(silent, keyed=True).reason == "conflict"
    assert classify(silent, keyed=True).kind == "permanent"
    later = classify_response(silent, POLICY, keyed=True, now=NOW, key_may_be_in_use=True)
    assert (later.kind, later.reason) == ("retry", "idempotency_key_in_use")
    # The middleware's other answers, and its "not replayable", are final however it stands.
    for said in ("result-not-replayable", "key-reused"):
        verdict = classify_response(
            response(409, {"Idempotency-Problem": said}),
            POLICY,
            keyed=True,
            now=NOW,
            key_may_be_in_use=True,
        )
        assert verdict.kind == "permanent", said


def test_stripes_409_for_a_key_in_progress_is_in_use() -> None:
    """Stripe answers a request whose key another request still holds with a 409 and an
    ``idempotency_error`` body, no header: wait for that request, as Stripe's own SDK
    does (it was final at once). Its other errors under a 409 stay the app's conflict."""
    in_progress = httpx.Response(
        409,
        json={
            "error": {
                "type": "idempotency_error",
                "message": "There is currently another in-progress request using this "
                "Idempotent Key (that probably means you submitted twice, and the other "
                "request is still going through): idem-1. Please try again later.",
            }
        },
    )
    verdict = classify(in_progress, keyed=True)
    assert (verdict.kind, verdict.reason, verdict.processed) == (
        "retry",
        "idempotency_key_in_use",
        "no",
    )
    assert classify(in_progress, keyed=False).kind == "permanent"  # (no key: no such thing)
    other = httpx.Response(409, json={"error": {"type": "invalid_request_error"}})
    assert classify(other, keyed=True).reason == "conflict"


@pytest.mark.parametrize(
    "reused",
    [
        response(422, {"Idempotency-Problem": "key-reused"}),
        httpx.Response(
            422,
            headers={"content-type": "application/problem+json"},
            json={"type": "urn:retrysafe:idempotency:key-reused"},
        ),
        httpx.Response(
            400,
            json={"error": {"type": "idempotency_error", "message": "Keys for idempotent..."}},
        ),
    ],
    ids=["middleware-header", "problem-type", "stripe-400"],
)
def test_a_key_reused_for_another_request_is_final_and_named(reused: httpx.Response) -> None:
    """Found in a user trial: the middleware's 422 ``key-reused`` ended as
    ``unprocessable_content``, like any malformed body, and code reading the error could
    not tell the key was the problem."""
    verdict = classify(reused, keyed=True)
    assert (verdict.kind, verdict.reason) == ("permanent", "idempotency_key_reused")
    assert classify(reused, keyed=False).reason != "idempotency_key_reused"  # (no key)
    told_to_retry = httpx.Response(
        reused.status_code,
        headers={**reused.headers, "x-should-retry": "true"},
        content=reused.content,
    )
    assert classify(told_to_retry, keyed=True).kind == "permanent"


def test_a_keyed_422_of_the_apps_own_stays_unprocessable_content() -> None:
    own = httpx.Response(422, json={"error": {"type": "validation_error"}})
    assert classify(own, keyed=True).reason == "unprocessable_content"
    # (a problem type that only ends like it, and Stripe's error type on another status)
    lookalike = httpx.Response(
        422,
        headers={"content-type": "application/problem+json"},
        json={"type": "https://api.test/problems/not-key-reused"},
    )
    assert classify(lookalike, keyed=True).reason == "unprocessable_content"
    other_api = httpx.Response(422, json={"error": {"type": "idempotency_error"}})
    assert classify(other_api, keyed=True).reason == "unprocessable_content"


def test_a_replayed_409_is_the_apps_own_answer_not_a_key_in_use() -> None:
    replayed = response(409, {"Idempotent-Replayed": "true", "Retry-After": "1"})
    verdict = classify_response(replayed, POLICY, keyed=True, now=NOW, key_may_be_in_use=True)
    assert (verdict.kind, verdict.reason) == ("permanent", "conflict")


def test_a_replayed_response_is_final_whatever_its_status() -> None:
    replayed = {"Idempotent-Replayed": "true"}
    assert classify(response(201, replayed)).kind == "success"
    verdict = classify(response(503, replayed))
    assert (verdict.kind, verdict.reason) == ("permanent", "service_unavailable")


@pytest.mark.parametrize("value", ["true", "True", " TRUE "])
def test_the_replay_header_is_read_in_any_case(value: str) -> None:
    verdict = classify(response(503, {"Idempotent-Replayed": value}))
    assert (verdict.kind, verdict.reason) == ("permanent", "service_unavailable")


@pytest.mark.parametrize("said", ["request-in-flight", "Request-In-Flight", " REQUEST-IN-FLIGHT "])
def test_the_idempotency_problem_header_is_read_in_any_case(said: str) -> None:
    verdict = classify(response(409, {"Idempotency-Problem": said}), keyed=True)
    assert (verdict.kind, verdict.reason) == ("retry", "idempotency_key_in_use")


def test_a_rules_retry_without_a_wait_takes_the_servers_retry_after() -> None:
    def busy(resp: httpx.Response) -> Verdict | None:
        return Verdict.retry("busy_body") if resp.status_code == 503 else None

    def busy_for_one(resp: httpx.Response) -> Verdict | None:
        return Verdict.retry("busy_body", after=1.0)

    hinted = response(503, {"Retry-After": "3"})
    assert classify(hinted, policy=RetryPolicy(rules=(busy,))).after == 3.0
    assert classify(hinted, policy=RetryPolicy(rules=(busy_for_one,))).after == 1.0


def test_should_retry_true_does_not_reopen_a_result_that_was_not_kept() -> None:
    headers = {"Idempotency-Problem": "result-not-replayable", "x-should-retry": "true"}
    verdict = classify(response(409, headers), keyed=True)
    assert (verdict.kind, verdict.reason) == ("permanent", "result_not_replayable")


def test_rules_run_first_and_can_make_a_503_permanent() -> None:
    def refused_site(resp: httpx.Response) -> Verdict | None:
        if resp.status_code == 503 and "website returned HTTP 4" in resp.text:
            return Verdict.permanent("target_site_refused")
        return None

    policy = RetryPolicy(rules=(refused_site,))
    refused = response(503, text="The website returned HTTP 403 and could not be read.")
    assert classify(refused, policy=policy) == Verdict.permanent("target_site_refused")
    assert classify(response(503, text="busy"), policy=policy).kind == "retry"


def test_rules_can_turn_a_200_into_a_retryable_failure() -> None:
    def body_status(resp: httpx.Response) -> Verdict | None:
        is_json = resp.headers.get("content-type", "").startswith("application/json")
        if is_json and resp.json().get("status") == "error":
            return Verdict.retry("body_status_error")
        return None

    policy = RetryPolicy(rules=(body_status,))
    verdict = classify(response(200, json={"status": "error"}), policy=policy)
    assert (verdict.kind, verdict.reason) == ("retry", "body_status_error")
    assert classify(response(200, json={"status": "ok"}), policy=policy).kind == "success"


@pytest.mark.parametrize(
    ("exc", "reason", "processed"),
    [
        (httpx.ConnectError("refused"), "connect_error", "no"),
        (httpx.ConnectTimeout("slow"), "connect_timeout", "no"),
        (httpx.PoolTimeout("busy"), "pool_timeout", "no"),
        (httpx.ProxyError("proxy refused"), "proxy_error", "no"),
        (httpx.ReadTimeout("slow"), "read_timeout", "maybe"),
        (httpx.WriteTimeout("slow"), "write_timeout", "maybe"),
        (httpx.WriteError("broken pipe"), "write_error", "maybe"),
        (httpx.ReadError("reset"), "connection_reset", "maybe"),
        (httpx.CloseError("unclean close"), "network_error", "maybe"),
        (httpx.RemoteProtocolError("closed"), "remote_protocol_error", "maybe"),
        (AttemptTimedOut("too long"), "attempt_timeout", "maybe"),
        (httpx.DecodingError("bad gzip"), "undecodable_body", "maybe"),
    ],
)
def test_exceptions_by_how_far_the_request_got(exc: Exception, reason: str, processed: str) -> None:
    verdict = classify_exception(exc, during_body=False)
    assert (verdict.kind, verdict.reason, verdict.processed) == ("retry", reason, processed)


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (httpx.RemoteProtocolError("incomplete body"), "truncated_body"),
        (httpx.ReadError("reset"), "truncated_body"),
        (httpx.ReadTimeout("slow"), "read_timeout"),
        (AttemptTimedOut("too long"), "read_timeout"),  # a timeout, not a truncated body
        (httpx.DecodingError("bad gzip"), "undecodable_body"),
    ],
)
def test_errors_while_reading_the_body(exc: Exception, reason: str) -> None:
    verdict = classify_exception(exc, during_body=True)
    assert (verdict.kind, verdict.reason, verdict.processed) == ("retry", reason, "maybe")


def test_requests_that_can_never_work_are_permanent() -> None:
    assert classify_exception(httpx.UnsupportedProtocol("ftp"), during_body=False).kind == (
        "permanent"
    )


def test_a_request_refused_on_this_side_was_never_sent() -> None:
    """A bad URL scheme or a request httpx will not send fails before anything leaves:
    final, and surely not processed, so the error never says the server may have acted."""
    for exc in (httpx.UnsupportedProtocol("ftp"), httpx.LocalProtocolError("bad header")):
        verdict = classify_exception(exc, during_body=False)
        assert (verdict.kind, verdict.processed) == ("permanent", "no"), exc
        assert not may_have_acted(verdict, None), exc


def test_a_rule_that_cannot_parse_the_body_finds_it_unreadable() -> None:
    def wants_json(resp: httpx.Response) -> Verdict | None:
        return Verdict.success() if resp.json() else None

    policy = RetryPolicy(rules=(wants_json,))
    verdict = classify(response(200, text="<html>oops</html>"), policy=policy)
    assert (verdict.kind, verdict.reason) == ("retry", "unreadable_body")


def test_a_rule_with_a_bug_is_not_hidden() -> None:
    def buggy(resp: httpx.Response) -> Verdict | None:
        raise KeyError("typo")

    with pytest.raises(KeyError):
        classify(response(200), policy=RetryPolicy(rules=(buggy,)))


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Verdict.retry("slow_down", after=-1), "after"),
        (lambda: Verdict.retry("slow_down", after=float("nan")), "after"),
        (lambda: Verdict.retry("slow_down", after="2"), "after"),  # type: ignore[arg-type]
        (lambda: Verdict.retry("slow_down", after=True), "after"),
        (lambda: Verdict.permanent(""), "reason"),
        (lambda: Verdict.permanent("  "), "reason"),
        (lambda: Verdict.permanent(5), "reason"),  # type: ignore[arg-type]
        (lambda: Verdict.retry("x", processed="yes"), "processed"),  # type: ignore[arg-type]
        (lambda: Verdict("later", "x"), "kind"),  # type: ignore[arg-type]
    ],
)
def test_a_verdict_with_a_wrong_field_is_refused_naming_it(
    make: Callable[[], Verdict], field: str
) -> None:
    with pytest.raises(InvalidVerdict, match=rf"^Verdict\.{field} must be"):
        make()


def test_a_wait_of_zero_or_of_whole_seconds_is_a_verdicts_after() -> None:
    assert [Verdict.retry("x", after=after).after for after in (0, 2, 0.5)] == [0, 2, 0.5]


def test_a_rule_that_builds_a_wrong_verdict_is_a_bug_not_an_unreadable_body() -> None:
    """InvalidVerdict is a ValueError, which a rule raises for a body it cannot parse:
    it is told apart, and propagates as the rule's bug it is."""

    def negative_wait(resp: httpx.Response) -> Verdict | None:
        return Verdict.retry("slow_down", after=-1)

    with pytest.raises(InvalidVerdict):
        classify(response(503), policy=RetryPolicy(rules=(negative_wait,)))


def test_a_rule_that_returns_no_verdict_is_named() -> None:
    def says_a_string(resp: httpx.Response) -> Verdict | None:
        return "permanent"  # type: ignore[return-value]

    with pytest.raises(TypeError, match=r"says_a_string.* returned str: a rule returns a"):
        classify(response(503), policy=RetryPolicy(rules=(says_a_string,)))


def _as_httpx_maps_it(cause: Exception) -> httpx.LocalProtocolError:
    """``cause``, raised inside httpcore's sync HTTP/2 connection, as httpx hands it on."""
    import httpcore

    try:
        try:
            try:
                raise cause
            except Exception as exc:
                raise httpcore.LocalProtocolError(exc)  # noqa: B904 - as httpcore does
        except httpcore.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
    except httpx.LocalProtocolError as error:
        return error


def test_h2_refusing_to_open_one_more_stream_was_never_sent_and_may_go_again() -> None:
    h2_exceptions = pytest.importorskip("h2.exceptions")
    error = _as_httpx_maps_it(h2_exceptions.TooManyStreamsError("Max outbound streams is 3"))
    verdict = classify_exception(error, during_body=False)
    assert (verdict.kind, verdict.reason, verdict.processed) == ("retry", "stream_limit", "no")


def test_other_local_protocol_errors_stay_final() -> None:
    error = _as_httpx_maps_it(ValueError("Invalid input ConnectionInputs.SEND_HEADERS"))
    verdict = classify_exception(error, during_body=False)
    assert (verdict.kind, verdict.reason) == ("permanent", "invalid_request")


def test_only_a_retry_verdict_is_retryable() -> None:
    """``Verdict.retryable`` is True for a retry alone: a success or a final answer is not."""
    assert Verdict.retry("busy_body").retryable
    assert not Verdict.permanent("error_in_body").retryable
    assert not Verdict.success().retryable


def test_a_final_answer_leaves_open_whether_the_server_acted() -> None:
    """A permanent verdict does not claim the server did nothing: a 500 the server says
    not to retry is final, and still maybe processed, as any 500 is."""
    assert Verdict.permanent("error_in_body").processed == "maybe"
    said = response(500, {"x-should-retry": "false"})
    verdict = classify(said)
    assert (verdict.kind, verdict.reason, verdict.processed) == (
        "permanent",
        "server_said_no_retry",
        "maybe",
    )
    assert may_have_acted(verdict, said)


def test_a_replay_header_other_than_true_is_no_replay() -> None:
    """Only ``Idempotent-Replayed: true`` marks a stored answer: with ``false`` a 503 is
    the server's live refusal, retried as the table says."""
    verdict = classify(response(503, {"Idempotent-Replayed": "false"}))
    assert (verdict.kind, verdict.reason, verdict.processed) == (
        "retry",
        "service_unavailable",
        "no",
    )


def test_the_first_rule_with_a_verdict_decides() -> None:
    """Rules are asked in the order given; the first to return a verdict decides, and a
    rule returning None passes the response on to the next."""

    def no_opinion(resp: httpx.Response) -> Verdict | None:
        return None

    def final(resp: httpx.Response) -> Verdict | None:
        return Verdict.permanent("first_rule")

    def retry(resp: httpx.Response) -> Verdict | None:
        return Verdict.retry("second_rule")

    policy = RetryPolicy(rules=(no_opinion, final, retry))
    assert classify(response(503), policy=policy) == Verdict.permanent("first_rule")


def test_a_redirect_a_rule_passes_over_is_a_success() -> None:
    """A 3xx is no failure: when the policy has rules and none has a verdict on it, it is
    a success, as it is without rules."""

    def no_opinion(resp: httpx.Response) -> Verdict | None:
        return None

    policy = RetryPolicy(rules=(no_opinion,))
    for status in (301, 304):
        assert classify(response(status), policy=policy).kind == "success", status


def test_a_409_without_a_key_is_final_even_with_retry_after() -> None:
    """Only a keyed request's 409 can mean "key in use": without a key a 409 is the app's
    own conflict, final, whatever Retry-After it carries."""
    verdict = classify(response(409, {"Retry-After": "1"}), keyed=False)
    assert (verdict.kind, verdict.reason) == ("permanent", "conflict")


def test_a_transport_error_of_no_known_kind_is_final() -> None:
    """An error the table does not know (no connect, timeout, network or protocol error
    of httpx's) is final as ``transport_error``: it is never retried blind."""
    verdict = classify_exception(httpx.TransportError("unknown"), during_body=False)
    assert (verdict.kind, verdict.reason) == ("permanent", "transport_error")


def test_a_final_verdict_is_about_the_request_not_the_dependencys_health() -> None:
    """Only trouble another attempt might clear counts against the dependency: a final
    verdict is neutral, a 5xx's or an unknown transport error's alike."""
    for status, said in ((501, {}), (503, {"x-should-retry": "false"})):
        verdict = classify(response(status, said))
        assert verdict.kind == "permanent", status
        assert health(verdict, status) == "neutral", status
    assert health(Verdict.permanent("transport_error"), None) == "neutral"
    assert health(classify(response(503)), 503) == "unhealthy"


def test_a_pool_timeout_is_the_clients_own_queue_not_the_dependencys_health() -> None:
    """More requests at once than the client's connections: the dependency never saw the
    request (the attempts holding the connections tell how it answers). A connect
    timeout, the server not taking connections, still counts."""
    pooled = classify_exception(httpx.PoolTimeout("busy"), during_body=False)
    assert (pooled.kind, pooled.reason) == ("retry", "pool_timeout")
    assert health(pooled, None) == "neutral"
    connect = classify_exception(httpx.ConnectTimeout("slow"), during_body=False)
    assert health(connect, None) == "unhealthy"
    # an HTTP/2 stream the client's own connection refused at its limit: never sent either
    assert health(Verdict.retry("stream_limit", processed="no"), None) == "neutral"
