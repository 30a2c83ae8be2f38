"""A small fake of the Stripe API, for testing the stripe SDK with retrysafe underneath.

- ``POST /stripe/{key}/{fail_times}/{fail_status}/v1/customers``: what the stripe SDK
  calls with ``base_addresses={"api": ".../stripe/{key}/{fail_times}/{fail_status}"}``
  (the SDK takes no default query, so the failures to throw are path segments). The
  first ``fail_times`` requests for the key get ``fail_status`` with a Stripe error
  object; later ones create a customer from the form-encoded body. Like Stripe, a
  request repeating an ``Idempotency-Key`` already answered gets the stored reply
  again with ``Idempotent-Replayed: true``, and the customer is created once; one
  repeating it with another body gets 400 with an ``idempotency_error``.

Requests are logged as ``status:N``, with detail ``created``, ``replayed`` or
``key_reused``.
"""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retrysafe.chaos.arrival import arrive
from retrysafe.chaos.params import MAX_TIMES, parse_int, status_code
from retrysafe.chaos.replies import reply_json
from retrysafe.chaos.state import ChaosState

__all__ = ["routes"]

#: Stripe's error for an ``Idempotency-Key`` sent again with other parameters.
_REUSED_KEY = {
    "error": {
        "type": "idempotency_error",
        "message": (
            "Keys for idempotent requests can only be used with the same parameters "
            "they were first used with."
        ),
    }
}


def routes(state: ChaosState) -> list[Route]:
    """The fake Stripe endpoints, bound to ``state``."""

    async def create_customer(request: Request) -> Response:
        fail_times = parse_int(
            "fail_times", request.path_params["fail_times"], minimum=0, maximum=MAX_TIMES
        )
        failure = status_code("fail_status", request.path_params["fail_status"])
        arrival = await arrive(state, request, "stripe/customers")
        if arrival.attempt <= fail_times:
            error = {
                "error": {
                    "type": "api_error",
                    "message": f"failed on purpose (attempt {arrival.attempt})",
                }
            }
            return reply_json(arrival, failure, error)
        key = arrival.idempotency_key
        with state.lock:
            stored = state.stripe_replies.get((arrival.key, key)) if key else None
        if stored is not None:
            first_body, reply = stored
            if arrival.body != first_body:
                # (Stripe's answer to a key reused for other parameters: nothing is replayed)
                return reply_json(arrival, 400, _REUSED_KEY, detail="key_reused")
            return reply_json(
                arrival, 200, reply, headers={"Idempotent-Replayed": "true"}, detail="replayed"
            )
        fields = dict(parse_qsl(arrival.body.decode("utf-8", "replace")))
        seed = key or f"{arrival.key}-{arrival.attempt}"
        customer: dict[str, object] = {
            "id": "cus_" + hashlib.sha256(seed.encode()).hexdigest()[:14],
            "object": "customer",
            "email": fields.get("email"),
            "name": fields.get("name"),
        }
        if key:
            with state.lock:
                state.stripe_replies[(arrival.key, key)] = (arrival.body, customer)
        return reply_json(arrival, 200, customer, detail="created")

    return [
        Route(
            "/stripe/{key}/{fail_times}/{fail_status}/v1/customers",
            create_customer,
            methods=["POST"],
        )
    ]
