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


def _read_until_broken(
    client: httpx.Client, url: str, *, read_timeout: float = 5
) -> tuple[list[str], Exception | None]:
    """The events a stream gave, and what ended it (None: it ended cleanly)."""
    received = ""
    try:
        with client.stream("GET", url, timeout=httpx.Timeout(5, read=read_timeout)) as response:
            for text in response.iter_text():
                received += text
    except httpx.HTTPError as exc:
        return _events(received), exc
    return _events(received), None


@pytest.mark.parametrize(
    ("how", "ended_by"),
    [
        ("reset", httpx.ReadError),  # (ECONNRESET)
        ("close", httpx.RemoteProtocolError),  # (a chunked body never finished)
        ("hang", httpx.ReadTimeout),
    ],
)
def test_sse_breaks_part_way_when_asked(
    chaos: KeyedChaos, client: httpx.Client, how: str, ended_by: type[Exception]
) -> None:
    """``break_after=2``: two events, then, where the third would come, the connection is
    reset, closed, or left silent: a stream failing part way (trial100 wrote its own
    server for that)."""
    url = chaos.url("/sse", events=4, interval_ms=50, break_after=2, break_with=how)

    events, ended = _read_until_broken(client, url, read_timeout=0.5)

    assert [event.split("\n")[0] for event in events] == ["id: 1", "id: 2"]
    assert isinstance(ended, ended_by)
    assert [(r.action, r.detail) for r in chaos.log()] == [
        ("sse", f"4 events every 50 ms, broken ({how}) after 2")
    ]


def test_sse_breaks_only_its_first_streams_with_break_times(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """``break_times=1``: the first stream breaks before any event, the next is whole."""
    url = chaos.url("/sse", events=2, interval_ms=0, break_after=0, break_times=1)

    first, first_ended = _read_until_broken(client, url)
    second, second_ended = _read_until_broken(client, url)

    assert (first, type(first_ended)) == ([], httpx.ReadError)
    assert (len(second), second_ended) == (2, None)


def test_sse_breaking_after_every_event_sends_no_done(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """``break_after`` = ``events``: every token, then no ``[DONE]``: the stream breaks."""
    url = chaos.url(
        "/sse", events=2, interval_ms=0, format="openai", break_after=2, break_with="close"
    )

    events, ended = _read_until_broken(client, url)

    assert len(events) == 2
    assert "[DONE]" not in "".join(events)
    assert isinstance(ended, httpx.RemoteProtocolError)


@pytest.mark.parametrize(
    ("query", "refused"),
    [
        ({"events": 2, "break_after": 3}, "break_after"),
        ({"break_with": "reset"}, "break_with"),
        ({"break_times": 1}, "break_times"),
        ({"break_after": 1, "break_with": "explode"}, "break_with"),
    ],
)
def test_sse_refuses_a_break_it_cannot_make(
    chaos: KeyedChaos, client: httpx.Client, query: dict[str, object], refused: str
) -> None:
    response = client.get(chaos.url("/sse", **query))

    assert response.status_code == 400
    assert refused in response.text


def test_openai_sdk_through_retrysafe_sees_a_stream_reset_part_way_as_a_connection_error(
    chaos: KeyedChaos,
) -> None:
    """The openai SDK over ``RetryTransport``, its stream reset after two tokens: the
    tokens come, then the SDK's own ``APIConnectionError``, and the completion is not
    sent again (its tokens were already the caller's)."""
    openai = pytest.importorskip("openai")
    import retrysafe

    sdk = openai.OpenAI(
        base_url=chaos.openai_base_url(),
        api_key="sk-test",
        max_retries=0,
        http_client=httpx.Client(transport=retrysafe.RetryTransport()),
        default_query={"events": 4, "interval_ms": 20, "break_after": 2},
    )
    tokens: list[str] = []

    def read_the_stream() -> None:
        stream = sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                tokens.append(chunk.choices[0].delta.content)

    with sdk, pytest.raises(openai.APIConnectionError):
        read_the_stream()

    assert tokens == ["tok1", "tok2"]
    assert len(chaos.log()) == 1


def test_break_times_counts_streams_not_requests(chaos: KeyedChaos, client: httpx.Client) -> None:
    """``break_times=2`` on the OpenAI-style endpoint: a failed request and a completion
    not streamed, in between, are not streams, so the second stream still breaks
    (review101: they used up a slot)."""
    url = chaos.openai_base_url() + "/chat/completions"
    params = {"events": 2, "interval_ms": 0, "break_after": 1, "break_times": 2, "fail_times": 1}
    streamed = {"model": "m", "messages": [], "stream": True}

    def stream_breaks() -> bool:
        try:
            with client.stream("POST", url, params=params, json=streamed) as response:
                response.read()
        except httpx.ReadError:
            return True
        return False

    assert client.post(url, params=params, json=streamed).status_code == 503  # (fail_times)
    assert stream_breaks()
    assert client.post(url, params=params, json={"model": "m", "messages": []}).is_success
    assert stream_breaks()
    assert not stream_breaks()
