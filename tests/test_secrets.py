"""Secrets a request carries never reach a log record, an error message, a repr or history."""

from __future__ import annotations

import logging
import traceback
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy, Verdict
from retrysafe.redact import is_secret_name, redact_url

SECRETS = {
    "Authorization": "Bearer tok-AUTHORIZATION-5f1e",
    "X-Api-Key": "key-XAPIKEY-77aa",
    "Cookie": "session=COOKIESESSION-913b",
    "X-Auth-Token": "tok-XAUTHTOKEN-22cd",
}
QUERY_SECRETS = {"api_key": "QUERYAPIKEY-0c0c", "access_token": "QUERYTOKEN-9f9f"}
SECRET_VALUES = [
    "tok-AUTHORIZATION-5f1e",
    "key-XAPIKEY-77aa",
    "COOKIESESSION-913b",
    "tok-XAUTHTOKEN-22cd",
    "QUERYAPIKEY-0c0c",
    "QUERYTOKEN-9f9f",
    "PASSWORD-in-url",
]


def always_fail(response: httpx.Response) -> Verdict | None:
    """Make the echo (which repeats every secret back in its body) a retryable failure."""
    return Verdict.retry("echo_rejected")


def test_no_secret_reaches_logs_messages_reprs_or_history(
    api: Any, chaos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[retrysafe.RetryEvent] = []
    url = chaos.url("/echo", **QUERY_SECRETS).replace("http://", "http://user:PASSWORD-in-url@")
    policy = RetryPolicy(rules=(always_fail,), attempts=2, backoff_base=0.01)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(retrysafe.BadResponse) as caught:
        api.request(
            "GET", url, policy=policy, headers=SECRETS, client_options={"hooks": [events.append]}
        )
    error = caught.value
    echoed = error.response.text if error.response is not None else ""
    assert "key-XAPIKEY-77aa" in echoed, "the server did echo the secrets back"
    produced = [
        str(error),
        repr(error),
        repr(error.history),
        repr(error.body),
        error.url,
        repr(error.response),
        *(record.getMessage() for record in caplog.records),
        *(repr(record.__dict__.get("retrysafe")) for record in caplog.records),
        *(repr(event) for event in events),
    ]
    assert len(caplog.records) >= 2
    for text in produced:
        for secret in SECRET_VALUES:
            assert secret not in text, f"{secret!r} leaked into {text[:120]!r}"
    assert "[REDACTED]" in error.url


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "Set-Cookie",
        "X-Api-Key",
        "api_key",
        "access_token",
        "client_secret",
        "password",
        "X-Session-Id",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["Accept", "page", "Idempotency-Key", "q", "Content-Type"])
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_url_keeps_ordinary_parameters() -> None:
    assert redact_url("https://u:pw@api.test/v1?q=cats&token=abc") == (
        "https://u:[REDACTED]@api.test/v1?q=cats&token=[REDACTED]"
    )


def test_a_lone_username_is_treated_as_a_token() -> None:
    assert redact_url("https://ghp_TOKENVALUE123@api.test/repos") == (
        "https://[REDACTED]@api.test/repos"
    )


def test_a_token_as_username_never_reaches_the_error(chaos: Any) -> None:
    url = chaos.url("/status/404").replace("http://", "http://ghp_TOKENVALUE123@")
    with retrysafe.Client() as client, pytest.raises(retrysafe.ClientError) as caught:
        client.get(url)
    for text in (str(caught.value), repr(caught.value), caught.value.url):
        assert "ghp_TOKENVALUE123" not in text


@pytest.mark.parametrize("raise_errors", [True, False])
def test_a_header_value_httpx_refuses_stays_out_of_the_exception_chain(
    chaos: Any, raise_errors: bool
) -> None:
    """A token read with its newline is refused by httpx, which quotes it in its error:
    the chain a traceback prints (or httpx's error raised as it is) must not show it."""
    token = "sk_live_" + "NEWLINE77"  # (built here: a traceback prints source lines)
    transport = retrysafe.RetryTransport(policy=RetryPolicy(attempts=1), raise_errors=raise_errors)
    refused = retrysafe.ApiError if raise_errors else httpx.LocalProtocolError
    with httpx.Client(transport=transport) as client, pytest.raises(refused) as caught:
        client.get(chaos.url("/echo"), headers={"Authorization": f"Bearer {token}\n"})
    printed = "".join(traceback.format_exception(caught.value))
    assert "LocalProtocolError" in printed
    assert token not in printed
