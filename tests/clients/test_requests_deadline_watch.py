"""The requests adapter's watchdog ends each attempt at its time in three places it did
not (trial91): a body read from a response that closes its connection, a child process
forked after a call, and a wait for a pooled connection, which is the client's own
queue and not the server's timeout. Over real loopback sockets; bounds on elapsed time
have wide margins.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from collections.abc import Callable

import pytest
import requests
from tests.local_http import answers_ok_but_holds_streams, loopback_server

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.requests import RetryAdapter

pytestmark = pytest.mark.timeout(30)

#: A body of 30 bytes, one every 0.1 s: 3 s in all, against attempts of 1 s or less.
_TRICKLED = 30
_BYTE_EVERY = 0.1


def _trickling(head: bytes) -> Callable[[socket.socket, bytes], None]:
    """Answers ``/ok`` at once; anything else with ``head`` and a body trickled a byte
    at a time."""

    def answer(connection: socket.socket, request: bytes) -> None:
        if request.startswith(b"GET /ok "):
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            return
        connection.sendall(head + b"\r\n")
        for _ in range(_TRICKLED):
            time.sleep(_BYTE_EVERY)
            connection.sendall(b"x")

    return answer


def _session(policy: RetryPolicy, **adapter: object) -> requests.Session:
    session = requests.Session()
    session.mount("http://", RetryAdapter(policy=policy, **adapter))  # type: ignore[arg-type]
    return session


ONE_SECOND = RetryPolicy(attempts=1, attempt_timeout=10.0, deadline=1.0)


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\nConnection: close\r\n",
        b"HTTP/1.0 200 OK\r\n",  # (its body ends as the connection closes)
    ],
    ids=["connection-close", "http-1.0"],
)
def test_a_body_trickled_on_a_response_that_closes_its_connection_ends_at_the_deadline(
    head: bytes,
) -> None:
    """http.client hands such a response the connection's socket and drops its own
    reference: the watchdog found no socket to shut down, and the call ran the whole
    3 s trickle past its 1 s deadline."""
    with loopback_server(_trickling(head)) as url, _session(ONE_SECOND) as session:
        started = time.monotonic()
        with pytest.raises(retrysafe.DeadlineExceeded):
            session.get(f"{url}/trickled")
        elapsed = time.monotonic() - started
    assert elapsed < 1.0 + 0.5


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (3.12+: forking with threads)
def test_a_child_process_forked_after_a_call_still_ends_its_attempts_at_their_time() -> None:
    """The parent's first call starts the watchdog's thread; a child forked after it has
    no such thread, and its trickled call ran the whole 3 s (as under gunicorn
    ``--preload``, Celery's prefork pool, multiprocessing's fork)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n"
    with loopback_server(_trickling(head)) as url, _session(ONE_SECOND) as session:
        assert session.get(f"{url}/ok").status_code == 200  # (the thread runs now)
        reading, writing = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            outcome = "no outcome"
            try:
                started = time.monotonic()
                try:
                    _session(ONE_SECOND).get(f"{url}/trickled")
                    outcome = "answered"
                except retrysafe.DeadlineExceeded:
                    outcome = "deadline"
                os.write(writing, pickle.dumps((outcome, time.monotonic() - started)))
            finally:
                os._exit(0)
        os.close(writing)
        with os.fdopen(reading, "rb") as from_child:
            outcome, elapsed = pickle.loads(from_child.read())
        os.waitpid(child, 0)
    assert outcome == "deadline"
    assert elapsed < 1.0 + 0.5


def test_a_wait_for_a_pooled_connection_is_a_pool_timeout_and_a_post_is_retried() -> None:
    """A pool of one connection, held by a streamed body: a keyless POST waiting for it
    was never sent, and is retried (pool_timeout, processed "no"). The wait ended with
    the attempt's hard end, as the watchdog cut the attempt, and came out as the
    attempt's timeout, "maybe processed", in about half the runs."""
    policy = RetryPolicy(attempts=2, attempt_timeout=0.2, deadline=5.0, backoff_base=0.01)
    with (
        loopback_server(answers_ok_but_holds_streams) as url,
        _session(policy, pool_connections=1, pool_maxsize=1, pool_block=True) as session,
    ):
        held = session.get(f"{url}/held", stream=True)
        try:
            for _ in range(3):
                with pytest.raises(retrysafe.ApiError) as caught:
                    session.post(f"{url}/write", data=b"x")
                assert [record.outcome for record in caught.value.history] == ["pool_timeout"] * 2
                assert caught.value.processed == "no"
        finally:
            held.close()


def test_waits_for_a_pooled_connection_do_not_open_the_circuit() -> None:
    """Twenty-five calls waiting for the pool's one connection, each cut: the client's
    own queue, so the next call, once the connection is free, is sent (20 of them were
    taken for the server's timeouts, and the circuit opened on a healthy server)."""
    policy = RetryPolicy(attempts=1, attempt_timeout=0.1, deadline=5.0)
    governor = retrysafe.Governor()  # (the default load protection, shared by both)
    with (
        loopback_server(answers_ok_but_holds_streams) as url,
        _session(
            policy, governor=governor, pool_connections=1, pool_maxsize=1, pool_block=True
        ) as session,
        _session(RetryPolicy(attempts=1, attempt_timeout=5.0), governor=governor) as patient,
    ):
        held = session.get(f"{url}/held", stream=True)
        outcomes = []
        try:
            for number in range(25):
                with pytest.raises(retrysafe.ApiError) as caught:
                    session.get(f"{url}/wait-{number}")
                outcomes.append(caught.value.history[-1].outcome)
        finally:
            held.close()
        assert outcomes == ["pool_timeout"] * 25
        # (a call of its own, patient: a busy machine does not time it out)
        assert patient.get(f"{url}/ok").status_code == 200
