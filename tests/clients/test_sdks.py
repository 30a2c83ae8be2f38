"""Real vendor SDKs with retrysafe underneath and their own retries off.

The openai SDK (on httpx) gets ``RetryTransport`` under its ``http_client``; the
stripe SDK gets ``RequestsClient`` over a ``requests.Session`` with ``RetryAdapter``
mounted (its ``HTTPXClient`` takes no transport), and ``AIOHTTPClient`` over an
``aiohttp.ClientSession`` with ``RetryMiddleware``. Against the chaos server's fake
endpoints: a 503 then a success is retried once, by retrysafe (the SDKs are told
``max_retries=0`` / ``max_network_retries=0``, and retrysafe's report on the
response counts both attempts), and a keyed POST keeps its key on every attempt.
"""

from __future__ import annotations

import asyncio

import aiohttp
import httpx
import openai
import pytest
import requests
import stripe

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.aiohttp import RetryMiddleware
from retrysafe.chaos import KeyedChaos
from retrysafe.requests import RetryAdapter

FAST = RetryPolicy(backoff_base=0.01, backoff_cap=0.05, retry_after_jitter=0.01)


# -- openai ---------------------------------------------------------------------------------


def _openai(chaos: KeyedChaos, *, fail_times: int) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-test",
        base_url=chaos.openai_base_url(),
        max_retries=0,  # retrysafe retries, the SDK does not
        default_query={"events": 2, "interval_ms": 0, "fail_times": fail_times},
        http_client=httpx.Client(transport=retrysafe.RetryTransport(policy=FAST)),
    )


def test_openai_a_503_then_success_is_retried_once_by_retrysafe(chaos: KeyedChaos) -> None:
    with _openai(chaos, fail_times=1) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}]
        )
    completion = raw.parse()
    assert completion.choices[0].message.content == "tok1tok2"
    report = retrysafe.report_of(raw.http_response)
    assert report is not None
    assert report.attempts == 2  # one call of the SDK's, two attempts of retrysafe's
    assert [record.action for record in chaos.log()] == ["status:503", "status:200"]


def test_openai_a_keyed_post_keeps_its_key(chaos: KeyedChaos) -> None:
    with _openai(chaos, fail_times=2) as sdk:
        sdk.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"Idempotency-Key": "chat-1"},
        )
    records = chaos.log()
    assert len(records) == 3
    assert {record.idempotency_key for record in records} == {"chat-1"}


def test_openai_final_failure_is_the_sdks_own_error(chaos: KeyedChaos) -> None:
    """The drop-in transport returns the last 503: the SDK raises its typed error."""
    with _openai(chaos, fail_times=10) as sdk, pytest.raises(openai.InternalServerError) as caught:
        sdk.chat.completions.create(model="gpt-test", messages=[])
    assert caught.value.status_code == 503
    assert len(chaos.log()) == FAST.attempts


def test_openai_a_call_refused_by_the_breaker_is_the_sdks_connection_error(
    chaos: KeyedChaos,
) -> None:
    """Load protection refuses a call before anything is sent: the drop-in transport's
    error is also httpx's own (an ``httpx.TransportError``), so the SDK raises its own
    ``APIConnectionError``, which ``except openai.APIError`` catches, with retrysafe's
    ``CircuitOpen`` as its cause. (``CircuitOpen`` went straight through the SDK.)"""
    governor = retrysafe.Governor(
        retrysafe.GovernorSettings(
            breaker=retrysafe.BreakerSettings(consecutive_failures=1, open_for=30)
        )
    )
    transport = retrysafe.RetryTransport(policy=RetryPolicy(attempts=1), governor=governor)
    sdk = openai.OpenAI(
        api_key="sk-test-refused",
        base_url=chaos.openai_base_url(),
        max_retries=0,
        default_query={"events": 2, "interval_ms": 0, "fail_times": 10},
        http_client=httpx.Client(transport=transport),
    )
    with sdk:
        with pytest.raises(openai.InternalServerError):  # the 503 that opens the circuit
            sdk.chat.completions.create(model="gpt-test", messages=[])
        with pytest.raises(openai.APIConnectionError) as caught:
            sdk.chat.completions.create(model="gpt-test", messages=[])
    refusal = caught.value.__cause__
    assert isinstance(refusal, retrysafe.CircuitOpen), refusal
    assert isinstance(refusal, httpx.TransportError)
    assert refusal.attempts == 0
    assert "sk-test-refused" not in f"{caught.value} {refusal!r} {refusal}"
    assert len(chaos.log()) == 1  # the refused call sent nothing


# -- stripe ---------------------------------------------------------------------------------


def _stripe_base(chaos: KeyedChaos, fail_times: int, fail_status: int = 503) -> str:
    return f"{chaos.base_url}/stripe/{chaos.key}/{fail_times}/{fail_status}"


def _stripe_over_requests(chaos: KeyedChaos, fail_times: int) -> stripe.StripeClient:
    session = requests.Session()
    # raise_on_status=False: a final failing response reaches the SDK, which raises its
    # own typed error from Stripe's error body.
    adapter = RetryAdapter(policy=FAST, raise_on_status=False)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return stripe.StripeClient(
        "sk_test_123",
        base_addresses={"api": _stripe_base(chaos, fail_times)},
        max_network_retries=0,
        http_client=stripe.RequestsClient(session=session),
    )


def test_stripe_a_503_then_success_is_retried_once_by_retrysafe(chaos: KeyedChaos) -> None:
    client = _stripe_over_requests(chaos, 1)
    customer = client.v1.customers.create(params={"email": "ada@example.com"})
    assert customer.email == "ada@example.com"
    assert [record.action for record in chaos.log()] == ["status:503", "status:200"]


def test_stripe_a_keyed_post_keeps_its_key(chaos: KeyedChaos) -> None:
    client = _stripe_over_requests(chaos, 2)
    customer = client.v1.customers.create(
        params={"email": "ada@example.com"}, options={"idempotency_key": "cus-ada-1"}
    )
    assert customer.id.startswith("cus_")
    records = chaos.log()
    assert len(records) == 3
    assert {record.idempotency_key for record in records} == {"cus-ada-1"}
    assert len({record.body_sha256 for record in records}) == 1


def test_stripe_final_failure_is_the_sdks_own_error(chaos: KeyedChaos) -> None:
    client = _stripe_over_requests(chaos, 10)
    with pytest.raises(stripe.APIError) as caught:
        client.v1.customers.create(
            params={"email": "ada@example.com"}, options={"idempotency_key": "cus-ada-2"}
        )
    assert caught.value.http_status == 503
    assert len(chaos.log()) == FAST.attempts


async def _create_over_aiohttp(chaos: KeyedChaos, fail_times: int, fail_status: int) -> object:
    """A customer created by the stripe SDK over aiohttp with ``RetryMiddleware`` (its
    own retries off); or the error it raised."""
    # raise_on_status=False, as over requests: the SDK reads a final failure's body.
    middleware = RetryMiddleware(policy=FAST, raise_on_status=False)
    async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
        client = stripe.StripeClient(
            "sk_test_123",
            base_addresses={"api": _stripe_base(chaos, fail_times, fail_status)},
            max_network_retries=0,
            http_client=stripe.AIOHTTPClient(session=session),
        )
        try:
            return await client.v1.customers.create_async(params={"email": "ada@example.com"})
        except stripe.StripeError as error:
            return error


def test_stripe_over_aiohttp_a_503_then_success_is_the_customer(chaos: KeyedChaos) -> None:
    """The middleware reads the success's body for the engine: the SDK, which reads
    aiohttp's stream, still gets it (it got an empty body, and raised APIError for a
    customer the server had created)."""
    customer = asyncio.run(_create_over_aiohttp(chaos, 1, 503))
    assert isinstance(customer, stripe.Customer), customer
    assert customer.email == "ada@example.com"
    assert [record.action for record in chaos.log()] == ["status:503", "status:200"]


def test_stripe_over_aiohttp_a_final_400_is_the_sdks_typed_error(chaos: KeyedChaos) -> None:
    error = asyncio.run(_create_over_aiohttp(chaos, 10, 400))
    assert isinstance(error, stripe.InvalidRequestError), error
    assert error.http_status == 400
    assert len(chaos.log()) == 1  # a 400 is not retried
