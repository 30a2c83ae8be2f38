"""``/idempotent/{resource}``: a write that commits, then may lose its reply.

This is the case idempotency keys exist for. A POST applies its side effect (a ledger
count) and *then* the reply can fail, so a client sees an error for work that was done.
A client that retries with the same Idempotency-Key gets the stored reply back, marked
``Idempotent-Replayed: true``, and the effect is not applied again; one that retries
without a key applies it twice, and the ledger shows it.

- ``fail_after_commit=reset|500|503|hang`` picks how the reply fails (none when absent);
- ``fail_times=N`` (default 1) fails the replies to the first N requests carrying the same
  Idempotency-Key (requests without a key are counted together, under ``""``); a request
  refused for a reused key (below) counts among them, though its 422 is not failed.
- Writes are scoped by the ``key`` query parameter; the ledger counts effects per
  Idempotency-Key, and writes without one are counted under ``""``, every time.
- Reusing a key with a different body is refused with 422 and applies nothing.
"""

from __future__ import annotations

import hashlib
import json

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import Arrival, arrive
from retrysafe.chaos.params import MAX_TIMES, InvalidParameter, int_param
from retrysafe.chaos.replies import reply_json, reply_socket_fault
from retrysafe.chaos.state import ChaosState, StoredReply

__all__ = ["COMMIT_FAILURES", "routes"]

#: How ``fail_after_commit`` can fail a reply.
COMMIT_FAILURES = frozenset({"reset", "500", "503", "hang"})

_CREATED = 201


def _commit(state: ChaosState, arrival: Arrival, resource: str) -> tuple[StoredReply, str, int]:
    """Apply or replay the write; return the reply, what was done, and the key's request count.

    Runs entirely under the state lock, so two concurrent requests with one key can never
    both apply the effect.
    """
    ledger_key = arrival.idempotency_key or ""
    write_key = (arrival.key, resource, ledger_key)
    with state.lock:
        requests = state.write_requests.get(write_key, 0) + 1
        state.write_requests[write_key] = requests
        stored = state.stored_replies.get(write_key) if ledger_key else None
        if stored is not None:
            if stored.body_sha256 != arrival.body_sha256:
                return _conflict(), "conflict", requests
            return stored, "replayed", requests
        ledger = state.ledgers.setdefault((arrival.key, resource), {})
        ledger[ledger_key] = ledger.get(ledger_key, 0) + 1
        write_id = state.next_write_id
        state.next_write_id += 1
        content = {
            "resource": resource,
            "id": write_id,
            "idempotency_key": arrival.idempotency_key,
            "key": arrival.key,
        }
        reply = StoredReply(
            status=_CREATED,
            body=json.dumps(content).encode(),
            body_sha256=arrival.body_sha256,
        )
        if ledger_key:
            state.stored_replies[write_key] = reply
        return reply, "applied", requests


def _conflict() -> StoredReply:
    body = json.dumps({"error": "This Idempotency-Key was used with a different body."}).encode()
    return StoredReply(status=422, body=body, body_sha256=hashlib.sha256(body).hexdigest())


def routes(state: ChaosState) -> list[Route]:
    """The idempotent write endpoint, bound to ``state``."""

    async def idempotent(request: Request) -> Response:
        failure = request.query_params.get("fail_after_commit") or None
        if failure is not None and failure not in COMMIT_FAILURES:
            choices = ", ".join(sorted(COMMIT_FAILURES))
            raise InvalidParameter("fail_after_commit", f"must be one of {choices}")
        fail_times = int_param(request, "fail_times", 1, minimum=0, maximum=MAX_TIMES)
        resource = request.path_params["resource"]
        arrival = await arrive(state, request, f"idempotent/{resource}")
        reply, done, requests = _commit(state, arrival, resource)
        if failure is not None and done != "conflict" and requests <= fail_times:
            if failure == "reset":
                return reply_socket_fault(arrival, "reset", detail=done)
            if failure == "hang":
                return reply_socket_fault(arrival, "hang", detail=done)
            content = {"error": "The write was committed, then the reply failed."}
            return reply_json(arrival, int(failure), content, detail=done)
        arrival.record(f"status:{reply.status}", done)
        extra = {"content-type": "application/json"}
        if done == "replayed":
            extra["Idempotent-Replayed"] = "true"
        return Response(reply.body, status_code=reply.status, headers=arrival.headers(extra))

    return [Route("/idempotent/{resource}", idempotent, methods=["POST"])]
