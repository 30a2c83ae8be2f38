"""OpenTelemetry spans of real calls over sockets, with the SDK's in-memory exporter.

A call is one ``retrysafe GET`` span (INTERNAL) with a ``GET`` span (CLIENT) per
attempt under it, carrying the HTTP client conventions; beside the real
opentelemetry-instrumentation-httpx there is still exactly one span per attempt.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import SpanKind, StatusCode
from telemetry_support import SECRET_HEADERS, SECRET_QUERY, SECRET_VALUES, Otel

import retrysafe
from retrysafe import RetryPolicy, Verdict
from retrysafe.redact import redact_url
from retrysafe.telemetry.otel import OpenTelemetry

FAST = RetryPolicy(backoff_base=0.01, backoff_cap=0.02)


def split(spans: list[ReadableSpan]) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The one call span and its attempt spans, in attempt order."""
    calls = [span for span in spans if span.name.startswith("retrysafe ")]
    assert len(calls) == 1, [span.name for span in spans]
    call = calls[0]
    attempts = [span for span in spans if span is not call]
    attempts.sort(key=lambda span: span.attributes["retrysafe.attempt"])  # type: ignore[index]
    return call, attempts


def assert_no_secret(spans: list[ReadableSpan]) -> None:
    for span in spans:
        texts = [span.name, repr(dict(span.attributes or {}))]
        texts += [repr(dict(event.attributes or {})) for event in span.events]
        texts.append(str(span.status.description))
        for text in texts:
            for secret in SECRET_VALUES:
                assert secret not in text, f"{secret} leaked into span {span.name}: {text}"


def test_a_call_that_got_503_503_200_is_one_call_span_with_three_attempt_spans(
    api: Any, chaos: Any, otel: Otel
) -> None:
    url = chaos.url("/fail/{key}", times=2, status=503, **SECRET_QUERY)
    response = api.request(
        "GET", url, policy=FAST, headers=SECRET_HEADERS, client_options={"hooks": [otel.hook]}
    )
    assert response.status_code == 200
    assert not trace.get_current_span().get_span_context().is_valid  # the context was left
    call, attempts = split(otel.spans())
    assert "api_key=[REDACTED]" in redact_url(url)

    assert call.name == "retrysafe GET"
    assert call.kind is SpanKind.INTERNAL
    assert call.parent is None
    assert call.status.status_code is StatusCode.UNSET
    port = httpx.URL(url).port
    assert call.attributes is not None
    assert dict(call.attributes) == {
        "http.request.method": "GET",
        "server.address": "127.0.0.1",
        "server.port": port,
        # (the conventions' marker for a redacted value, REDACTED, not the logs' [REDACTED])
        "url.full": redact_url(url).replace("[REDACTED]", "REDACTED"),
        "retrysafe.dependency": f"http://127.0.0.1:{port}",
        "retrysafe.attempts": 3,
        "retrysafe.outcome": "success",
        "http.response.status_code": 200,
    }

    assert [span.name for span in attempts] == ["GET", "GET", "GET"]
    for number, span in enumerate(attempts, start=1):
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None
        assert span.parent.span_id == call.context.span_id
        assert span.context.trace_id == call.context.trace_id
        attributes = dict(span.attributes or {})
        assert attributes["retrysafe.attempt"] == number
        assert attributes["url.full"] == call.attributes["url.full"]
        # The conventions' resend count: absent on the first send, 1 and 2 on the resends.
        assert attributes.get("http.request.resend_count") == (number - 1 or None)
    first, second, third = attempts
    for failed in (first, second):
        attributes = dict(failed.attributes or {})
        assert attributes["http.response.status_code"] == 503
        assert attributes["error.type"] == "503"
        assert attributes["retrysafe.outcome"] == "service_unavailable"
        assert 0 <= attributes["retrysafe.retry.wait"] <= 0.02  # type: ignore[operator]
        assert failed.status.status_code is StatusCode.ERROR
        (retry,) = failed.events
        assert retry.name == "retrysafe.retry"
        assert retry.attributes is not None
        assert retry.attributes["retrysafe.retry.wait"] == attributes["retrysafe.retry.wait"]
    assert dict(third.attributes or {})["http.response.status_code"] == 200
    assert "error.type" not in dict(third.attributes or {})
    assert third.status.status_code is StatusCode.UNSET
    # One after the other, each inside the call.
    assert call.start_time is not None
    assert call.end_time is not None
    for earlier, later in itertools.pairwise(attempts):
        assert earlier.end_time is not None
        assert later.start_time is not None
        assert earlier.end_time <= later.start_time
    assert call.start_time <= first.start_time  # type: ignore[operator]
    assert third.end_time <= call.end_time  # type: ignore[operator]
    assert_no_secret(otel.spans())


def traceparent(span: ReadableSpan) -> str:
    """The W3C ``traceparent`` header that names ``span``."""
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def echo_twice_refused() -> tuple[Any, list[str]]:
    """A rule that treats the first two echoes as retryable failures, keeping the
    ``traceparent`` header the server received on each attempt."""
    received: list[str] = []

    def rule(response: httpx.Response) -> Verdict | None:
        received.append(response.json()["headers"]["traceparent"])
        return Verdict.retry("echo_refused") if len(received) < 3 else None

    return rule, received


def test_each_attempt_sends_its_own_span_as_the_trace_context(
    api: Any, chaos: Any, otel: Otel
) -> None:
    rule, received = echo_twice_refused()
    policy = RetryPolicy(backoff_base=0.01, backoff_cap=0.02, rules=(rule,))
    api.request("GET", chaos.url("/echo"), policy=policy, client_options={"hooks": [otel.hook]})
    _, attempts = split(otel.spans())
    sent = [traceparent(span) for span in attempts]
    assert received == sent
    assert len(set(received)) == 3


@pytest.fixture
def httpx_instrumented(otel: Otel) -> Iterator[None]:
    """The real opentelemetry-instrumentation-httpx, on for one test (same SDK)."""
    instrumentor = HTTPXClientInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


@pytest.mark.usefixtures("httpx_instrumented")
def test_beside_the_httpx_instrumentation_each_attempt_is_still_one_span(
    api: Any, chaos: Any, otel: Otel
) -> None:
    rule, received = echo_twice_refused()
    policy = RetryPolicy(backoff_base=0.01, backoff_cap=0.02, rules=(rule,))
    api.request("GET", chaos.url("/echo"), policy=policy, client_options={"hooks": [otel.hook]})
    spans = otel.spans()
    assert len(spans) == 4, [(span.name, span.instrumentation_scope) for span in spans]
    assert {span.instrumentation_scope.name for span in spans} == {"retrysafe"}  # type: ignore[union-attr]
    _, attempts = split(spans)
    assert [dict(span.attributes or {}).get("http.request.resend_count") for span in attempts] == [
        None,
        1,
        2,
    ]
    # The context the server saw is still retrysafe's attempt span, not another one.
    assert received == [traceparent(span) for span in attempts]


@pytest.mark.usefixtures("httpx_instrumented")
def test_the_httpx_instrumentation_is_live_in_these_tests(chaos: Any, otel: Otel) -> None:
    """The control for the test above: told not to suppress it, the httpx instrumentation
    makes its own span under each attempt span, so its absence above is retrysafe's doing."""
    hook = OpenTelemetry(
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
        suppress_http_instrumentation=False,
    )
    with retrysafe.Client(policy=FAST, hooks=[hook]) as client:
        client.get(chaos.url("/fail/{key}", times=2, status=503))
    spans = otel.spans()
    by_httpx = [span for span in spans if span.instrumentation_scope.name != "retrysafe"]  # type: ignore[union-attr]
    ours = [span for span in spans if span.instrumentation_scope.name == "retrysafe"]  # type: ignore[union-attr]
    assert len(ours) == 4
    assert len(by_httpx) == 3
    _, attempts = split(ours)
    assert [span.parent.span_id for span in by_httpx] == [  # type: ignore[union-attr]
        span.context.span_id for span in attempts
    ]


def test_a_call_that_gives_up_records_the_error(api: Any, chaos: Any, otel: Otel) -> None:
    policy = RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.02)
    with pytest.raises(retrysafe.ServerError):
        api.request(
            "GET", chaos.url("/status/502"), policy=policy, client_options={"hooks": [otel.hook]}
        )
    call, attempts = split(otel.spans())
    assert call.status.status_code is StatusCode.ERROR
    attributes = dict(call.attributes or {})
    assert attributes["error.type"] == "ServerError"
    assert attributes["retrysafe.reason"] == "attempts_exhausted"
    assert attributes["retrysafe.outcome"] == "bad_gateway"
    assert attributes["http.response.status_code"] == 502
    assert [dict(span.attributes or {})["error.type"] for span in attempts] == ["502", "502"]
    assert [len(span.events) for span in attempts] == [1, 0]  # retried once, then gave up


def test_an_attempt_answered_with_a_4xx_is_an_error_span(chaos: Any, otel: Otel) -> None:
    """As the HTTP client conventions say: a 4xx is the client span's error, its status
    code the ``error.type``."""
    with (
        retrysafe.Client(policy=FAST, hooks=[otel.hook]) as client,
        pytest.raises(retrysafe.ClientError),
    ):
        client.get(chaos.url("/status/404"))
    call, (attempt,) = split(otel.spans())
    attributes = dict(attempt.attributes or {})
    assert attributes["http.response.status_code"] == 404
    assert attributes["error.type"] == "404"
    assert attempt.status.status_code is StatusCode.ERROR
    assert dict(call.attributes or {})["error.type"] == "ClientError"


def test_an_attempt_without_a_response_records_its_exception(chaos: Any, otel: Otel) -> None:
    policy = RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.02)
    with (
        retrysafe.Client(policy=policy, hooks=[otel.hook]) as client,
        pytest.raises(retrysafe.TransportError),
    ):
        client.get(chaos.closed_port_url())
    call, attempts = split(otel.spans())
    assert dict(call.attributes or {})["error.type"] == "TransportError"
    for span in attempts:
        attributes = dict(span.attributes or {})
        assert attributes["error.type"] == "ConnectError"
        assert "http.response.status_code" not in attributes
        assert span.status.status_code is StatusCode.ERROR
        assert "exception" in [event.name for event in span.events]


def test_a_call_refused_before_sending_is_a_call_span_alone(chaos: Any, otel: Otel) -> None:
    breaker = retrysafe.BreakerSettings(consecutive_failures=1, open_for=60)
    governor = retrysafe.Governor(retrysafe.GovernorSettings(breaker=breaker))
    with retrysafe.Client(
        policy=RetryPolicy(attempts=1), governor=governor, hooks=[otel.hook]
    ) as client:
        with pytest.raises(retrysafe.ServerError):
            client.get(chaos.url("/status/503"))
        otel.exporter.clear()
        with pytest.raises(retrysafe.CircuitOpen):
            client.get(chaos.url("/status/200"))
    (call,) = otel.spans()
    assert dict(call.attributes or {})["retrysafe.reason"] == "circuit_open"
    assert dict(call.attributes or {})["retrysafe.attempts"] == 0


def test_without_an_sdk_the_hook_stays_out_of_the_way(chaos: Any) -> None:
    """No provider set or given: the hook does not listen, so a successful call builds no
    event and opens no span; retries still reach it (its metrics go to the no-op meter)."""
    hook = OpenTelemetry()
    assert not hook.listening
    assert OpenTelemetry(tracer_provider=TracerProvider()).listening
    with retrysafe.Client(policy=FAST, hooks=[hook]) as client:
        response = client.get(chaos.url("/fail/{key}", times=1, status=503))
        assert "traceparent" not in response.request.headers
    assert response.status_code == 200
    assert retrysafe.report_of(response).attempts == 2


def test_an_sdk_set_after_the_client_is_made_is_picked_up() -> None:
    """Clients are often made at import time, the SDK configured later in main()."""
    code = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from retrysafe.telemetry.otel import OpenTelemetry\n"
        "hook = OpenTelemetry()\n"
        "before = hook.listening\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "print(before, hook.listening)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == ["False", "True"]


def test_no_span_inside_suppressed_instrumentation(chaos: Any, otel: Otel) -> None:
    """What OpenTelemetry's own exporters do around their requests: nothing is traced."""
    token = otel_context.attach(
        otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True)
    )
    try:
        with retrysafe.Client(policy=FAST, hooks=[otel.hook]) as client:
            response = client.get(chaos.url("/status/200"))
    finally:
        otel_context.detach(token)
    assert response.status_code == 200
    assert otel.spans() == []


def test_a_hedged_call_span_counts_its_copies_and_names_the_winner(chaos: Any, otel: Otel) -> None:
    """Every answer takes 300 ms and a copy goes after 50 ms: one copy wins, one is lost."""
    url = chaos.url("/tail/{key}", slow_fraction=1, slow_ms=300)
    with retrysafe.Client(policy=RetryPolicy(hedge_after=0.05), hooks=[otel.hook]) as client:
        response = client.get(url)
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.hedges == 1
    calls = [span for span in otel.spans() if span.name == "retrysafe GET"]
    assert len(calls) == 1
    attributes = dict(calls[0].attributes or {})
    assert attributes["retrysafe.hedges"] == 1
    assert attributes["retrysafe.hedge.winner"] == report.winner
    outcomes = [
        dict(event.attributes or {})["retrysafe.hedge.outcome"]
        for event in calls[0].events
        if event.name == "retrysafe.hedge"
    ]
    assert sorted(outcomes) == ["lost", "sent", "won"]


@pytest.mark.parametrize("argument", ["tracer_provider", "meter_provider"])
def test_a_provider_of_the_wrong_kind_is_refused_naming_the_right_one(argument: str) -> None:
    with pytest.raises(TypeError, match=rf"{argument} must be an OpenTelemetry"):
        OpenTelemetry(**{argument: "x"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "userinfo", ["svc:pa55-word-77@", "sk_live_TOKEN77@"], ids=["user and password", "token"]
)
def test_credentials_in_the_url_are_redacted_as_the_conventions_ask(
    otel: Otel, chaos: Any, userinfo: str
) -> None:
    # The HTTP conventions: url.full "MUST NOT contain credentials"; both user and
    # password become REDACTED (retrysafe's own logs keep a user beside a password).
    url = chaos.url("/status/200").replace("http://", f"http://{userinfo}")
    with retrysafe.Client(hooks=[otel.hook]) as client:
        assert client.get(url).status_code == 200
    call, attempts = split(otel.spans())
    for span in (call, *attempts):
        full = str((span.attributes or {})["url.full"])
        assert full.startswith("http://REDACTED:REDACTED@127.0.0.1:")
        assert userinfo.split(":")[0].rstrip("@") not in full
