"""An HTTP/2 (h2c) server in a process of its own, for bursts of many client threads.

A server in the test's own process shares its interpreter with the clients: fifty
threads taking turns delay its answers, and a request sent and answered late reads as a
slow server. This one answers ``/delay?ms=N`` with a 200 after ``N`` milliseconds,
``/events?count=N`` with N server-sent events and a ``[DONE]`` one (as an LLM API
streams), ``/big?kib=N`` with N KiB as fast as they go, ``/drip?chunks=N&interval_ms=M`` with N
small chunks M ms apart, and anything else at once,
with at most ``MAX_STREAMS`` streams per connection.

    python tests/h2_delay_server.py MAX_STREAMS

It prints its port on one line once it listens, and serves until its stdin closes.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from typing import Any
from urllib.parse import parse_qs

from hypercorn.asyncio import serve
from hypercorn.config import Config


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/delay?ms=N``: 200 after N ms; ``/events?count=N``: an event stream;
    ``/drip?chunks=N&interval_ms=M``: a body still flowing; any other path: 200 at once."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body"):
        pass
    query = parse_qs(scope["query_string"].decode())
    if scope["path"] == "/events":  # N server-sent events, then "[DONE]", each sent apart
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for number in range(int(query.get("count", ["3"])[0])):
            event = f"data: event {number}\n\n".encode()
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/big":  # N KiB as fast as the client's window lets them go
        await send({"type": "http.response.start", "status": 200, "headers": []})
        chunk = b"x" * 16384
        for _ in range(int(query.get("kib", ["1024"])[0]) // 16):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/drip":  # N small chunks, M ms apart
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(int(query.get("chunks", ["10"])[0])):
            await send({"type": "http.response.body", "body": b"drip\n", "more_body": True})
            await asyncio.sleep(float(query.get("interval_ms", ["100"])[0]) / 1000)
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/delay":
        await asyncio.sleep(float(query.get("ms", ["0"])[0]) / 1000)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def main(max_streams: int) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    config = Config()
    config.bind = [f"fd://{os.dup(sock.fileno())}"]
    config.h2_max_concurrent_streams = max_streams
    config.errorlog = None
    config.graceful_timeout = 0.2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # The test closes our stdin to stop us (and a test process that dies closes it too).
    loop.add_reader(sys.stdin.fileno(), stop.set)
    print(sock.getsockname()[1], flush=True)
    await serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
