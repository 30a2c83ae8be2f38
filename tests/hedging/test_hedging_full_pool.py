"""A sync hedging call whose copies wait for a connection in a full pool.

With ``max_connections=1`` the first copy holds the only connection, and the hedged
copy waits in httpcore's queue for it. When the first copy wins, the copy still waiting
has lost: once the round is judged it must leave the queue at once, take no connection
and send nothing, so the winner's kept-alive connection is there for the next call.
(Left waiting, it took the connection as soon as the winner's streamed body was closed,
was refused before writing, and left that connection closed.) A buffered winner frees
its connection as it reads its body, before the round is judged: the copy given it
waits for that judgement, and gives it back unused (docs/hedging.md, Limits).

A keep-alive HTTP/1.1 server of its own, in a thread, counts requests and connections.
Wall-clock assertions are loose bounds.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy

#: A copy goes after 50 ms; the first request takes 300 ms.
HEDGED = RetryPolicy(hedge_after=0.05, attempt_timeout=5.0, deadline=8.0)
#: The calls around the one under test do not hedge: on a busy machine a quick answer
#: may take longer than 50 ms, and a copy of it would then wait in the pool (the race
#: the module's docstring leaves) and could close the one connection.
UNHEDGED = RetryPolicy(attempt_timeout=5.0, deadline=8.0)


class _Counting(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: list[str]
    connections: list[int]

    def setup(self) -> None:
        super().setup()
        self.connections.append(1)

    def do_GET(self) -> None:
        self.requests.append(self.path)
        if "slow" in self.path and self.requests.count(self.path) == 1:
            time.sleep(0.3)
            if "broken" in self.path:  # a 200 whose body stops short
                self.send_response(200)
                self.send_header("Content-Length", "10")
                self.end_headers()
                self.wfile.write(b"ok")
                self.close_connection = True
                return
        if self.path.startswith("/stream"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(3):
                self.wfile.write(b"2\r\nok\r\n")
                self.wfile.flush()
                time.sleep(0.1)
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Counting]]]:
    handler = type("Handler", (_Counting,), {"requests": [], "connections": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


def _queued(client: retrysafe.Client) -> int:
    """Requests waiting for a connection in the client's pool."""
    pool = client._transport._loop.transport._pool  # type: ignore[attr-defined]
    return sum(1 for request in pool._requests if request.is_queued())


def test_a_copy_that_lost_while_waiting_for_the_pool_leaves_it_and_sends_nothing(
    server: tuple[str, type[_Counting]],
) -> None:
    url, handler = server
    with retrysafe.Client(policy=HEDGED, limits=httpx.Limits(max_connections=1)) as client:
        client.get(f"{url}/warm", policy=UNHEDGED)
        started = time.monotonic()
        with client.stream("GET", f"{url}/stream/slow") as response:
            report = retrysafe.report_of(response)
            assert report is not None
            assert (report.hedges, report.winner) == (1, 1)  # the copy went, and lost
            time.sleep(0.05)
            # The losing copy is out of the queue at once, not waiting for the
            # connection the winner's body still holds.
            assert _queued(client) == 0
            assert response.read() == b"okokok"
        assert time.monotonic() - started < 3.0
        time.sleep(0.2)  # (a copy still waiting would have taken the connection by now)
        assert client.get(f"{url}/after", policy=UNHEDGED).text == "ok"
    # The server saw the winner only, and every call went over the one connection.
    assert handler.requests == ["/warm", "/stream/slow", "/after"]
    assert len(handler.connections) == 1


def test_a_winning_looking_answer_whose_body_fails_does_not_hold_up_the_call(
    server: tuple[str, type[_Counting]],
) -> None:
    # The first copy's 200 has a body that stops short, while the hedged copy waits for
    # the connection: the call goes on at once (the copy, or a retry), and succeeds.
    url, handler = server
    with retrysafe.Client(policy=HEDGED, limits=httpx.Limits(max_connections=1)) as client:
        client.get(f"{url}/warm", policy=UNHEDGED)
        started = time.monotonic()
        response = client.get(f"{url}/slow/broken")
        elapsed = time.monotonic() - started
    assert response.text == "ok"
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.history[0].outcome != "success"  # the 200 whose body failed
    assert report.history[-1].outcome == "success"
    assert elapsed < 3.0  # not a copy's 5 s attempt
    assert handler.requests == ["/warm", "/slow/broken", "/slow/broken"]


def test_a_copy_that_lost_before_its_thread_came_to_send_it_sends_nothing() -> None:
    # On a busy machine a copy's thread may start after the round it belongs to was
    # judged: the copy has lost, and there is no queue entry yet for its loss to take
    # out. It must not go on to send (and wait in the pool for a connection).
    from retrysafe.decisions import AttemptPlan
    from retrysafe.drive import Drive
    from retrysafe.hedged_shell import _Copy, _send
    from retrysafe.shell_settings import ShellSettings

    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    transport = httpx.MockTransport(answer)
    settings = ShellSettings.build(
        policy=HEDGED,
        clock=None,
        governor=None,
        hooks=(),
        dependency=None,
        raise_errors=False,
        deadline_header=None,
    )
    request = httpx.Request("GET", "http://api.test/items")
    drive = Drive(settings, request)
    try:
        copy = _Copy(AttemptPlan(2, 5.0, False, True), request, drive, transport)
        copy.cancel()  # the round was judged before the copy's thread began
        result = _send(transport, copy)
    finally:
        drive.close()
    assert sent == []
    assert result.response is None
    assert result.failure is not None


def test_a_copy_given_the_connection_a_buffered_winner_frees_sends_nothing(
    server: tuple[str, type[_Counting]],
) -> None:
    """A buffered winner frees its connection as its body is read, before the caller's
    thread has judged its answer, and the copy waiting in the pool gets it. It was then
    written, cut as it lost, and the kept-alive connection closed (trial82: every time).
    Given a connection while a sibling's answer awaits judgement, a copy now waits for
    that judgement, and sends nothing if it lost."""
    url, handler = server
    with retrysafe.Client(policy=HEDGED, limits=httpx.Limits(max_connections=1)) as client:
        client.get(f"{url}/warm", policy=UNHEDGED)
        response = client.get(f"{url}/slow")
        report = retrysafe.report_of(response)
        assert report is not None
        assert (response.text, report.hedges, report.winner) == ("ok", 1, 1)
        time.sleep(0.2)  # (a copy sent late would have reached the server by now)
        assert client.get(f"{url}/after", policy=UNHEDGED).text == "ok"
    assert handler.requests == ["/warm", "/slow", "/after"]
    assert len(handler.connections) == 1
