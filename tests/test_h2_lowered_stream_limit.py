"""An HTTP/2 server that lowers its limit of concurrent streams below the streams open
on a connection.

httpcore then takes back the stream slots the new limit removes, while it reads for
every request on the connection, and waited there for streams to close: the streams
that would close could not read their answers meanwhile. A request held by a hang
kept every other request on its connection waiting until one ran out of time (sync:
the hang's 2 s deadline overran to 10 s, and a GET answered at once took as long;
async: the GET's answer, read with the settings, was lost when the hang's cancel cut
httpcore's handling, and it waited for its read timeout). Now a slot that is not free
is owed, and the next stream to close pays it: nobody waits for the turn to read, and
the count stays the server's limit, so the next request waits for a free stream.

A cut request's stream was another stream left open: httpcore forgot it without a
reset. It is now reset as its response is closed
(``retrysafe.attempt_deadline.reset_if_open``), so after a cut the next request goes
at once, on the same connection.

The server is written on h2 here (hypercorn cannot change its limit mid-connection):
it allows eight streams, never answers ``/hang``, lowers its limit to one when asked
for ``/lower``, and answers anything else with 200.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import anyio
import pytest

import retrysafe
from h2_test_server import H2TestServer
from retrysafe import RetryPolicy

h2_connection = pytest.importorskip("h2.connection")
h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")
h2_settings = pytest.importorskip("h2.settings")

pytestmark = pytest.mark.anyio

_LIMIT = h2_settings.SettingCodes.MAX_CONCURRENT_STREAMS
#: A hang cut at a tenth of a second: its stream stays open on the server.
CUT_AT_ONCE = RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=0.5)
#: Two attempts, with short waits (one would do: a second shows none was needed).
TWO_ATTEMPTS = RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.02, deadline=3.0)
H2_ONLY = {"http1": False, "http2": True}


class LoweringServer(H2TestServer):
    """The HTTP/2 server of this module (see its docstring)."""

    def serve(self, sock: socket.socket) -> None:
        conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=False))
        conn.local_settings = h2_settings.Settings(client=False, initial_values={_LIMIT: 8})
        conn.initiate_connection()
        with contextlib.suppress(OSError):
            sock.sendall(conn.data_to_send())
            while data := sock.recv(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, h2_events.RequestReceived):
                        self._answer(conn, event.stream_id, dict(event.headers)[b":path"])
                sock.sendall(conn.data_to_send())

    @staticmethod
    def _answer(conn: object, stream_id: int, path: bytes) -> None:
        if path == b"/hang":
            return
        if path == b"/lower":
            conn.update_settings({_LIMIT: 1})  # type: ignore[attr-defined]
        conn.send_headers(  # type: ignore[attr-defined]
            stream_id, [(":status", "200"), ("content-length", "2")]
        )
        conn.send_data(stream_id, b"ok", end_stream=True)  # type: ignore[attr-defined]


@pytest.fixture
def lowering() -> Iterator[LoweringServer]:
    server = LoweringServer()
    yield server
    server.close()


def unprotected() -> retrysafe.Governor:
    """No load protection: the breaker is not what these tests are about."""
    return retrysafe.Governor(retrysafe.GovernorSettings.off())


#: A hang that holds its stream while the server lowers its limit beside it.
HELD = RetryPolicy(attempts=1, attempt_timeout=1.5, deadline=2.0)
#: How long past a deadline (or an at-once answer) a loaded machine may run.
SLACK = 0.8


def test_a_limit_lowered_below_the_open_streams_holds_no_request_past_its_time_sync(
    lowering: LoweringServer,
) -> None:
    """A hang holds one stream; the server lowers its limit to one as it answers a GET.
    The GET's answer is read at once, the hang ends by its deadline, and the next GET
    waits for the hang's stream to close (the limit the server set), on the same
    connection."""
    hang_took: list[float] = []

    def hang(client: retrysafe.Client) -> None:
        started = time.monotonic()
        with contextlib.suppress(retrysafe.ApiError):
            client.get(f"{lowering.url}/hang", policy=HELD)
        hang_took.append(time.monotonic() - started)

    with retrysafe.Client(governor=unprotected(), **H2_ONLY) as client:
        assert client.get(f"{lowering.url}/ok").status_code == 200  # (the connection)
        holding = threading.Thread(target=hang, args=(client,))
        holding.start()
        time.sleep(0.2)
        started = time.monotonic()
        assert client.get(f"{lowering.url}/lower").status_code == 200
        lower_took = time.monotonic() - started
        response = client.get(f"{lowering.url}/ok", policy=TWO_ATTEMPTS)
        holding.join(10)
    assert lower_took < SLACK  # (it took 10 s)
    assert hang_took[0] < HELD.deadline + SLACK  # (10.3 s)
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert [record.outcome for record in report.history] == ["success"]
    assert lowering.connections == 1


async def test_a_limit_lowered_below_the_open_streams_holds_no_request_past_its_time_async(
    lowering: LoweringServer,
) -> None:
    """The same for tasks (the GET's answer took 5 s: lost, then its read timed out)."""
    hang_took: list[float] = []

    async with retrysafe.AsyncClient(governor=unprotected(), **H2_ONLY) as client:
        assert (await client.get(f"{lowering.url}/ok")).status_code == 200

        async def hang() -> None:
            started = time.monotonic()
            with contextlib.suppress(retrysafe.ApiError):
                await client.get(f"{lowering.url}/hang", policy=HELD)
            hang_took.append(time.monotonic() - started)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hang)
            await anyio.sleep(0.2)
            started = time.monotonic()
            lowered = await client.get(f"{lowering.url}/lower")
            lower_took = time.monotonic() - started
            response = await client.get(f"{lowering.url}/ok", policy=TWO_ATTEMPTS)
    assert lowered.status_code == 200
    assert [record.outcome for record in retrysafe.report_of(lowered).history] == ["success"]
    assert lower_took < SLACK
    assert hang_took[0] < HELD.deadline + SLACK
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert [record.outcome for record in report.history] == ["success"]
    assert lowering.connections == 1


def test_a_cut_requests_stream_is_reset_so_the_next_one_goes_on_the_same_connection_sync(
    lowering: LoweringServer,
) -> None:
    """A cut request's stream is reset (httpcore left it open: review74), so when the
    server lowers its limit to one, the next GET goes at once, on the same connection."""
    with retrysafe.Client(governor=unprotected(), **H2_ONLY) as client:
        with pytest.raises(retrysafe.ApiError):
            client.get(f"{lowering.url}/hang", policy=CUT_AT_ONCE)
        assert client.get(f"{lowering.url}/lower").status_code == 200
        response = client.get(f"{lowering.url}/ok", policy=TWO_ATTEMPTS)
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert [record.outcome for record in report.history] == ["success"]
    assert lowering.connections == 1


async def test_a_cut_requests_stream_is_reset_so_the_next_one_goes_on_the_same_connection_async(
    lowering: LoweringServer,
) -> None:
    """The same for tasks."""
    async with retrysafe.AsyncClient(governor=unprotected(), **H2_ONLY) as client:
        with pytest.raises(retrysafe.ApiError):
            await client.get(f"{lowering.url}/hang", policy=CUT_AT_ONCE)
        assert (await client.get(f"{lowering.url}/lower")).status_code == 200
        response = await client.get(f"{lowering.url}/ok", policy=TWO_ATTEMPTS)
    assert response.status_code == 200
    report = retrysafe.report_of(response)
    assert [record.outcome for record in report.history] == ["success"]
    assert lowering.connections == 1
