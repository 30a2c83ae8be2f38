"""The engine's waits and give-up decisions, exact on the fake clock.

The network here is httpx.MockTransport: these tests are about arithmetic.
I/O behaviour is tested over real sockets in test_client_*.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

import retrysafe
from retrysafe import Call, RetryPolicy
from retrysafe.attempt_plan import HARD_END_GRACE
from retrysafe.decisions import AttemptPlan
from retrysafe.governor import Governor, GovernorSettings
from retrysafe.testing import FakeClock

Handler = Callable[[httpx.Request], httpx.Response]


def scripted(*responses: httpx.Response) -> tuple[Handler, list[httpx.Request]]:
    """A handler answering with ``responses`` in order (the last repeats), and what it saw."""
    seen: list[httpx.Request] = []
    queue: Iterator[httpx.Response] = iter(responses)
    last = responses[-1]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return next(queue, last)

    return handler, seen


def client_for(handler: Handler, clock: FakeClock, **policy: object) -> retrysafe.Client:
    """A client with load protection off: these tests are about one call's arithmetic."""
    return retrysafe.Client(
        transport=httpx.MockTransport(handler),
        clock=clock,
        policy=RetryPolicy(**policy),  # type: ignore[arg-type]
        governor=Governor(GovernorSettings.off()),
    )


def test_backoff_waits_are_full_jitter_of_the_doubling_ceiling() -> None:
    clock = FakeClock(randoms=[0.5, 0.5, 0.5])
    handler, seen = scripted(
        httpx.Response(503), httpx.Response(503), httpx.Response(503), httpx.Response(200)
    )
    response = client_for(handler, clock).get("http://api.test/")
    assert response.status_code == 200
    assert clock.sleeps == [0.125, 0.25, 0.5]
    assert len(seen) == 4


def test_backoff_ceiling_stops_at_the_cap() -> None:
    clock = FakeClock(randoms=[1.0, 1.0, 1.0, 1.0, 1.0])
    handler, _ = scripted(httpx.Response(502))
    with pytest.raises(retrysafe.ServerError):
        client_for(handler, clock, attempts=6, backoff_base=1.0, backoff_cap=3.0, deadline=100).get(
            "http://api.test/"
        )
    assert clock.sleeps == [1.0, 2.0, 3.0, 3.0, 3.0]


def test_retry_after_wins_over_backoff_with_jitter_only_on_top() -> None:
    clock = FakeClock(randoms=[0.4])
    handler, _ = scripted(httpx.Response(429, headers={"Retry-After": "2"}), httpx.Response(200))
    client_for(handler, clock).get("http://api.test/")
    assert clock.sleeps == [pytest.approx(2.0 + 0.25 * 0.4)]


def test_retry_after_as_http_date_is_read_on_the_wall_clock() -> None:
    clock = FakeClock(randoms=[0.0])
    date = "Tue, 14 Nov 2023 22:13:25 GMT"  # 5 s after FakeClock's wall start
    handler, _ = scripted(httpx.Response(503, headers={"Retry-After": date}), httpx.Response(200))
    client_for(handler, clock).get("http://api.test/")
    assert clock.sleeps == [5.0]


def test_retry_after_beyond_the_deadline_gives_up_at_once() -> None:
    clock = FakeClock()
    handler, seen = scripted(httpx.Response(503, headers={"Retry-After": "3600"}))
    with pytest.raises(retrysafe.RetryAfterTooLong) as caught:
        client_for(handler, clock).get("http://api.test/")
    assert caught.value.retry_after == 3600.0
    assert caught.value.reason == "retry_after_too_long"
    assert caught.value.status == 503
    assert len(seen) == 1
    assert clock.sleeps == []


def test_retry_after_beyond_max_retry_after_gives_up_at_once() -> None:
    clock = FakeClock()
    handler, seen = scripted(httpx.Response(429, headers={"Retry-After": "20"}))
    with pytest.raises(retrysafe.RetryAfterTooLong):
        client_for(handler, clock, max_retry_after=10, deadline=100).get("http://api.test/")
    assert len(seen) == 1


def test_jitter_on_a_hint_never_pushes_past_the_deadline() -> None:
    clock = FakeClock(randoms=[1.0])
    handler, _ = scripted(httpx.Response(503, headers={"Retry-After": "2"}), httpx.Response(200))
    client_for(handler, clock, deadline=2.6, min_attempt_time=0.5).get("http://api.test/")
    # 0.1 s of room after hint + minimal attempt: jitter is clipped to it, never below the hint.
    assert clock.sleeps == [pytest.approx(2.1)]


def test_a_backoff_is_drawn_within_the_room_a_minimal_attempt_leaves() -> None:
    # The doubling ceiling is 0.8 s, but only 0.5 s of the deadline can be waited and still
    # leave a minimal attempt: the draw is scaled into those 0.5 s. (A long draw once ended
    # the call, where a short one, as likely, would have retried.)
    clock = FakeClock(randoms=[1.0, 0.5])
    handler, seen = scripted(httpx.Response(502), httpx.Response(502), httpx.Response(200))
    response = client_for(handler, clock, deadline=1.0, backoff_base=0.8, min_attempt_time=0.5).get(
        "http://api.test/"
    )
    assert response.status_code == 200
    # (the second wait: half of what is left of the room after the first, none)
    assert clock.sleeps == [0.5, 0.0]
    assert len(seen) == 3


def test_no_wait_at_all_when_less_than_a_useful_attempt_is_left() -> None:
    clock = FakeClock(randoms=[0.0])
    handler, seen = scripted(httpx.Response(502))

    def slow(request: httpx.Request) -> httpx.Response:
        clock.advance(0.6)  # the attempt leaves 0.4 s of the deadline, under 0.5 s
        return handler(request)

    with pytest.raises(retrysafe.ServerError) as caught:
        client_for(slow, clock, deadline=1.0, min_attempt_time=0.5).get("http://api.test/")
    assert caught.value.reason == "deadline_insufficient"
    assert caught.value.retryable is True
    assert len(seen) == 1
    assert clock.sleeps == []


def test_a_hint_equal_to_max_retry_after_is_waited() -> None:
    clock = FakeClock(randoms=[0.0])
    handler, seen = scripted(
        httpx.Response(429, headers={"Retry-After": "10"}), httpx.Response(200)
    )
    client_for(handler, clock, max_retry_after=10, deadline=100).get("http://api.test/")
    assert clock.sleeps == [10.0]
    assert len(seen) == 2


def test_a_hint_that_leaves_exactly_a_useful_attempt_is_waited_without_jitter() -> None:
    clock = FakeClock(randoms=[1.0])
    handler, seen = scripted(httpx.Response(503, headers={"Retry-After": "2"}), httpx.Response(200))
    client_for(handler, clock, deadline=2.5, min_attempt_time=0.5).get("http://api.test/")
    assert clock.sleeps == [2.0]
    assert len(seen) == 2


def test_attempts_run_out_with_the_whole_history() -> None:
    clock = FakeClock(randoms=[0.0, 0.0, 0.0])
    handler, seen = scripted(httpx.Response(500, json={"error": "boom"}))
    with pytest.raises(retrysafe.ServerError) as caught:
        client_for(handler, clock).get("http://api.test/")
    error = caught.value
    assert (error.reason, error.outcome, error.attempts, error.retryable) == (
        "attempts_exhausted",
        "internal_server_error",
        4,
        True,
    )
    assert [record.status for record in error.history] == [500, 500, 500, 500]
    assert error.body == {"error": "boom"}
    assert len(seen) == 4


def test_the_deadline_scope_binds_tighter_than_the_policy() -> None:
    clock = FakeClock(randoms=[1.0])
    handler, seen = scripted(httpx.Response(503, headers={"Retry-After": "3"}))
    with retrysafe.deadline(2, clock=clock), pytest.raises(retrysafe.RetryAfterTooLong):
        client_for(handler, clock).get("http://api.test/")
    assert len(seen) == 1


def test_no_attempt_starts_once_the_scope_has_run_out() -> None:
    clock = FakeClock()
    handler, seen = scripted(httpx.Response(200))
    with retrysafe.deadline(1, clock=clock):
        clock.advance(0.9)
        with pytest.raises(retrysafe.DeadlineExceeded) as caught:
            client_for(handler, clock).get("http://api.test/")
    assert caught.value.attempts == 0
    assert seen == []


def test_the_attempt_timeout_is_cut_to_the_time_left() -> None:
    clock = FakeClock()
    handler, seen = scripted(httpx.Response(200))
    response = client_for(handler, clock, deadline=3, attempt_timeout=10).get("http://api.test/")
    # (each phase ends the hard end's grace sooner, so the attempt ends on the deadline: see
    # attempt_plan.phase_limit)
    assert seen[0].extensions["timeout"]["read"] == 3 - HARD_END_GRACE
    assert response.extensions["retrysafe"].history[0].timeout == 3


def test_a_success_carries_its_report() -> None:
    clock = FakeClock(randoms=[0.5])
    handler, seen = scripted(httpx.Response(502), httpx.Response(201))
    response = client_for(handler, clock).post("http://api.test/pay", idempotency_key="op-1")
    report = response.extensions["retrysafe"]
    assert (report.attempts, report.waits, report.idempotency_key) == (2, (0.125,), "op-1")
    assert report.dependency == "http://api.test:80"
    assert [request.headers["Idempotency-Key"] for request in seen] == ["op-1", "op-1"]


def test_idempotency_key_true_makes_one_key_for_every_attempt() -> None:
    clock = FakeClock()
    handler, seen = scripted(httpx.Response(502), httpx.Response(502), httpx.Response(200))
    client_for(handler, clock).post("http://api.test/pay", json={"a": 1}, idempotency_key=True)
    keys = {request.headers["Idempotency-Key"] for request in seen}
    assert len(seen) == 3
    assert len(keys) == 1
    assert {request.content for request in seen} == {b'{"a":1}'}


def test_each_call_with_idempotency_key_true_gets_its_own_key() -> None:
    clock = FakeClock()
    handler, seen = scripted(httpx.Response(200))
    client = client_for(handler, clock)
    client.post("http://api.test/pay", idempotency_key=True)
    client.post("http://api.test/pay", idempotency_key=True)
    assert seen[0].headers["Idempotency-Key"] != seen[1].headers["Idempotency-Key"]


@pytest.mark.parametrize("bad", ["", "   ", 42])
def test_a_bad_idempotency_key_is_refused_before_sending(bad: object) -> None:
    handler, seen = scripted(httpx.Response(200))
    with pytest.raises(ValueError, match="idempotency_key"):
        client_for(handler, FakeClock()).post("http://api.test/", idempotency_key=bad)  # type: ignore[arg-type]
    assert seen == []


def test_a_per_call_policy_overrides_the_clients() -> None:
    clock = FakeClock()
    handler, seen = scripted(httpx.Response(503))
    with pytest.raises(retrysafe.ServerError):
        client_for(handler, clock).get("http://api.test/", policy=RetryPolicy(attempts=1))
    assert len(seen) == 1


def test_a_post_without_key_is_not_repeated_after_a_502() -> None:
    handler, seen = scripted(httpx.Response(502))
    with pytest.raises(retrysafe.ServerError) as caught:
        client_for(handler, FakeClock()).post("http://api.test/orders", json={})
    assert caught.value.reason == "unsafe_to_repeat"
    assert caught.value.retryable is False
    assert len(seen) == 1


def test_a_post_without_key_is_repeated_after_a_503() -> None:
    handler, seen = scripted(httpx.Response(503), httpx.Response(201))
    assert client_for(handler, FakeClock()).post("http://api.test/orders").status_code == 201
    assert len(seen) == 2


def test_a_streamed_body_is_never_resent() -> None:
    handler, seen = scripted(httpx.Response(503), httpx.Response(200))

    def body() -> Iterator[bytes]:
        yield b"chunk"

    with pytest.raises(retrysafe.ServerError) as caught:
        client_for(handler, FakeClock()).put("http://api.test/blob", content=body())
    assert caught.value.reason == "unsafe_to_repeat"
    assert len(seen) == 1


def test_hooks_see_every_retry_and_the_end_and_a_broken_hook_changes_nothing() -> None:
    events: list[retrysafe.RetryEvent] = []

    def broken(event: retrysafe.RetryEvent) -> None:
        raise RuntimeError("metrics backend down")

    handler, _ = scripted(httpx.Response(503), httpx.Response(200))
    client = retrysafe.Client(
        transport=httpx.MockTransport(handler),
        clock=FakeClock(randoms=[0.0]),
        hooks=[events.append, broken],
    )
    response = client.get("http://api.test/")
    assert response.status_code == 200
    assert [(e.kind, e.attempt, e.outcome, e.status) for e in events] == [
        ("attempt", 1, "service_unavailable", 503),
        ("retry", 1, "service_unavailable", 503),
        ("attempt", 2, "success", 200),
        ("success", 2, "success", 200),
    ]
    # The report's history names each attempt's number as the events do.
    history = retrysafe.report_of(response).history
    assert [(r.attempt, r.outcome) for r in history] == [(1, "service_unavailable"), (2, "success")]
    assert {e.reason for e in events} == {""}, "reason is only why a failed call stopped"


def test_the_call_refuses_steps_out_of_order() -> None:
    call = Call(httpx.Request("GET", "http://api.test/"), policy=RetryPolicy(), clock=FakeClock())
    stray = AttemptPlan(1, 1.0, cut_by_deadline=False, read_body=True)
    with pytest.raises(RuntimeError, match="needs state 'attempting'"):
        call.attempt_returned(stray, httpx.Response(200))
    plan = call.start_attempt()
    with pytest.raises(RuntimeError, match="needs state 'ready'"):
        call.start_attempt()
    with pytest.raises(RuntimeError, match="not the attempt in flight"):
        call.attempt_returned(stray, httpx.Response(200))
    assert isinstance(plan, AttemptPlan)


def test_the_transport_drop_in_returns_the_final_response_without_raising() -> None:
    handler, seen = scripted(httpx.Response(503))
    transport = retrysafe.RetryTransport(
        httpx.MockTransport(handler), clock=FakeClock(), policy=RetryPolicy(attempts=2)
    )
    with httpx.Client(transport=transport) as client:
        response = client.get("http://api.test/")
    assert response.status_code == 503
    report = response.extensions["retrysafe"]
    assert report.attempts == 2
    assert isinstance(report.error, retrysafe.ServerError)
    assert len(seen) == 2


def test_messages_are_one_line_that_say_what_happened_and_what_to_do() -> None:
    handler, _ = scripted(httpx.Response(502, text="Bad\ngateway"))
    with pytest.raises(retrysafe.ServerError) as caught:
        client_for(handler, FakeClock()).post("http://api.test/orders?api_key=s3cr3t-value")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("POST http://api.test/orders?api_key=[REDACTED] failed: HTTP 502")
    assert "(Bad gateway)" in message
    assert "idempotency key" in message
    assert "s3cr3t-value" not in message


def test_errors_survive_pickling_for_process_pools() -> None:
    import pickle

    handler, _ = scripted(httpx.Response(429, headers={"Retry-After": "5"}))
    with pytest.raises(retrysafe.RateLimited) as caught:
        client_for(handler, FakeClock(), attempts=1).get("http://api.test/")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (type(copy), copy.retry_after, copy.reason, str(copy)) == (
        retrysafe.RateLimited,
        5.0,
        caught.value.reason,
        str(caught.value),
    )


def test_a_write_that_may_have_been_processed_stays_maybe_whatever_came_after() -> None:
    replies: list[object] = [httpx.ReadTimeout("slow"), httpx.ConnectError("refused")]

    def handler(request: httpx.Request) -> httpx.Response:
        reply = replies[0] if len(replies) == 1 else replies.pop(0)
        assert isinstance(reply, Exception)
        raise reply

    with pytest.raises(retrysafe.TransportError) as caught:
        client_for(handler, FakeClock()).post("http://api.test/pay", idempotency_key="k")
    assert [record.outcome for record in caught.value.history] == [
        "read_timeout",
        "connect_error",
        "connect_error",
        "connect_error",
    ]
    assert caught.value.sent == "maybe"
    assert caught.value.processed == "maybe"


def test_only_refusals_mean_nothing_was_processed() -> None:
    handler, _ = scripted(httpx.Response(503), httpx.Response(429), httpx.Response(400))
    with pytest.raises(retrysafe.ClientError) as caught:
        client_for(handler, FakeClock()).post("http://api.test/pay")
    assert caught.value.processed == "no"


def test_a_transport_that_changes_its_timeouts_changes_neither_the_callers_nor_a_retry() -> None:
    seen: list[dict[str, float | None]] = []

    def shortens_then_fails(request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions["timeout"]
        seen.append(dict(timeouts))
        timeouts["read"] = 0.01  # a wrapped transport adjusting its own attempt
        return httpx.Response(503 if len(seen) == 1 else 200)

    caller = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
    client = client_for(shortens_then_fails, FakeClock(randoms=[0.0]))
    response = client.get("http://api.test/", extensions={"timeout": caller})
    assert response.status_code == 200
    assert seen == [caller, caller]  # each attempt starts from the caller's timeouts
    assert caller["read"] == 5.0  # and the caller's own dict is untouched
