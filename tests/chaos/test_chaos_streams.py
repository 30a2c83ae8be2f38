"""/sse and the OpenAI-style chat completions: events dripped over time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from retrysafe.chaos import KeyedChaos


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def _events(body: str) -> list[str]:
    return [event for event in body.split("\n\n") if event]


def test_sse_sends_the_first_event_at_once_and_the_rest_over_time(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """4 events 100 ms apart: the first at once, not held back for the rest, which
    arrive over ~0.3 s."""
    started = time.monotonic()
    arrivals: list[float] = []
    received = ""
    with client.stream("GET", chaos.url("/sse", events=4, interval_ms=100)) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for text in response.iter_text():
            arrivals.append(time.monotonic() - started)
            received += text

    assert arrivals[-1] >= 0.28
    # (measured against the last, not the clock: a busy machine may delay the request,
    # but a server that held the first event back would send all four together)
    assert arrivals[-1] - arrivals[0] >= 0.2
    assert _events(received) == [
        f'id: {n}\nevent: tick\ndata: {{"n":{n},"of":4}}' for n in range(1, 5)
    ]
    assert [(r.endpoint, r.action) for r in chaos.log()] == [("sse", "sse")]


def test_sse_openai_format_sends_chunks_then_done(chaos: KeyedChaos, client: httpx.Client) -> None:
    """``format=openai``: one ``chat.completion.chunk`` per token, a stop chunk, ``[DONE]``."""
    response = client.get(chaos.url("/sse", events=3, interval_ms=0, format="openai"))

    events = _events(response.text)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-1]]
    assert [chunk["object"] for chunk in chunks] == ["chat.completion.chunk"] * 4
    assert [chunk["choices"][0]["delta"].get("content") for chunk in chunks] == [
        "tok1",
        "tok2",
        "tok3",
        None,
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_sse_fails_its_first_requests_when_asked(chaos: KeyedChaos, client: httpx.Client) -> None:
    """``fail_times=1&fail_status=503``: a JSON 503, then the stream."""
    url = chaos.url("/sse", events=1, fail_times=1, fail_status=503)

    first = client.get(url)
    second = client.get(url)

    assert first.status_code == 503
    assert second.status_code == 200
    assert [r.action for r in chaos.log()] == ["status:503", "sse"]


def test_openai_path_streams_when_the_body_asks(chaos: KeyedChaos, client: httpx.Client) -> None:
    """``POST {openai_base_url}/chat/completions`` with ``stream: true`` is the openai stream."""
    url = chaos.openai_base_url() + "/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = client.post(url, params={"events": 2, "interval_ms": 0}, json=body)

    assert response.status_code == 200
    assert _events(response.text)[-1] == "data: [DONE]"
    assert "tok2" in response.text
    assert [(r.endpoint, r.key) for r in chaos.log()] == [("openai/chat/completions", chaos.key)]


def test_openai_path_answers_one_completion_without_stream(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """Without ``stream`` it waits as long as the stream would, then sends every token."""
    url = chaos.openai_base_url() + "/chat/completions"
    started = time.monotonic()
    response = client.post(
        url, params={"events": 3, "interval_ms": 50}, json={"model": "m", "messages": []}
    )

    assert time.monotonic() - started >= 0.09
    assert response.json()["choices"][0]["message"]["content"] == "tok1tok2tok3"
    assert response.json()["object"] == "chat.completion"


def test_openai_sdk_streams_from_the_openai_path(chaos: KeyedChaos) -> None:
    """The real openai SDK, pointed at ``openai_base_url()``, reads every token."""
    openai = pytest.importorskip("openai")
    sdk = openai.OpenAI(
        base_url=chaos.openai_base_url(),
        api_key="sk-test",
        max_retries=0,
        default_query={"events": 3, "interval_ms": 0},
    )
    with sdk:
        stream = sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        tokens = [chunk.choices[0].delta.content for chunk in stream if chunk.choices]

    assert [token for token in tokens if token] == ["tok1", "tok2", "tok3"]


def test_sse_defaults_to_five_events_every_100_ms(chaos: KeyedChaos, client: httpx.Client) -> None:
    """``/sse`` with no parameters: five ``tick`` events, 100 ms apart (the log says so)."""
    response = client.get(chaos.url("/sse"))

    assert len(_events(response.text)) == 5
    assert [r.detail for r in chaos.log()] == ["5 events every 100 ms"]


def test_openai_path_answers_a_single_event_completion_at_once(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """A stream of one event takes no time, so neither does its unstreamed completion."""
    url = chaos.openai_base_url() + "/chat/completions"
    started = time.monotonic()
    response = client.post(
        url, params={"events": 1, "interval_ms": 1000}, json={"model": "m", "messages": []}
    )

    assert time.monotonic() - started < 0.7
    assert response.json()["choices"][0]["message"]["content"] == "tok1"


def test_sse_first_event_is_not_held_back_for_the_interval(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """With 5 s between events the first still comes at once; the interval is between
    events, not before them (the stream is left after the first)."""
    started = time.monotonic()
    with client.stream("GET", chaos.url("/sse", events=2, interval_ms=5000)) as response:
        first = next(response.iter_text())
        waited = time.monotonic() - started

    assert waited < 2.5
    assert first == 'id: 1\nevent: tick\ndata: {"n":1,"of":2}\n\n'


def test_sse_is_an_uncached_stream_of_unknown_length(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/sse", events=2, interval_ms=0))

    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert "content-length" not in response.headers
    assert response.headers["x-attempt"] == "1"


def test_sse_openai_chunks_are_choice_zero_of_one_completion(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/sse", events=2, interval_ms=0, format="openai"))

    chunks = [json.loads(event.removeprefix("data: ")) for event in _events(response.text)[:-1]]
    assert {chunk["id"] for chunk in chunks} == {"c1"}
    assert {chunk["model"] for chunk in chunks} == {"m"}
    assert [chunk["choices"][0]["index"] for chunk in chunks] == [0, 0, 0]
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks] == [None, None, "stop"]
    assert chunks[-1]["choices"][0]["delta"] == {}  # the stop chunk's delta is empty


def test_openai_path_completion_is_a_whole_assistant_message_with_usage(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = chaos.openai_base_url() + "/chat/completions"
    response = client.post(
        url, params={"events": 3, "interval_ms": 0}, json={"model": "m", "messages": []}
    )

    completion = response.json()
    choice = completion["choices"][0]
    assert (completion["id"], completion["model"]) == ("c1", "m")
    assert choice["message"] == {"role": "assistant", "content": "tok1tok2tok3"}
    assert (choice["index"], choice["finish_reason"]) == (0, "stop")
    assert completion["usage"] == {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
