"""A streamed call's body is followed to its end: a ``body`` event says how it ended.

Found in a user trial: a streamed call's telemetry ended at its headers, so an LLM
stream cut halfway was counted a success like any other, and its duration read as its
time to the first byte. Over real sockets against the chaos server: a body read to its
end is ``complete``, one whose server cuts it is ``broken`` (the reader got the
exception), one closed early is ``abandoned``; the OpenTelemetry call span ends with
the body, and both metric hooks count the bodies and time the streams to their end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import prometheus_client
import pytest
from telemetry_support import SECRET_HEADERS, SECRET_QUERY, SECRET_VALUES, Otel

import retrysafe
from retrysafe.body_watch import BodyWatch
from retrysafe.observe import RetryEvent
from retrysafe.telemetry.prometheus import PrometheusMetrics

#: Five chunks 40 ms apart: a body that takes about 0.16 s after its headers.
DRIP = {"chunks": 5, "interval_ms": 40, "chunk_bytes": 8}


def _kinds(events: list[RetryEvent]) -> list[str]:
    return [event.kind for event in events if event.kind != "attempt"]


def test_a_body_read_to_its_end_is_complete_and_timed_to_its_end(chaos: Any) -> None:
    events: list[RetryEvent] = []
    with (
        retrysafe.Client(hooks=[events.append]) as client,
        client.stream("GET", chaos.url("/drip", **DRIP)) as response,
    ):
        assert _kinds(events) == ["success"]  # the call is over at its headers ...
        body = b"".join(response.iter_bytes())
    assert len(body) == 40
    assert _kinds(events) == ["success", "body"]  # ... and its body ended after
    success, ended = events[-2], events[-1]
    assert (ended.outcome, ended.status, ended.attempt, ended.exception) == (
        "complete",
        200,
        1,
        None,
    )
    assert ended.elapsed >= success.elapsed + 0.1  # the drip's time, after the headers
    assert ended.url == success.url


def test_a_body_the_server_cuts_is_broken_and_names_the_exception(
    chaos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[RetryEvent] = []
    with (
        caplog.at_level(logging.INFO, logger="retrysafe"),
        retrysafe.Client(hooks=[events.append]) as client,
        client.stream("GET", chaos.url("/truncate")) as response,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        response.read()
    ended = events[-1]
    assert (ended.kind, ended.outcome, ended.exception) == (
        "body",
        "broken",
        "RemoteProtocolError",
    )
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("streamed body of attempt 1 (HTTP 200) broke off" in line for line in lines)


def test_a_body_closed_before_its_end_is_abandoned(chaos: Any) -> None:
    events: list[RetryEvent] = []
    with (
        retrysafe.Client(hooks=[events.append]) as client,
        client.stream("GET", chaos.url("/drip", **DRIP)) as response,
    ):
        next(response.iter_raw())  # one chunk, then the caller stops reading
    assert _kinds(events) == ["success", "body"]
    assert events[-1].outcome == "abandoned"


class _GreenTimeout(BaseException):
    """What a green-thread library raises out of a blocked read (gevent's ``Timeout``):
    not an ``Exception``, like ``KeyboardInterrupt``."""


def test_a_read_interrupted_by_a_base_exception_is_abandoned_not_complete(
    chaos: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review73: the interrupted read ended the body's iterator with it, and closing then
    "drained" an empty rest and called the body complete."""
    from retrysafe.bounded_backend import BoundedStream

    interrupt = [False]
    read = BoundedStream.read

    def interruptible(self: BoundedStream, max_bytes: int, timeout: float | None = None) -> bytes:
        if interrupt[0]:
            raise _GreenTimeout
        return read(self, max_bytes, timeout)

    monkeypatch.setattr(BoundedStream, "read", interruptible)
    events: list[RetryEvent] = []
    with (
        retrysafe.Client(hooks=[events.append]) as client,
        client.stream("GET", chaos.url("/drip", **DRIP)) as response,
    ):
        chunks = response.iter_raw()
        next(chunks)
        interrupt[0] = True
        with pytest.raises(_GreenTimeout):
            next(chunks)
    assert _kinds(events) == ["success", "body"]
    assert events[-1].outcome == "abandoned"


def test_the_async_client_follows_a_body_too(chaos: Any) -> None:
    events: list[RetryEvent] = []

    async def main() -> None:
        async with retrysafe.AsyncClient(hooks=[events.append]) as client:
            async with client.stream("GET", chaos.url("/drip", **DRIP)) as response:
                async for _ in response.aiter_bytes():
                    pass
            async with client.stream("GET", chaos.url("/truncate")) as response:
                with pytest.raises(httpx.RemoteProtocolError):
                    await response.aread()

    asyncio.run(main())
    bodies = [(event.outcome, event.exception) for event in events if event.kind == "body"]
    assert bodies == [("complete", None), ("broken", "RemoteProtocolError")]


def test_a_call_nobody_listens_to_hands_its_body_over_unwatched(chaos: Any) -> None:
    with (
        retrysafe.Client() as client,
        client.stream("GET", chaos.url("/drip", **DRIP)) as response,
    ):
        assert not isinstance(response.stream, BodyWatch)
        response.read()


def test_the_call_span_ends_with_the_body_and_the_metrics_count_it(chaos: Any, otel: Otel) -> None:
    url = chaos.url("/drip", **DRIP, **SECRET_QUERY)
    with retrysafe.Client(hooks=[otel.hook], headers=SECRET_HEADERS) as client:
        with client.stream("GET", url) as response:
            response.read()
        with (
            client.stream("GET", chaos.url("/truncate")) as cut,
            pytest.raises(httpx.RemoteProtocolError),
        ):
            cut.read()
    calls = [span for span in otel.spans() if span.name.startswith("retrysafe ")]
    assert len(calls) == 2
    whole, broken = calls
    assert whole.attributes is not None
    assert broken.attributes is not None
    assert whole.attributes["retrysafe.body.outcome"] == "complete"
    assert whole.end_time is not None
    assert whole.start_time is not None
    assert (whole.end_time - whole.start_time) / 1e9 >= 0.1  # the body's time included
    assert whole.status.status_code.name == "UNSET"
    assert broken.attributes["retrysafe.body.outcome"] == "broken"
    assert broken.attributes["error.type"] == "RemoteProtocolError"
    assert broken.status.status_code.name == "ERROR"
    points = otel.metric_points()
    bodies = {
        str(attrs["retrysafe.outcome"]): value for attrs, value in points["retrysafe.stream.bodies"]
    }
    assert bodies == {"complete": 1, "broken": 1}
    durations = points["retrysafe.stream.duration"]
    complete_count, complete_sum = next(
        value for attrs, value in durations if attrs["retrysafe.outcome"] == "complete"
    )  # type: ignore[misc]
    assert complete_count == 1
    assert complete_sum >= 0.1
    for span in otel.spans():
        text = repr(dict(span.attributes or {}))
        assert not any(secret in text for secret in SECRET_VALUES)


def test_prometheus_counts_the_bodies_by_how_they_ended(chaos: Any) -> None:
    registry = prometheus_client.CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    with retrysafe.Client(hooks=[metrics]) as client:
        with client.stream("GET", chaos.url("/drip", **DRIP)) as response:
            response.read()
        with client.stream("GET", chaos.url("/drip", **DRIP)) as response:
            next(response.iter_raw())
    dependency = str(httpx.URL(chaos.base_url).copy_with(path="/"))[:-1]  # scheme://host:port

    def sample(name: str, outcome: str) -> float | None:
        return registry.get_sample_value(name, {"dependency": dependency, "outcome": outcome})

    assert sample("retrysafe_stream_bodies_total", "complete") == 1
    assert sample("retrysafe_stream_bodies_total", "abandoned") == 1
    assert (sample("retrysafe_stream_duration_seconds_sum", "complete") or 0) >= 0.1


def test_the_sync_openai_sdk_reading_a_stream_to_done_is_complete(chaos: Any) -> None:
    """Found in a user trial: the sync openai SDK stops at its ``[DONE]`` event and closes
    the response before the chunked body's last bytes, and every full stream read as
    ``abandoned``. Closing, the watch reads what little is left if it comes at once."""
    import openai

    events: list[RetryEvent] = []
    transport = retrysafe.RetryTransport(hooks=[events.append])
    with openai.OpenAI(
        api_key="sk-test",
        base_url=chaos.openai_base_url(),
        max_retries=0,
        default_query={"events": 4, "interval_ms": 10},
        http_client=httpx.Client(transport=transport),
    ) as sdk:
        stream = sdk.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        tokens = [chunk.choices[0].delta.content for chunk in stream if chunk.choices]
    assert "".join(token or "" for token in tokens) == "tok1tok2tok3tok4"
    bodies = [event for event in events if event.kind == "body"]
    assert [(event.outcome, event.status) for event in bodies] == [("complete", 200)]


def test_a_sync_stream_left_while_still_flowing_is_abandoned_at_once(chaos: Any) -> None:
    events: list[RetryEvent] = []
    with retrysafe.Client(hooks=[events.append]) as client:
        with client.stream("GET", chaos.url("/drip", chunks=50, interval_ms=200)) as response:
            next(response.iter_raw())
            closing = time.monotonic()
        closed_in = time.monotonic() - closing
    assert events[-1].outcome == "abandoned"
    assert closed_in < 0.15  # the rest is not waited for (loose: its bound is 25 ms)


def test_a_drop_in_transports_plain_call_is_no_stream(chaos: Any) -> None:
    """Found in a user trial: the drop-in transport cannot tell whether httpx streams a
    body, and every plain call through it was counted as a streamed body. Only a body
    sent as it is made (events, JSON lines) is taken for one there."""
    events: list[RetryEvent] = []
    transport = retrysafe.RetryTransport(hooks=[events.append])
    with httpx.Client(transport=transport) as client:
        client.get(chaos.url("/status/200"))
        client.head(chaos.url("/status/200"))
        client.get(chaos.url("/sse", events=2, interval_ms=0))
    bodies = [(event.kind, event.outcome) for event in events if event.kind == "body"]
    assert bodies == [("body", "complete")]  # the event stream's only


async def _read_to_done(response: httpx.Response) -> list[str]:
    """Read events up to ``[DONE]`` and stop there, as an LLM SDK does (without reading
    the body's end that follows)."""
    seen = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            seen.append(line.removeprefix("data: "))
            if seen[-1] == "[DONE]":
                break
    return seen


def test_an_async_stream_read_to_its_done_event_is_complete_over_http1(chaos: Any) -> None:
    """review73: only a sync body read what was left as it closed, so an async reader
    stopping at ``[DONE]`` (before the chunked body's last bytes) read as abandoned."""
    events: list[RetryEvent] = []

    async def main() -> list[str]:
        async with retrysafe.AsyncClient(hooks=[events.append]) as client:
            url = chaos.url("/sse", events=3, interval_ms=0, format="openai")
            async with client.stream("GET", url) as response:
                return await _read_to_done(response)

    assert asyncio.run(main())[-1] == "[DONE]"
    assert [event.outcome for event in events if event.kind == "body"] == ["complete"]


def test_an_async_stream_read_to_its_done_event_is_complete_over_http2() -> None:
    """The openai SDK's async stream closes an HTTP/2 body at ``[DONE]`` without reading
    on: the stream's end, a frame behind, is read as it closes (review73)."""
    from local_http import serving_h2_apart

    events: list[RetryEvent] = []

    async def main(base: str) -> list[str]:
        client = retrysafe.AsyncClient(hooks=[events.append], http1=False, http2=True)
        async with client, client.stream("GET", f"{base}/events?count=3") as response:
            assert response.http_version == "HTTP/2"
            return await _read_to_done(response)

    with serving_h2_apart(10) as base:
        seen = asyncio.run(main(base))
    assert seen == ["event 0", "event 1", "event 2", "[DONE]"]
    assert [event.outcome for event in events if event.kind == "body"] == ["complete"]


def test_an_async_stream_left_while_still_flowing_is_abandoned_at_once(chaos: Any) -> None:
    events: list[RetryEvent] = []

    async def main() -> float:
        async with retrysafe.AsyncClient(hooks=[events.append]) as client:
            url = chaos.url("/drip", chunks=50, interval_ms=200)
            async with client.stream("GET", url) as response:
                await response.aiter_raw().__anext__()
                closing = time.monotonic()
            return time.monotonic() - closing

    closed_in = asyncio.run(main())
    assert events[-1].outcome == "abandoned"
    assert closed_in < 0.15  # the rest is not waited for (loose: its bound is 25 ms)


def _read_to_done_sync(response: httpx.Response) -> list[str]:
    """The sync :func:`_read_to_done`."""
    seen = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            seen.append(line.removeprefix("data: "))
            if seen[-1] == "[DONE]":
                break
    return seen


@pytest.mark.parametrize("shell", ["client", "drop-in"])
def test_a_sync_stream_read_to_its_done_event_is_complete_over_http2(shell: str) -> None:
    """A sync reader stopping at ``[DONE]`` over HTTP/2 (the openai SDK's sync stream
    does) left the stream's end, a frame behind, unread, and every full stream read as
    ``abandoned``: only sync HTTP/1.1 bodies were read on as they closed."""
    from local_http import serving_h2_apart

    events: list[RetryEvent] = []
    client: httpx.Client
    if shell == "client":
        client = retrysafe.Client(hooks=[events.append], http1=False, http2=True)
    else:
        inner = httpx.HTTPTransport(http1=False, http2=True)
        client = httpx.Client(transport=retrysafe.RetryTransport(inner, hooks=[events.append]))
    with (
        serving_h2_apart(10) as base,
        client,
        client.stream("GET", f"{base}/events?count=3") as response,
    ):
        assert response.http_version == "HTTP/2"
        seen = _read_to_done_sync(response)
    assert seen == ["event 0", "event 1", "event 2", "[DONE]"]
    assert [event.outcome for event in events if event.kind == "body"] == ["complete"]


@pytest.mark.parametrize("max_streams", [1, 10])
def test_a_sync_http2_stream_left_while_flowing_is_abandoned_and_its_connection_serves_on(
    max_streams: int,
) -> None:
    """Reading a closing HTTP/2 body's rest takes a turn on a connection other requests
    share: a body still flowing is left within the drain's bound, and the connection
    goes on serving, to another thread's request during the drain and to the next call.
    (review78: a drain cut at its bound retired the connection as a cut attempt's read
    does, when the server allows one or two streams; the drain sent nothing, and its
    stream is reset as it closes.)"""
    from local_http import serving_h2_apart

    events: list[RetryEvent] = []
    client = retrysafe.Client(hooks=[events.append], http1=False, http2=True)
    with serving_h2_apart(max_streams) as base, client:
        client.get(f"{base}/")  # (the connection, open)
        with client.stream("GET", f"{base}/drip?chunks=50&interval_ms=20") as response:
            next(response.iter_raw())
            connection = response.extensions["network_stream"]
            beside = ThreadPoolExecutor(1)
            answered = beside.submit(client.get, f"{base}/delay?ms=10")
            closing = time.monotonic()
        closed_in = time.monotonic() - closing
        assert answered.result(timeout=5).status_code == 200
        beside.shutdown()
        after = client.get(f"{base}/")
        assert after.extensions["network_stream"] is connection
    assert [event.outcome for event in events if event.kind == "body"] == ["abandoned"]
    assert closed_in < 0.15  # the rest is not waited for (loose: its bound is 25 ms)
