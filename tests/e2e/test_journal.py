"""Client-side idempotency: one key per operation, kept on disk across a crash.

Writes go to the chaos server's ``/idempotent`` endpoint (its ledger counts side
effects per key over real sockets) and through ``IdempotencyMiddleware`` with a
real SQLite store, in both cases with the reply lost after the work was done.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.chaos import ChaosServer
from retrysafe.chaos.connection import reset
from retrysafe.idempotency import (
    PROBLEM_TYPE_PREFIX,
    IdempotencyMiddleware,
    Journal,
    JournalConflict,
    JournalState,
    OperationDone,
    SQLiteStore,
)

pytestmark = pytest.mark.anyio
FAST = RetryPolicy(backoff_base=0.01, backoff_cap=0.05, attempt_timeout=5)
PAYMENT = {"amount": 4900, "currency": "eur"}


@pytest.fixture
def journal(tmp_path: Path) -> Any:
    with Journal(tmp_path / "operations.sqlite3") as opened:
        yield opened


def test_the_operation_is_on_disk_before_the_first_send(chaos: Any, tmp_path: Path) -> None:
    path = tmp_path / "ops.sqlite3"
    seen_states: list[str] = []

    def during_call(event: retrysafe.RetryEvent) -> None:
        if event.kind == "attempt":
            return  # the retry and the success are the two moments looked at
        with Journal(path) as other_connection:  # what a crash would leave behind
            operation = other_connection.get("pay-1")
            seen_states.append(operation.state if operation else "missing")

    url = chaos.url("/fail/{key}", times=1, status=503)
    with (
        Journal(path) as journal,
        retrysafe.Client(journal=journal, policy=FAST, hooks=[during_call]) as client,
    ):
        client.post(url, json=PAYMENT, operation="pay-1")
        done = journal.get("pay-1")
    # Read from a second connection, as a restarted process would, during the call.
    assert seen_states == ["sent", "sent"]
    assert done is not None
    assert (done.state, done.attempts, done.last_status) == ("done", 2, 200)


def test_a_reply_lost_after_commit_is_retried_with_the_same_key(
    chaos: Any, journal: Journal
) -> None:
    resource = f"orders-{chaos.key}"
    url = chaos.url(f"/idempotent/{resource}", fail_after_commit="reset")
    with retrysafe.Client(journal=journal, policy=FAST) as client:
        response = client.post(url, json=PAYMENT, operation="order-1")
    operation = journal.get("order-1")
    assert operation is not None
    assert response.headers["idempotent-replayed"] == "true"
    assert chaos.ledger(resource) == {operation.key: 1}
    assert {record.idempotency_key for record in chaos.log()} == {operation.key}


def test_reusing_a_name_for_a_different_body_is_refused_before_sending(
    chaos: Any, journal: Journal
) -> None:
    url = chaos.url("/echo")
    with retrysafe.Client(journal=journal, policy=FAST) as client:
        client.post(url, json=PAYMENT, operation="pay-2")
        with pytest.raises(JournalConflict, match="different request"):
            client.post(url, json={"amount": 1}, operation="pay-2")
    assert len(chaos.log()) == 1


def test_an_operation_refuses_a_key_of_the_callers_in_the_headers(
    chaos: Any, journal: Journal
) -> None:
    """The journal's key would replace it: a write the caller resent by hand under the
    header's key would go out under another, and be done twice (review67)."""
    with (
        retrysafe.Client(journal=journal, policy=FAST) as client,
        pytest.raises(ValueError, match="operation= keeps its own idempotency key"),
    ):
        client.post(
            chaos.url("/echo"),
            json=PAYMENT,
            headers={"Idempotency-Key": "order-42"},
            operation="pay-9",
        )
    assert chaos.log() == []


def test_the_journal_file_holds_no_hash_to_test_a_secret_against(tmp_path: Path) -> None:
    """The fingerprint leaves the request's secret values out: whoever reads the file cannot
    test guesses at a password in the query or the body against it."""
    path = tmp_path / "ops.sqlite3"
    transport = httpx.MockTransport(lambda request: httpx.Response(201))
    with Journal(path) as journal, retrysafe.Client(transport=transport, journal=journal) as c:
        c.post("https://api.test/orders?password=summer2024", json=PAYMENT, operation="a")
        c.post(
            "https://api.test/orders?password=winter2023",
            json={**PAYMENT, "client_secret": "cs_secret_8c2f"},
            operation="b",
        )
        c.post("https://api.test/orders?password=x", json=PAYMENT, operation="c")
        first, second, third = (journal.get(name) for name in "abc")
    assert first is not None
    assert second is not None
    assert third is not None
    # The same request but for its secrets: one fingerprint, whatever the secrets were.
    assert first.fingerprint == third.fingerprint
    assert second.fingerprint != first.fingerprint  # (it also has a field more)
    raw = path.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("ops.sqlite3-*"))
    for secret in (b"summer2024", b"winter2023", b"cs_secret_8c2f"):
        assert secret not in raw


def test_two_requests_differing_in_an_id_that_reads_as_a_card_number_are_two(
    chaos: Any, journal: Journal
) -> None:
    """One in ten long ids passes the card-number check that hides cards from messages:
    the fingerprint keeps a card number's first six and last four digits, so two such ids
    still tell requests apart unless they share both."""
    url = chaos.url("/echo")
    with retrysafe.Client(journal=journal, policy=FAST) as client:
        client.post(url, json={"charge": "4242424242424242"}, operation="refund-1")
        with pytest.raises(JournalConflict, match="different request"):
            client.post(url, json={"charge": "4000056655665556"}, operation="refund-1")
    assert len(chaos.log()) == 1


def test_an_operation_resumed_with_a_rotated_token_is_the_same_request(
    chaos: Any, journal: Journal
) -> None:
    """A token in the query, rotated between the crash and the re-run: not a conflict."""
    url = chaos.url("/fail/{key}", times=9, status=503)
    with retrysafe.Client(journal=journal, policy=RetryPolicy(attempts=1)) as client:
        with pytest.raises(retrysafe.ServerError):
            client.post(f"{url}&api_key=old-token-1234", json=PAYMENT, operation="pay-9")
        first = journal.get("pay-9")
        with pytest.raises(retrysafe.ServerError):  # resumed, under the same key
            client.post(f"{url}&api_key=new-token-5678", json=PAYMENT, operation="pay-9")
    assert first is not None
    keys = {record.idempotency_key for record in chaos.log()}
    assert keys == {first.key}


def test_an_ambiguous_outcome_goes_to_the_hook_and_resumes_with_the_same_key(
    chaos: Any, tmp_path: Path
) -> None:
    reconcile: list[str] = []
    resource = f"payouts-{chaos.key}"
    url = chaos.url(f"/idempotent/{resource}", fail_after_commit="hang", fail_times=2)
    policy = RetryPolicy(attempts=2, attempt_timeout=0.3, backoff_base=0.01)
    with (
        Journal(
            tmp_path / "ops.sqlite3", on_ambiguous=lambda op: reconcile.append(op.name)
        ) as journal,
        retrysafe.Client(journal=journal, policy=policy) as client,
    ):
        with pytest.raises(retrysafe.TransportError):
            client.post(url, json=PAYMENT, operation="payout-7")
        assert reconcile == ["payout-7"]
        assert [op.name for op in journal.unresolved()] == ["payout-7"]
        first = journal.get("payout-7")
        assert first is not None
        assert first.state == "ambiguous"
        response = client.post(url, json=PAYMENT, operation="payout-7")
        assert response.headers["idempotent-replayed"] == "true"
        assert journal.unresolved() == []
    assert chaos.ledger(resource) == {first.key: 1}
    assert {record.idempotency_key for record in chaos.log()} == {first.key}


def test_a_failure_the_server_refused_is_failed_not_ambiguous(chaos: Any, journal: Journal) -> None:
    with (
        retrysafe.Client(journal=journal, policy=FAST) as client,
        pytest.raises(retrysafe.ClientError),
    ):
        client.post(chaos.url("/status/422"), json=PAYMENT, operation="bad-1")
    operation = journal.get("bad-1")
    assert operation is not None
    assert (operation.state, operation.last_status) == ("failed", 422)
    assert journal.unresolved() == []


def test_a_result_the_server_could_not_keep_is_ambiguous(journal: Journal) -> None:
    # The write ran on the server, but its response was not kept for replay (the
    # middleware's 409 "result not replayable", e.g. after a crash before the client
    # recorded the outcome): the journal must not file it as a write that surely failed.
    problem = {"type": PROBLEM_TYPE_PREFIX + "result-not-replayable", "status": 409}

    def ran_already(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "application/problem+json"}
        return httpx.Response(409, json=problem, headers=headers)

    with (
        retrysafe.Client(
            transport=httpx.MockTransport(ran_already), journal=journal, policy=FAST
        ) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.post("https://api.test/payouts", json=PAYMENT, operation="payout-9")
    assert caught.value.processed == "maybe"
    operation = journal.get("payout-9")
    assert operation is not None
    assert (operation.state, operation.last_status) == ("ambiguous", 409)
    assert [op.name for op in journal.unresolved()] == ["payout-9"]


@pytest.mark.parametrize("resumed", [True, False], ids=["resumed", "first-run"])
def test_a_409_that_says_nothing_of_the_key_is_in_use_only_if_a_run_sent_it(
    journal: Journal, resumed: bool
) -> None:
    # A server that follows the IETF draft answers a repeat of a key whose first request
    # still runs with a plain 409. After a crash that left the operation "sent", the
    # earlier process's request may be that one: the resumed write is not refused for
    # good. On a first run, the same 409 is the app's own conflict.
    request = httpx.Request("POST", "https://api.test/payouts", json=PAYMENT)
    if resumed:
        journal.begin("payout-7", request)
        journal.mark_sent("payout-7")

    def outstanding(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"title": "A request is outstanding for this key"})

    with (
        retrysafe.Client(
            transport=httpx.MockTransport(outstanding), journal=journal, policy=FAST
        ) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.post("https://api.test/payouts", json=PAYMENT, operation="payout-7")
    operation = journal.get("payout-7")
    assert operation is not None
    if resumed:
        assert (caught.value.attempts, caught.value.processed) == (FAST.attempts, "maybe")
        assert operation.state == "ambiguous"
        # (the mark is for that call: the same request sent again later carries none)
        assert caught.value.response is not None
        assert "retrysafe.key_sent_before" not in caught.value.response.request.extensions
    else:
        assert (caught.value.reason, caught.value.attempts, caught.value.processed) == (
            "conflict",
            1,
            "no",
        )
        assert operation.state == "failed"


def test_operation_needs_a_journal(chaos: Any) -> None:
    with retrysafe.Client() as client, pytest.raises(ValueError, match="needs a journal"):
        client.post(chaos.url("/echo"), operation="x")
    assert chaos.log() == []


def test_auto_mode_keys_every_post_and_patch_but_not_get(chaos: Any) -> None:
    with retrysafe.Client(idempotency="auto", policy=FAST) as client:
        client.post(chaos.url("/echo"), json=PAYMENT)
        client.patch(chaos.url("/echo"), json=PAYMENT)
        client.get(chaos.url("/echo"))
    keys = [record.idempotency_key for record in chaos.log()]
    assert keys[0]
    assert keys[1]
    assert keys[0] != keys[1]
    assert keys[2] is None


@pytest.mark.parametrize("where", ["call", "client"])
def test_auto_mode_keeps_a_key_the_caller_set(chaos: Any, where: str) -> None:
    """A key in the call's headers or the client's default ones is the caller's: "auto"
    only keys a write that has none (and replaces a blank one)."""
    mine = {"Idempotency-Key": "order-7-pay"}
    with retrysafe.Client(
        idempotency="auto", policy=FAST, headers=mine if where == "client" else None
    ) as client:
        client.post(chaos.url("/echo"), json=PAYMENT, headers=mine if where == "call" else None)
        client.post(chaos.url("/echo"), json=PAYMENT, headers={"Idempotency-Key": "  "})
    keys = [record.idempotency_key for record in chaos.log()]
    assert keys[0] == "order-7-pay"
    # A blank key header is no key (and overrides the client's): "auto" makes one.
    assert keys[1] is not None
    assert keys[1].strip()
    assert keys[1] != "order-7-pay"


async def test_auto_mode_keeps_a_key_the_caller_set_async_and_streamed(chaos: Any) -> None:
    mine = {"Idempotency-Key": "order-8-pay"}
    async with retrysafe.AsyncClient(idempotency="auto", policy=FAST) as client:
        await client.post(chaos.url("/echo"), json=PAYMENT, headers=mine)
        async with client.stream("POST", chaos.url("/echo"), json=PAYMENT, headers=mine) as r:
            await r.aread()
    assert [record.idempotency_key for record in chaos.log()] == ["order-8-pay"] * 2


def test_auto_mode_keys_a_request_sent_with_send_and_not_one_that_asks_for_none(
    chaos: Any,
) -> None:
    with retrysafe.Client(idempotency="auto", policy=FAST) as client:
        client.send(client.build_request("POST", chaos.url("/echo"), json=PAYMENT))
        client.post(chaos.url("/echo"), json=PAYMENT, idempotency_key=False)
    keys = [record.idempotency_key for record in chaos.log()]
    assert keys[0]
    assert keys[1] is None


def test_an_upload_resent_under_its_key_is_the_same_bytes(chaos: Any) -> None:
    """httpx draws a random multipart boundary per request: resent under the same key
    after an ambiguous failure, the upload must be the same bytes, or the server's
    idempotency check takes it for another request."""
    upload = {"pdf": ("invoice.pdf", b"%PDF-1.4 the invoice")}
    with retrysafe.Client(policy=FAST) as client:
        for headers, key in [(None, "upload-7"), ({"Idempotency-Key": "upload-7"}, None)]:
            for _ in range(2):
                client.post(chaos.url("/echo"), files=upload, headers=headers, idempotency_key=key)
    bodies = {record.body_sha256 for record in chaos.log()}
    assert len(chaos.log()) == 4
    assert len(bodies) == 1


def test_no_files_under_a_key_is_no_upload(chaos: Any) -> None:
    """``files={}`` sends no multipart body (httpx encodes the form), key or not."""
    with retrysafe.Client(policy=FAST) as client:
        echoed = client.post(
            chaos.url("/echo"), data={"a": "1"}, files={}, idempotency_key="k-form-1"
        ).json()
    assert echoed["headers"]["idempotency-key"] == "k-form-1"
    assert echoed["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert echoed["body"] == "a=1"


def test_an_upload_without_a_key_keeps_httpx_boundary(chaos: Any) -> None:
    upload = {"pdf": ("invoice.pdf", b"%PDF-1.4 the invoice")}
    with retrysafe.Client(policy=FAST) as client:
        client.post(chaos.url("/echo"), files=upload)
        client.post(chaos.url("/echo"), files=upload)
    assert len({record.body_sha256 for record in chaos.log()}) == 2


def test_a_bad_idempotency_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="'off' or 'auto'"):
        retrysafe.Client(idempotency="always")  # type: ignore[arg-type]


async def test_the_async_client_journals_too(chaos: Any, journal: Journal) -> None:
    resource = f"async-{chaos.key}"
    url = chaos.url(f"/idempotent/{resource}", fail_after_commit="500")
    async with retrysafe.AsyncClient(journal=journal, policy=FAST) as client:
        await client.post(url, json=PAYMENT, operation="async-1")
    operation = journal.get("async-1")
    assert operation is not None
    assert operation.state == "done"
    assert chaos.ledger(resource) == {operation.key: 1}


def test_a_killed_client_resumes_with_its_key_after_a_restart(
    chaos_server: ChaosServer, chaos: Any, tmp_path: Path
) -> None:
    resource = f"crash-{chaos.key}"
    url = chaos.url(f"/idempotent/{resource}", fail_after_commit="hang", fail_times=1)
    journal_path = tmp_path / "ops.sqlite3"
    script = Path(__file__).with_name("journal_client.py")
    command = [sys.executable, str(script), str(journal_path), url]
    first_run = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not chaos.ledger(resource) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum(chaos.ledger(resource).values()) == 1, "the first run's write was applied"
    finally:
        os.kill(first_run.pid, signal.SIGKILL)
        first_run.wait(10)
    with Journal(journal_path) as journal:
        crashed = journal.get("pay-42")
    assert crashed is not None
    assert crashed.state == "sent"

    second_run = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    assert second_run.stdout.strip() == "201"
    with Journal(journal_path) as journal:
        resumed = journal.get("pay-42")
    assert resumed is not None
    assert (resumed.key, resumed.state) == (crashed.key, "done")
    assert chaos.ledger(resource) == {crashed.key: 1}
    assert [record.idempotency_key for record in chaos.log()] == [crashed.key, crashed.key]


# -- through the server middleware --------------------------------------------------------


def payments_app(store: SQLiteStore, runs: list[str]) -> Any:
    """A payments API behind IdempotencyMiddleware, whose first reply per key is lost.

    The outer layer lets the guarded app run to the end (the middleware stores the
    response), then resets the TCP connection instead of answering: the work is done and
    the client never hears of it.
    """

    async def pay(request: Request) -> Response:
        runs.append(request.headers["idempotency-key"])
        return JSONResponse({"paid": True}, status_code=201)

    guarded = IdempotencyMiddleware(
        Starlette(routes=[Route("/payments", pay, methods=["POST"])]),
        store,
        scope=lambda request: "alice",
        required=True,
    )
    replies_lost: set[str] = set()

    async def lose_first_reply(scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers", ()))
        key = headers.get(b"idempotency-key", b"").decode()
        if key and key not in replies_lost:
            replies_lost.add(key)

            async def swallow(message: Any) -> None:
                return None

            await guarded(scope, receive, swallow)
            reset(scope["extensions"]["retrysafe.chaos.transport"])
            return
        await guarded(scope, receive, send)

    return lose_first_reply


def test_through_the_middleware_a_lost_reply_is_replayed_and_the_work_runs_once(
    tmp_path: Path,
) -> None:
    runs: list[str] = []
    store = SQLiteStore(tmp_path / "idempotency.sqlite3")
    with (
        ChaosServer(app=payments_app(store, runs)) as server,
        retrysafe.Client(policy=FAST) as client,
    ):
        response = client.post(f"{server.url}/payments", json=PAYMENT, idempotency_key=True)
        report = response.extensions["retrysafe"]
    assert response.status_code == 201
    assert response.headers["idempotent-replayed"] == "true"
    assert report.attempts == 2
    assert report.history[0].outcome in {"connection_reset", "remote_protocol_error"}
    assert runs == [report.idempotency_key]


def test_without_a_key_the_same_lost_reply_is_not_retried(tmp_path: Path) -> None:
    runs: list[str] = []
    store = SQLiteStore(tmp_path / "idempotency.sqlite3")
    with (
        ChaosServer(app=payments_app(store, runs)) as server,
        retrysafe.Client(policy=FAST) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.post(f"{server.url}/payments", json=PAYMENT)
    assert caught.value.status == 400  # the key is required: refused before running
    assert runs == []


def test_the_plain_httpx_way_without_retrysafe_pays_twice() -> None:
    """The baseline the ledger tests compare against: retry without a key, pay twice."""
    with ChaosServer() as server:
        url = f"{server.url}/idempotent/baseline?fail_after_commit=500"
        with httpx.Client() as client:
            client.post(url, json=PAYMENT)
            client.post(url, json=PAYMENT)
        assert server.ledger("baseline") == {"": 2}


def test_a_resumed_operation_refused_a_connection_stays_ambiguous(tmp_path: Path) -> None:
    """The first run's reply was lost after the server read it (ambiguous); the resumed
    run finds the server down. Its refused connections do not make the write surely
    undone: the earlier run's may have been done, so the operation stays ambiguous."""
    policy = RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.01, attempt_timeout=2)

    async def lost_reply(scope: Any, receive: Any, send: Any) -> None:
        await receive()  # (the request was read: the server may have acted on it)
        reset(scope["extensions"]["retrysafe.chaos.transport"])

    with Journal(tmp_path / "ops.sqlite3") as journal:
        with ChaosServer(app=lost_reply) as server:
            url = f"{server.url}/pay"
            with (
                retrysafe.Client(journal=journal, policy=policy) as client,
                pytest.raises(retrysafe.TransportError),
            ):
                client.post(url, json=PAYMENT, operation="pay-9")
        first = journal.get("pay-9")
        assert first is not None
        assert first.state == "ambiguous"
        # The server is gone: every attempt of the resumed run is refused.
        with (
            retrysafe.Client(journal=journal, policy=policy) as client,
            pytest.raises(retrysafe.TransportError) as caught,
        ):
            client.post(url, json=PAYMENT, operation="pay-9")
        assert caught.value.processed == "maybe"
        resumed = journal.get("pay-9")
        assert resumed is not None
        assert resumed.state == "ambiguous"
        assert [op.name for op in journal.unresolved()] == ["pay-9"]


@pytest.mark.parametrize("status", [307, 308])
def test_an_operation_redirected_elsewhere_is_not_done(journal: Journal, status: int) -> None:
    """A 307 or 308 not followed asks for the write at another URL: it is not done, and
    a run that follows the redirect resumes the operation under its key."""
    sent: list[httpx.Request] = []

    def moved(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.url.path == "/old":
            return httpx.Response(status, headers={"Location": "https://api.test/new"})
        return httpx.Response(201)

    with retrysafe.Client(transport=httpx.MockTransport(moved), journal=journal) as client:
        client.post("https://api.test/old", json=PAYMENT, operation="pay-10")
        first = journal.get("pay-10")
        assert first is not None
        assert first.state == "failed"
        response = client.post(
            "https://api.test/old", json=PAYMENT, operation="pay-10", follow_redirects=True
        )
    assert response.status_code == 201
    done = journal.get("pay-10")
    assert done is not None
    assert done.state == "done"
    assert len({request.headers["idempotency-key"] for request in sent}) == 1


def test_a_completed_operation_is_not_sent_again(chaos: Any, journal: Journal) -> None:
    with retrysafe.Client(journal=journal, policy=FAST) as client:
        client.post(chaos.url("/echo"), json=PAYMENT, operation="pay-once")
        with pytest.raises(OperationDone, match="already completed"):
            client.post(chaos.url("/echo"), json=PAYMENT, operation="pay-once")
    assert len(chaos.log()) == 1


def test_a_lost_reply_then_a_refusal_is_still_ambiguous(chaos: Any, journal: Journal) -> None:
    reconcile: list[str] = []
    journal_with_hook = Journal(journal.path, on_ambiguous=lambda op: reconcile.append(op.name))
    url = chaos.url("/sequence/{key}", steps="close,429")
    with journal_with_hook, retrysafe.Client(journal=journal_with_hook, policy=FAST) as client:
        with pytest.raises(retrysafe.RateLimited) as caught:
            client.post(url, json=PAYMENT, operation="pay-close-429")
        operation = journal_with_hook.get("pay-close-429")
    assert caught.value.processed == "maybe"
    assert operation is not None
    assert operation.state == "ambiguous"
    assert reconcile == ["pay-close-429"]


def test_a_multipart_upload_resumes_with_the_same_key_and_bytes(journal: Journal) -> None:
    # httpx draws a random multipart boundary per request: without one of the
    # operation's own, the re-run would be other bytes, refused as another request.
    sent: list[httpx.Request] = []

    def lost_reply(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        raise httpx.ReadTimeout("the reply was lost", request=request)

    def answers(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201)

    upload = {"pdf": ("invoice.pdf", b"%PDF-1.4 the invoice")}
    policy = RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.01)
    with (
        retrysafe.Client(transport=httpx.MockTransport(lost_reply), journal=journal) as client,
        pytest.raises(retrysafe.TransportError),
    ):
        client.post("https://api.test/invoices", files=upload, operation="up-1", policy=policy)
    with retrysafe.Client(transport=httpx.MockTransport(answers), journal=journal) as client:
        response = client.post("https://api.test/invoices", files=upload, operation="up-1")
    assert response.status_code == 201
    assert len(sent) == 3
    assert len({request.headers["idempotency-key"] for request in sent}) == 1
    assert len({request.content for request in sent}) == 1
    assert b"invoice.pdf" in sent[0].content


def test_an_operations_own_content_type_stays_as_the_caller_set_it(journal: Journal) -> None:
    sent: list[httpx.Request] = []

    def answers(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201)

    mine = "multipart/form-data; boundary=my-own-boundary"
    with retrysafe.Client(transport=httpx.MockTransport(answers), journal=journal) as client:
        client.post(
            "https://api.test/invoices",
            files={"pdf": ("a.pdf", b"x")},
            headers={"Content-Type": mine},
            operation="up-2",
        )
    assert sent[0].headers["content-type"] == mine
    assert b"--my-own-boundary" in sent[0].content


async def test_an_async_multipart_upload_resumes_with_the_same_bytes(journal: Journal) -> None:
    sent: list[httpx.Request] = []

    async def lost_then_answered(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if len(sent) == 1:
            raise httpx.ReadTimeout("the reply was lost", request=request)
        return httpx.Response(201)

    upload = {"pdf": ("invoice.pdf", b"%PDF-1.4 the invoice")}
    transport = httpx.MockTransport(lost_then_answered)
    policy = RetryPolicy(attempts=1)
    async with retrysafe.AsyncClient(transport=transport, journal=journal) as client:
        with pytest.raises(retrysafe.TransportError):
            await client.post("https://api.test/i", files=upload, operation="up-3", policy=policy)
        response = await client.post("https://api.test/i", files=upload, operation="up-3")
    assert response.status_code == 201
    assert len({request.content for request in sent}) == 1
    assert len({request.headers["idempotency-key"] for request in sent}) == 1


async def test_an_async_streamed_body_is_journaled_like_the_sync_clients_generator(
    journal: Journal,
) -> None:
    # The journal fingerprints the body it may resume: an async iterable is read first
    # (the sync client's generator is read the same way), and the same bytes are sent.
    sent: list[bytes] = []

    async def answered(request: httpx.Request) -> httpx.Response:
        sent.append(await request.aread())
        return httpx.Response(201)

    async def chunks() -> AsyncIterator[bytes]:
        yield b"abc"
        yield b"def"

    transport = httpx.MockTransport(answered)
    async with retrysafe.AsyncClient(transport=transport, journal=journal) as client:
        response = await client.post("https://api.test/w", content=chunks(), operation="up-4")
    assert response.status_code == 201
    assert sent == [b"abcdef"]
    operation = journal.get("up-4")
    assert operation is not None
    assert operation.state == "done"


# -- the journal's own records ------------------------------------------------------------


def payment_request(url: str = "https://api.test/payments", body: bytes = b"{}") -> httpx.Request:
    return httpx.Request("POST", url, content=body)


def test_unresolved_lists_every_operation_whose_outcome_is_not_settled(journal: Journal) -> None:
    """A crash leaves an operation "pending" (recorded, maybe never sent) or "sent"
    (its outcome unknown): both must be listed for reconciliation, with the ambiguous
    ones; done and failed ones are not, and the list is in the order they were begun."""
    for name in ("begun", "sent", "ambiguous", "done", "failed"):
        journal.begin(name, payment_request(f"https://api.test/{name}"))
    for name in ("sent", "ambiguous", "done", "failed"):
        journal.mark_sent(name)
    settled: list[tuple[str, JournalState]] = [
        ("ambiguous", "ambiguous"),
        ("done", "done"),
        ("failed", "failed"),
    ]
    for name, state in settled:
        journal.finish(name, state=state, attempts=1, status=None, reason=None)

    assert [(op.name, op.state) for op in journal.unresolved()] == [
        ("begun", "pending"),
        ("sent", "sent"),
        ("ambiguous", "ambiguous"),
    ]


def test_the_reconciliation_hook_hears_only_of_ambiguous_outcomes(tmp_path: Path) -> None:
    heard: list[tuple[str, str]] = []
    with Journal(
        tmp_path / "ops.sqlite3", on_ambiguous=lambda op: heard.append((op.name, op.state))
    ) as journal:
        outcomes: list[tuple[str, JournalState]] = [
            ("paid", "done"),
            ("refused", "failed"),
            ("lost", "ambiguous"),
        ]
        for name, state in outcomes:
            journal.begin(name, payment_request(f"https://api.test/{name}"))
            journal.mark_sent(name)
            journal.finish(name, state=state, attempts=2, status=None, reason=None)

    assert heard == [("lost", "ambiguous")]


@pytest.mark.parametrize("settled", ["done", "failed"])
def test_resolving_an_operation_settles_it_and_keeps_its_key(
    journal: Journal, settled: Literal["done", "failed"]
) -> None:
    request = payment_request()
    begun = journal.begin("payout-1", request)
    journal.mark_sent("payout-1")
    journal.finish("payout-1", state="ambiguous", attempts=3, status=None, reason="timeout")

    resolved = journal.resolve("payout-1", settled)

    assert (resolved.state, resolved.key) == (settled, begun.key)
    assert journal.unresolved() == []
    if settled == "done":  # (reconciliation found the payment: never send it again)
        with pytest.raises(
            OperationDone, match=r"was settled as done by resolve\(\) \(its last attempt got no"
        ):
            journal.begin("payout-1", request)
    else:  # (it surely did not happen: a new run sends it under the same key)
        assert journal.begin("payout-1", request).key == begun.key


def test_operations_with_identical_requests_get_keys_of_their_own(journal: Journal) -> None:
    """Two writes of the same amount to the same URL are two payments: sharing a key,
    the server would answer the second with the first one's stored response."""
    first = journal.begin("rent-2026-01", payment_request())
    second = journal.begin("rent-2026-02", payment_request())

    assert first.fingerprint == second.fingerprint
    assert first.key != second.key
    assert journal.begin("rent-2026-01", payment_request()).key == first.key


def test_a_request_whose_url_and_body_join_to_the_same_bytes_is_another_request(
    journal: Journal,
) -> None:
    journal.begin("pay-3", payment_request("https://api.test/pay", b"ment"))

    with pytest.raises(JournalConflict, match="different request"):
        journal.begin("pay-3", payment_request("https://api.test/payment", b""))


@pytest.mark.parametrize("name", ["", " ", "\t\n"])
def test_an_operation_needs_a_name_that_is_not_blank(journal: Journal, name: str) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        journal.begin(name, payment_request())
    assert journal.unresolved() == []


def test_settling_an_operation_the_journal_never_recorded_raises_key_error(
    journal: Journal,
) -> None:
    with pytest.raises(KeyError, match="no operation named 'missing'"):
        journal.mark_sent("missing")
    with pytest.raises(KeyError, match="no operation named 'missing'"):
        journal.resolve("missing", "done")


def test_the_journal_keeps_no_secret_of_the_url_on_disk(journal: Journal) -> None:
    url = "https://alice:hunter2@api.test/payments?api_key=sk-live-123&amount=49"

    operation = journal.begin("pay-4", payment_request(url))

    assert "hunter2" not in operation.url
    assert "sk-live-123" not in operation.url
    assert "amount=49" in operation.url
    journal.close()
    for path in journal.path.parent.glob(journal.path.name + "*"):
        assert b"hunter2" not in path.read_bytes()
        assert b"sk-live-123" not in path.read_bytes()
