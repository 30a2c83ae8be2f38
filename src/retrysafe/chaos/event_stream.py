"""Server-sent events dripped over time: the bodies of ``/sse`` and the OpenAI-style endpoint.

An :class:`EventStreamResponse` sends its headers and first event at once, then one
event per ``interval``, then a closing tail (``data: [DONE]`` for the OpenAI format). A
streaming client sees the first event almost at once; one that buffers the whole body
waits ``(events - 1) * interval``. Like every chaos reply it gives up as soon as the
server stops or the client leaves. It can also break part way (``breaks_after``): after
that many events it hangs, resets the connection, or closes it, as a server that crashes
or an overloaded proxy does mid-stream.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from retrysafe.chaos.outcomes import SocketFault, SocketFaultKind, end_for_shutdown, pause

__all__ = [
    "EVENT_STREAM_FORMATS",
    "EventStreamFormat",
    "EventStreamResponse",
    "OPENAI_ID",
    "OPENAI_MODEL",
    "openai_chunk",
    "openai_completion",
    "openai_token",
    "plain_event",
    "stream_events",
]

EventStreamFormat = Literal["plain", "openai"]
#: What ``format=`` can choose.
EVENT_STREAM_FORMATS: tuple[EventStreamFormat, ...] = ("plain", "openai")

#: The model name and completion id every OpenAI-style reply carries.
OPENAI_MODEL = "m"
OPENAI_ID = "c1"


def _data(payload: object) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def plain_event(number: int, events: int) -> bytes:
    """Event ``number`` (1-based) of ``events``: an ``id``, ``event: tick`` and JSON data."""
    payload = json.dumps({"n": number, "of": events}, separators=(",", ":"))
    return f"id: {number}\nevent: tick\ndata: {payload}\n\n".encode()


def openai_token(number: int) -> str:
    """The text of token ``number`` (1-based): ``tok1``, ``tok2``, ..."""
    return f"tok{number}"


def openai_chunk(content: str | None, finish_reason: str | None = None) -> bytes:
    """One ``chat.completion.chunk`` event; ``content=None`` sends an empty delta."""
    delta = {} if content is None else {"content": content}
    return _data(
        {
            "id": OPENAI_ID,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": OPENAI_MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
    )


def openai_completion(events: int) -> dict[str, object]:
    """The non-streamed ``chat.completion`` holding every token at once."""
    return {
        "id": OPENAI_ID,
        "object": "chat.completion",
        "created": 0,
        "model": OPENAI_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "".join(openai_token(n) for n in range(1, events + 1)),
                },
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": events, "total_tokens": events + 1},
    }


def stream_events(events: int, kind: EventStreamFormat) -> tuple[list[bytes], bytes]:
    """The events to drip, and the tail sent right after the last one."""
    if kind == "openai":
        chunks = [openai_chunk(openai_token(n)) for n in range(1, events + 1)]
        return chunks, openai_chunk(None, "stop") + b"data: [DONE]\n\n"
    return [plain_event(n, events) for n in range(1, events + 1)], b""


class EventStreamResponse(Response):
    """``text/event-stream``: the first event at once, one more per ``interval``, the tail.

    ``breaks_after``: send only that many events (at most all of them, then no tail), and
    where the next would come, break as ``break_with`` says (``reset`` and ``close`` need
    :class:`~retrysafe.chaos.protocol.ChaosH11Protocol`, see
    :func:`~retrysafe.chaos.outcomes.supports_socket_faults`).
    """

    def __init__(
        self,
        *,
        events: Sequence[bytes],
        tail: bytes,
        interval: float,
        headers: dict[str, str],
        breaks_after: int | None = None,
        break_with: SocketFaultKind = "reset",
    ) -> None:
        super().__init__(
            status_code=200,
            headers={**headers, "cache-control": "no-cache"},
            media_type="text/event-stream",
        )
        # Starlette announces the (empty) rendered body's length; a stream has none.
        self.raw_headers = [
            (name, value) for name, value in self.raw_headers if name != b"content-length"
        ]
        self.events = list(events)
        self.tail = tail
        self.interval = interval
        self.breaks_after = breaks_after
        self.break_with: SocketFaultKind = break_with

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        for index, event in enumerate(self.events):
            if index:
                outcome = await pause(scope, receive, self.interval)
                if outcome == "stopping":
                    await end_for_shutdown(scope, receive)
                    return
                if outcome == "disconnected":
                    return
            if index == self.breaks_after:
                await SocketFault(self.break_with)(scope, receive, send)
                return
            await send({"type": "http.response.body", "body": event, "more_body": True})
        if self.breaks_after == len(self.events):
            await SocketFault(self.break_with)(scope, receive, send)
            return
        await send({"type": "http.response.body", "body": self.tail, "more_body": False})
