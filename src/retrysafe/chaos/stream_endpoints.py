"""Streamed replies: server-sent events dripped over time, plain or as an OpenAI-style API.

They are for clients that must hand a body over as it arrives (LLM token streams, live
feeds): the first event comes at once, the last ``(events - 1) * interval_ms`` later.

- ``/sse?events=5&interval_ms=100&format=plain|openai&fail_times=0&fail_status=503``:
  ``text/event-stream``; ``plain`` events are ``id: N``, ``event: tick`` and
  ``data: {"n": N, "of": events}``; ``openai`` events are ``chat.completion.chunk``
  objects whose deltas are ``tok1``, ``tok2``, ..., then a ``finish_reason: "stop"``
  chunk and ``data: [DONE]``. The first ``fail_times`` requests for the key get
  ``fail_status`` instead (a JSON error, no stream).
  ``&break_after=N&break_with=reset|close|hang&break_times=K``: the key's first ``K``
  streams (every one, without ``break_times``; a failed request or a completion not
  streamed is no stream) send only ``N`` events (``N`` = ``events``: all of
  them, and no ``[DONE]``), then, where the next would come, reset the connection, close
  it, or send nothing more until the client leaves: a stream failing part way.
- ``POST /openai/{key}/v1/chat/completions`` (same query parameters, no ``format``): what
  the openai SDK calls with ``base_url=".../openai/{key}/v1"`` (see
  :meth:`~retrysafe.chaos.KeyedChaos.openai_base_url`; pass the parameters with the
  SDK's ``default_query``). With ``"stream": true`` in the body it streams as
  ``format=openai``; without, it waits as long as the stream would take and answers one
  ``chat.completion`` holding every token.

Requests are logged as ``sse`` (or ``status:N`` when failed or not streamed); a stream
that breaks as ``sse``, its detail saying after how many events and how.
"""

from __future__ import annotations

import json
from typing import NamedTuple, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import Arrival, arrive
from retrysafe.chaos.event_stream import (
    EVENT_STREAM_FORMATS,
    EventStreamFormat,
    EventStreamResponse,
    openai_completion,
    stream_events,
)
from retrysafe.chaos.outcomes import (
    NoReply,
    SocketFaultKind,
    end_for_shutdown,
    pause,
    supports_socket_faults,
)
from retrysafe.chaos.params import (
    MAX_TIMES,
    InvalidParameter,
    choice_param,
    int_param,
    status_code,
)
from retrysafe.chaos.replies import reply_json, reply_socket_fault
from retrysafe.chaos.state import ChaosState

__all__ = ["routes"]

# Upper bounds that keep a typo from tying a test run up for hours.
_MAX_MS = 600_000
_MAX_EVENTS = 10_000


def _stream_params(request: Request) -> tuple[int, float, int, int]:
    """``events``, the interval in seconds, ``fail_times`` and ``fail_status``."""
    events = int_param(request, "events", 5, minimum=0, maximum=_MAX_EVENTS)
    interval_ms = int_param(request, "interval_ms", 100, minimum=0, maximum=_MAX_MS)
    fail_times = int_param(request, "fail_times", 0, minimum=0, maximum=MAX_TIMES)
    failure = status_code("fail_status", request.query_params.get("fail_status") or "503")
    return events, interval_ms / 1000, fail_times, failure


#: What ``break_with`` can choose.
_BREAK_KINDS: tuple[SocketFaultKind, ...] = ("reset", "close", "hang")


class _Break(NamedTuple):
    """How the streams of a request's key break part way (see the module's docstring)."""

    after: int
    kind: SocketFaultKind
    times: int


def _break_params(request: Request, events: int) -> _Break | None:
    """``break_after``, ``break_with`` and ``break_times``; None without ``break_after``."""
    if not request.query_params.get("break_after"):
        for name in ("break_with", "break_times"):
            if request.query_params.get(name):
                raise InvalidParameter(name, "needs break_after, the events sent before it")
        return None
    after = int_param(request, "break_after", 0, minimum=0, maximum=events)
    kind = choice_param(request, "break_with", "reset", _BREAK_KINDS)
    times = int_param(request, "break_times", MAX_TIMES, minimum=1, maximum=MAX_TIMES)
    return _Break(after, cast(SocketFaultKind, kind), times)


def _failed(arrival: Arrival, status: int) -> Response:
    content = {"error": f"failed on purpose (attempt {arrival.attempt})", "status": status}
    return reply_json(arrival, status, content)


def _stream(
    arrival: Arrival,
    events: int,
    interval: float,
    kind: EventStreamFormat,
    breaking: _Break | None,
) -> Response:
    """The event stream, broken part way if ``breaking`` says so for this one: the key's
    streams are counted apart from its requests (a failed one, or a completion not
    streamed, is none)."""
    detail = f"{events} events every {round(interval * 1000)} ms"
    if breaking is not None:
        if breaking.kind != "hang" and not supports_socket_faults(arrival.request.scope):
            return reply_socket_fault(arrival, breaking.kind)  # (a 501 saying why)
        stream = arrival.state.next_attempt(f"{arrival.endpoint} streams", arrival.key)
        if stream > breaking.times:
            breaking = None
    if breaking is not None:
        detail += f", broken ({breaking.kind}) after {breaking.after}"
    arrival.record("sse", detail)
    chunks, tail = stream_events(events, kind)
    return EventStreamResponse(
        events=chunks,
        tail=tail,
        interval=interval,
        headers=arrival.headers(),
        breaks_after=None if breaking is None else breaking.after,
        break_with="reset" if breaking is None else breaking.kind,
    )


def routes(state: ChaosState) -> list[Route]:
    """The streamed-reply endpoints, bound to ``state``."""

    async def sse(request: Request) -> Response:
        events, interval, fail_times, failure = _stream_params(request)
        breaking = _break_params(request, events)
        chosen = choice_param(request, "format", "plain", EVENT_STREAM_FORMATS)
        kind: EventStreamFormat = "openai" if chosen == "openai" else "plain"
        arrival = await arrive(state, request, "sse")
        if arrival.attempt <= fail_times:
            return _failed(arrival, failure)
        return _stream(arrival, events, interval, kind, breaking)

    async def chat_completions(request: Request) -> Response:
        events, interval, fail_times, failure = _stream_params(request)
        breaking = _break_params(request, events)
        arrival = await arrive(state, request, "openai/chat/completions")
        try:
            body = json.loads(arrival.body or b"{}")
        except ValueError:
            return reply_json(arrival, 400, {"error": {"message": "the body is not JSON"}})
        if arrival.attempt <= fail_times:
            return _failed(arrival, failure)
        if isinstance(body, dict) and body.get("stream") is True:
            return _stream(arrival, events, interval, "openai", breaking)
        reply = reply_json(arrival, 200, openai_completion(events))
        waited = max(0, events - 1) * interval
        if await pause(request.scope, request.receive, waited) == "stopping":
            await end_for_shutdown(request.scope, request.receive)
            return NoReply()
        return reply

    return [
        Route("/sse", sse, methods=["GET", "POST"]),
        Route("/openai/{key}/v1/chat/completions", chat_completions, methods=["POST"]),
    ]
