"""Streamed replies: server-sent events dripped over time, plain or as an OpenAI-style API.

They are for clients that must hand a body over as it arrives (LLM token streams, live
feeds): the first event comes at once, the last ``(events - 1) * interval_ms`` later.

- ``/sse?events=5&interval_ms=100&format=plain|openai&fail_times=0&fail_status=503``:
  ``text/event-stream``; ``plain`` events are ``id: N``, ``event: tick`` and
  ``data: {"n": N, "of": events}``; ``openai`` events are ``chat.completion.chunk``
  objects whose deltas are ``tok1``, ``tok2``, ..., then a ``finish_reason: "stop"``
  chunk and ``data: [DONE]``. The first ``fail_times`` requests for the key get
  ``fail_status`` instead (a JSON error, no stream).
- ``POST /openai/{key}/v1/chat/completions`` (same query parameters, no ``format``): what
  the openai SDK calls with ``base_url=".../openai/{key}/v1"`` (see
  :meth:`~retrysafe.chaos.KeyedChaos.openai_base_url`; pass the parameters with the
  SDK's ``default_query``). With ``"stream": true`` in the body it streams as
  ``format=openai``; without, it waits as long as the stream would take and answers one
  ``chat.completion`` holding every token.

Requests are logged as ``sse`` (or ``status:N`` when failed or not streamed).
"""

from __future__ import annotations

import json

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
from retrysafe.chaos.outcomes import NoReply, end_for_shutdown, pause
from retrysafe.chaos.params import MAX_TIMES, choice_param, int_param, status_code
from retrysafe.chaos.replies import reply_json
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


def _failed(arrival: Arrival, status: int) -> Response:
    content = {"error": f"failed on purpose (attempt {arrival.attempt})", "status": status}
    return reply_json(arrival, status, content)


def _stream(arrival: Arrival, events: int, interval: float, kind: EventStreamFormat) -> Response:
    arrival.record("sse", f"{events} events every {round(interval * 1000)} ms")
    chunks, tail = stream_events(events, kind)
    return EventStreamResponse(
        events=chunks, tail=tail, interval=interval, headers=arrival.headers()
    )


def routes(state: ChaosState) -> list[Route]:
    """The streamed-reply endpoints, bound to ``state``."""

    async def sse(request: Request) -> Response:
        events, interval, fail_times, failure = _stream_params(request)
        chosen = choice_param(request, "format", "plain", EVENT_STREAM_FORMATS)
        kind: EventStreamFormat = "openai" if chosen == "openai" else "plain"
        arrival = await arrive(state, request, "sse")
        if arrival.attempt <= fail_times:
            return _failed(arrival, failure)
        return _stream(arrival, events, interval, kind)

    async def chat_completions(request: Request) -> Response:
        events, interval, fail_times, failure = _stream_params(request)
        arrival = await arrive(state, request, "openai/chat/completions")
        try:
            body = json.loads(arrival.body or b"{}")
        except ValueError:
            return reply_json(arrival, 400, {"error": {"message": "the body is not JSON"}})
        if arrival.attempt <= fail_times:
            return _failed(arrival, failure)
        if isinstance(body, dict) and body.get("stream") is True:
            return _stream(arrival, events, interval, "openai")
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
