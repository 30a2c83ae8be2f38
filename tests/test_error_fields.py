"""What an ApiError carries across a process boundary and prints: every field survives
pickling (a process pool hands the error back to its parent), but the request's secrets,
and the repr names the fields a log line needs and nothing of the body.

The network here is httpx.MockTransport: these tests are about the error itself.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe.errors import PICKLED_BODY_AT_MOST
from retrysafe.governor import Governor, GovernorSettings
from retrysafe.redact import SCRUB_MARGIN
from retrysafe.testing import FakeClock

Handler = Callable[[httpx.Request], httpx.Response]


def client_for(handler: Handler) -> retrysafe.Client:
    return retrysafe.Client(
        transport=httpx.MockTransport(handler),
        clock=FakeClock(),
        governor=Governor(GovernorSettings.off()),
        policy=retrysafe.RetryPolicy(attempts=2),
    )


def lost_reply(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("the reply was lost", request=request)


def _fields(error: retrysafe.ApiError) -> dict[str, object]:
    """Every field but the response, which pickles as a copy (compared on its own)."""
    return {name: value for name, value in vars(error).items() if name != "response"}


def test_a_pickled_transport_error_keeps_every_field() -> None:
    with pytest.raises(retrysafe.TransportError) as caught:
        client_for(lost_reply).post("http://api.test/pay", json={"a": 1}, idempotency_key="k-9")
    error = caught.value
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is retrysafe.TransportError
    assert _fields(copy) == _fields(error)
    # the fields a caller acts on after an ambiguous failure, named one by one
    assert (copy.idempotency_key, copy.processed, copy.sent) == ("k-9", "maybe", "maybe")
    assert [record.outcome for record in copy.history] == ["read_timeout", "read_timeout"]
    assert (str(copy), repr(copy)) == (str(error), repr(error))


def test_a_pickled_client_error_keeps_its_body_and_response() -> None:
    def refusing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"error": "amount must be positive"})

    with pytest.raises(retrysafe.ClientError) as caught:
        client_for(refusing).post("http://api.test/pay", json={"amount": -1})
    copy = pickle.loads(pickle.dumps(caught.value))
    assert _fields(copy) == _fields(caught.value)
    assert copy.body == {"error": "amount must be positive"}
    assert copy.response is not None
    assert (copy.response.status_code, copy.response.json()) == (
        422,
        {"error": "amount must be positive"},
    )


def test_a_pickled_error_leaves_the_requests_secrets_behind() -> None:
    """A pickled error may leave the process (a task queue's result store): its response
    goes with it, but not the credentials of the request it answers, nor a cookie."""

    def refusing(request: httpx.Request) -> httpx.Response:
        headers = {"Set-Cookie": "sid=COOKIE_SECRET_8", "X-Request-Id": "req-8"}
        return httpx.Response(400, json={"error": "no"}, headers=headers)

    secrets = ["QUERY_SECRET_8", "sk-live-HEADER_SECRET_8", "HDR_SECRET_8", "BODY_SECRET_8"]
    with pytest.raises(retrysafe.ClientError) as caught:
        client_for(refusing).post(
            "https://api.test/pay?api_key=QUERY_SECRET_8&page=2",
            headers={
                "Authorization": "Bearer sk-live-HEADER_SECRET_8",
                "X-Api-Key": "HDR_SECRET_8",
            },
            json={"password": "BODY_SECRET_8"},
        )
    blob = pickle.dumps(caught.value)
    for secret in [*secrets, "COOKIE_SECRET_8"]:
        assert secret.encode() not in blob
    copy = pickle.loads(blob)
    assert copy.response is not None
    assert (copy.response.status_code, copy.response.json()) == (400, {"error": "no"})
    assert copy.response.headers["X-Request-Id"] == "req-8"
    assert copy.response.headers["Set-Cookie"] == "[REDACTED]"
    request = copy.response.request
    assert (request.method, request.url.path, request.url.params["page"]) == ("POST", "/pay", "2")
    assert request.headers["Authorization"] == "[REDACTED]"
    assert request.headers["Content-Type"] == "application/json"
    # the error in this process keeps what it was given
    assert caught.value.response is not None
    assert caught.value.response.request.headers["X-Api-Key"] == "HDR_SECRET_8"


def test_a_pickled_errors_response_body_leaves_an_echoed_secret_behind() -> None:
    def echoing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": f"bad request: {request.content.decode()}"})

    with pytest.raises(retrysafe.ClientError) as caught:
        client_for(echoing).post("https://api.test/login", data={"password": "ECHOED-PW-81"})
    blob = pickle.dumps(caught.value)
    assert b"ECHOED-PW-81" not in blob
    copy = pickle.loads(blob)
    assert copy.response is not None
    assert copy.response.json() == {"error": "bad request: password=[REDACTED]"}


def _pickled_404_body(body: bytes, *, token: str = "") -> bytes:
    """The response body a pickled ClientError carries, for a 404 with ``body``, to a
    request bearing ``token``."""

    def answering(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, content=body)

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with pytest.raises(retrysafe.ClientError) as caught:
        client_for(answering).get("https://api.test/item", headers=headers)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert copy.response is not None
    return copy.response.content


def test_a_pickled_error_carries_at_most_about_a_mib_of_its_response_body() -> None:
    """A body of 16 MB that is not text took a second to scrub and went whole into every
    pickle (review95); a pickled error now carries its first MiB."""
    body = bytes(range(256)) * (16 * 4096)  # 16 MiB, not UTF-8
    carried = _pickled_404_body(body)
    assert carried == body[:PICKLED_BODY_AT_MOST]


def test_a_pickled_error_carries_a_body_of_the_limit_whole() -> None:
    body = b"x" * (PICKLED_BODY_AT_MOST + SCRUB_MARGIN)
    assert _pickled_404_body(body) == body


def test_a_pickled_errors_body_cut_at_the_limit_leaves_no_part_of_a_secret_across_it() -> None:
    token = "sk_live_" + "Q7w8E9r0" * 4
    body = b"x" * (PICKLED_BODY_AT_MOST - 10) + token.encode() + b"y" * (2 * SCRUB_MARGIN)
    carried = _pickled_404_body(body, token=token)
    assert token[:12].encode() not in carried
    assert carried.startswith(b"x" * (PICKLED_BODY_AT_MOST - 10))
    assert len(carried) <= PICKLED_BODY_AT_MOST + len("[REDACTED]")


def test_a_pickled_refusal_keeps_its_detail_and_wait() -> None:
    error = retrysafe.CircuitOpen(
        retry_after=12.5,
        detail="5 failures in 10 s (BreakerSettings(failures=5))",
        reason="circuit_open",
        outcome="circuit_open",
        method="GET",
        url="http://api.test/",
        retryable=True,
    )
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is retrysafe.CircuitOpen
    assert _fields(copy) == _fields(error)
    assert (copy.retry_after, copy.detail) == (12.5, error.detail)
    assert str(copy) == str(error)


def test_the_repr_names_the_fields_and_leaves_the_body_out() -> None:
    def refusing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"card": "4242 4242 4242 4242"})

    with pytest.raises(retrysafe.ClientError) as caught:
        client_for(refusing).post("http://api.test/pay?api_key=s3cr3t-value")
    assert repr(caught.value) == (
        "ClientError(reason='bad_request', status=400, retryable=False, attempts=1, "
        "method='POST', url='http://api.test/pay?api_key=[REDACTED]')"
    )


# -- the message: one line, what happened, how often, why it stopped, what to do -----------


@pytest.mark.parametrize(("headers", "retry_after"), [({"Retry-After": "12"}, 12.0), ({}, None)])
def test_a_server_error_carries_the_wait_its_last_response_asked_for(
    headers: dict[str, str], retry_after: float | None
) -> None:
    def unavailable(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers=headers)

    once = retrysafe.RetryPolicy(attempts=1)
    with pytest.raises(retrysafe.ServerError) as caught:
        client_for(unavailable).get("http://api.test/things", policy=once)
    assert caught.value.retry_after == retry_after
    assert str(caught.value).endswith("; try again in 12.0 s") == (retry_after is not None)
    assert pickle.loads(pickle.dumps(caught.value)).retry_after == retry_after


def test_a_client_error_that_may_be_answered_later_says_to_try_again_later() -> None:
    """A 408 on every attempt: the request is not wrong, the server was not ready."""

    def timing_out(request: httpx.Request) -> httpx.Response:
        return httpx.Response(408)

    with pytest.raises(retrysafe.ClientError) as caught:
        client_for(timing_out).get("http://api.test/things")
    assert caught.value.retryable
    assert str(caught.value).endswith("; the server may take it later; try again later")


def test_a_message_names_the_reason_only_when_it_is_not_the_outcome() -> None:
    # A 400 is why the call stopped: the outcome is the reason, said once.
    def refusing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400)

    with pytest.raises(retrysafe.ClientError) as caught:
        client_for(refusing).get("http://api.test/things")
    assert str(caught.value) == (
        "GET http://api.test/things failed: HTTP 400 bad_request after 1 attempt in 0.00s; "
        "fix the request (see .body); repeating it will not help"
    )

    # A 502 on every attempt: the call stopped because the attempts ran out, and says so.
    def failing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502)

    with pytest.raises(retrysafe.ServerError) as caught:
        client_for(failing).get("http://api.test/things")
    assert re.fullmatch(
        r"GET http://api\.test/things failed: HTTP 502 bad_gateway after 2 attempts in "
        r"\d+\.\d\ds, gave up: attempts_exhausted; "
        + re.escape("the server is failing; try again later or contact its operators"),
        str(caught.value),
    ), str(caught.value)


def test_a_deadline_that_left_no_room_says_no_attempt_started() -> None:
    clock = FakeClock()
    client = retrysafe.Client(transport=httpx.MockTransport(lost_reply), clock=clock)
    with (
        pytest.raises(retrysafe.DeadlineExceeded) as caught,
        retrysafe.deadline(0.1, clock=clock),  # (below min_attempt_time: none starts)
    ):
        client.get("http://api.test/things")
    assert caught.value.attempts == 0
    message = str(caught.value)
    assert " after 0 attempts in " in message
    # nothing ran, so there is no call to make cheaper: the advice is about the deadline
    assert "no attempt started: the deadline had no room left for one" in message
    assert "make the call cheaper" not in message


def test_a_keyed_stream_the_server_may_have_acted_on_blames_only_the_body() -> None:
    """The key makes a repeat safe: only the spent body kept the request from being sent
    again, and the advice does not ask a caller who gave a key for one."""

    def read_then_lost(request: httpx.Request) -> httpx.Response:
        request.read()  # (the server had the whole body: it may have acted)
        raise httpx.ReadTimeout("the reply was lost", request=request)

    def body() -> Iterator[bytes]:
        yield b'{"amount": 100}'

    with pytest.raises(retrysafe.TransportError) as caught:
        client_for(read_then_lost).post(
            "http://api.test/pay", content=body(), idempotency_key="pay-2"
        )
    error = caught.value
    assert (error.reason, error.processed, error.spent_body, error.idempotency_key) == (
        "unsafe_to_repeat",
        "maybe",
        True,
        "pay-2",
    )
    assert str(error).endswith(
        "; not repeated, since its body was a stream (a generator, or a file that cannot be "
        "rewound), spent once sent: send the body as bytes to let retries send it again"
    )
    assert "may already have acted" not in str(error)


def test_a_request_httpx_refuses_to_send_says_to_fix_it_not_to_wait(chaos: Any) -> None:
    """A header value httpx cannot write: nothing left the process, and no network or
    wait will fix it (over a real socket: httpx's own transport refuses it)."""
    with retrysafe.Client() as client, pytest.raises(retrysafe.TransportError) as caught:
        client.post(chaos.url("/echo"), json={"a": 1}, headers={"X-Note": "line\nbreak"})
    error = caught.value
    assert (error.outcome, error.processed, error.sent, error.retryable, error.attempts) == (
        "invalid_request",
        "no",
        "no",
        False,
        1,
    )
    assert " failed: invalid_request after 1 attempt in " in str(error)
    assert str(error).endswith(
        "s; the request could not be sent as built: httpx refused a header or the body "
        "(a header value with a space at either end or a line break, say; the error's "
        "__cause__ names it); fix it; the server never received it"
    )
    assert chaos.log() == []


def test_a_long_failing_body_shows_as_a_bounded_excerpt_and_is_kept_whole() -> None:
    text = "upstream said: " + "x" * 985

    def failing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text=text)

    with pytest.raises(retrysafe.ClientError) as caught:
        client_for(failing).get("http://api.test/things")
    assert caught.value.body == text
    excerpt = text[:197] + "..."
    assert f"HTTP 400 bad_request ({excerpt}) after 1 attempt" in str(caught.value)


def test_a_json_failing_body_within_the_limit_is_parsed_and_a_longer_one_is_cut_text() -> None:
    """``body`` holds the failing body parsed when JSON, up to 64 KiB; past that, the
    first 64 KiB as text (a cut JSON document no longer parses)."""
    errors = [{"field": f"items.{n}", "error": "out of stock"} for n in range(200)]
    huge = "y" * (70 * 1024)

    def answering(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"errors": errors if request.url.path == "/a" else huge})

    client = client_for(answering)
    with pytest.raises(retrysafe.ClientError) as caught:
        client.post("http://api.test/a")
    assert caught.value.response is not None
    assert 4 * 1024 < len(caught.value.response.content) < 64 * 1024
    assert caught.value.body == {"errors": errors}
    with pytest.raises(retrysafe.ClientError) as caught:
        client.post("http://api.test/b")
    assert isinstance(caught.value.body, str)
    assert len(caught.value.body) == 64 * 1024
    assert caught.value.body.startswith('{"errors":"yyy')


def test_a_later_hop_that_runs_out_of_retries_says_what_the_earlier_hops_used() -> None:
    # One retry allowance serves a whole redirect chain: each hop here fails once with a
    # 503 before it redirects, so the fourth hop finds the chain's three retries used and
    # gives up after its one attempt. Its error says so, rather than "after 1 attempt,
    # gave up: attempts_exhausted" alone.
    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        seen.append(path)
        if seen.count(path) == 1:
            return httpx.Response(503)
        hop = int(path.rsplit("/", 1)[1])
        return httpx.Response(302, headers={"Location": f"/hop/{hop + 1}"})

    clock = FakeClock(randoms=[0.0] * 8)
    with (
        retrysafe.Client(
            transport=httpx.MockTransport(server), clock=clock, follow_redirects=True
        ) as client,
        pytest.raises(retrysafe.ServerError) as caught,
    ):
        client.get("http://api.test/hop/1")
    error = caught.value
    assert seen == ["/hop/1", "/hop/1", "/hop/2", "/hop/2", "/hop/3", "/hop/3", "/hop/4"]
    assert (error.reason, error.attempts, error.earlier_retries) == ("attempts_exhausted", 1, 3)
    assert "after 1 attempt on this hop (its redirect chain's earlier hops used 3 retries)" in str(
        error
    )
    assert pickle.loads(pickle.dumps(error)).earlier_retries == 3


def test_a_call_without_a_redirect_chain_says_nothing_of_hops() -> None:
    clock = FakeClock(randoms=[0.0] * 8)
    with (
        retrysafe.Client(
            transport=httpx.MockTransport(lambda request: httpx.Response(503)), clock=clock
        ) as client,
        pytest.raises(retrysafe.ServerError) as caught,
    ):
        client.get("http://api.test/items")
    assert (caught.value.earlier_retries, caught.value.earlier_hops_elapsed) == (0, 0.0)
    assert "hop" not in str(caught.value)


def test_a_later_hop_left_no_time_to_start_says_what_the_earlier_hops_took() -> None:
    # One deadline serves a whole redirect chain: each hop here takes 0.4 s of the 1.5 s
    # deadline, so the fourth finds less than min_attempt_time (0.5 s) left and sends
    # nothing. Its error, with attempts=0 and no history, says the earlier hops took the
    # time, not only that one of several things "may have used it up".
    clock = FakeClock(randoms=[0.0] * 8)
    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        clock.advance(0.4)
        hop = int(request.url.path.rsplit("/", 1)[1])
        return httpx.Response(302, headers={"Location": f"/hop/{hop + 1}"})

    with (
        retrysafe.Client(
            transport=httpx.MockTransport(server),
            clock=clock,
            follow_redirects=True,
            policy=retrysafe.RetryPolicy(deadline=1.5),
        ) as client,
        pytest.raises(retrysafe.DeadlineExceeded) as caught,
    ):
        client.get("http://api.test/hop/1")
    error = caught.value
    assert seen == ["/hop/1", "/hop/2", "/hop/3"]
    assert (error.attempts, error.history) == (0, ())
    assert error.earlier_hops_elapsed == pytest.approx(1.2)
    assert error.elapsed == pytest.approx(1.2)
    assert "after 0 attempts on this hop in 1.20s" in str(error)
    assert (
        "no attempt started on this hop: less than the policy's min_attempt_time was left of "
        "the deadline after its redirect chain's earlier hops took 1.20s" in str(error)
    )
    assert pickle.loads(pickle.dumps(error)).earlier_hops_elapsed == pytest.approx(1.2)


def test_a_call_left_no_time_by_its_scope_does_not_blame_redirects() -> None:
    clock = FakeClock()
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with (
        retrysafe.Client(transport=transport, clock=clock) as client,
        retrysafe.deadline(0.2, clock=clock),
        pytest.raises(retrysafe.DeadlineExceeded) as caught,
    ):
        client.get("http://api.test/items")
    assert (caught.value.attempts, caught.value.earlier_hops_elapsed) == (0, 0.0)
    assert "hop" not in str(caught.value)
    assert "an enclosing retrysafe.deadline or a wait" in str(caught.value)


def test_a_keyed_write_the_server_refused_says_it_did_not_act() -> None:
    # A 503 is a refusal before any work: the server got the request. "Never received it"
    # (what a refused connection gets) misled a caller deciding whether to resend.
    client = client_for(lambda request: httpx.Response(503))
    with pytest.raises(retrysafe.ServerError) as caught:
        client.post("http://api.test/orders", idempotency_key="order-7")
    assert caught.value.processed == "no"
    assert str(caught.value).endswith("; the server did not act on it")


def test_a_keyed_write_that_never_connected_says_the_server_never_received_it() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(retrysafe.TransportError) as caught:
        client_for(refused).post("http://api.test/orders", idempotency_key="order-7")
    assert caught.value.processed == "no"
    assert str(caught.value).endswith("; the server never received it")


def test_a_write_refused_then_not_connected_does_not_say_it_was_never_received() -> None:
    # A 503, then connections refused: nothing was done, but the server did get the first
    # attempt. (The note once read "the server answered without acting on it" after "no
    # usable answer came", contradicting it.)
    answers = iter([httpx.Response(503)])

    def refused_after_a_503(request: httpx.Request) -> httpx.Response:
        answer = next(answers, None)
        if answer is None:
            raise httpx.ConnectError("connection refused", request=request)
        return answer

    with pytest.raises(retrysafe.TransportError) as caught:
        client_for(refused_after_a_503).post("http://api.test/orders", idempotency_key="o-8")
    assert [record.status for record in caught.value.history] == [503, None]
    assert str(caught.value).endswith("; the server did not act on it")


def test_an_error_pickled_before_the_hop_fields_reads_them_as_none_used() -> None:
    error = retrysafe.ServerError(
        reason="attempts_exhausted", outcome="bad_gateway", method="GET", url="u", retryable=True
    )
    state = dict(error.__dict__)
    del state["earlier_retries"], state["earlier_hops_elapsed"]
    old = type(error).__new__(type(error))
    old.__dict__.update(state)
    assert (old.earlier_retries, old.earlier_hops_elapsed) == (0, 0.0)
