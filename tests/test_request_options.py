"""What the clients add to a request: keys, per-call options, upload headers.

The network here is httpx.MockTransport: these tests read the request as it left
the client (the e2e tests in tests/e2e/test_journal.py read it at a real server).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe.governor import Governor, GovernorSettings
from retrysafe.testing import FakeClock
from retrysafe.transport import OPTIONS_EXTENSION

FAST = retrysafe.RetryPolicy(attempts=3, backoff_base=0.0, backoff_cap=0.0, retry_after_jitter=0.0)


def recording_client(
    seen: list[httpx.Request], status: int = 200, **settings: Any
) -> retrysafe.Client:
    """A client whose every request is kept in ``seen`` and answered with ``status``."""

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        return httpx.Response(status)

    return retrysafe.Client(
        transport=httpx.MockTransport(handler),
        clock=FakeClock(),
        governor=Governor(GovernorSettings.off()),
        **settings,
    )


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "PUT", "DELETE"])
def test_auto_mode_leaves_every_method_but_post_and_patch_without_a_key(method: str) -> None:
    """``idempotency="auto"`` keys POST and PATCH only: PUT and DELETE are idempotent by
    HTTP's definition, and a key on them is the caller's choice."""
    seen: list[httpx.Request] = []
    with recording_client(seen, idempotency="auto") as client:
        client.request(method, "https://api.test/things/1")
        client.request(method, "https://api.test/things/1", idempotency_key=True)
    assert "idempotency-key" not in seen[0].headers
    assert seen[1].headers["idempotency-key"].strip()


def test_a_key_given_with_headers_and_extensions_keeps_them_all() -> None:
    """Every per-call option is added to what the call already carries, none in place
    of another: the caller's headers, extensions, key, policy and dependency all arrive."""
    seen: list[httpx.Request] = []
    with recording_client(seen, status=503) as client, pytest.raises(retrysafe.ServerError):
        client.post(
            "https://api.test/pay",
            headers={"X-Trace": "t-1"},
            extensions={"trace": "span-7"},
            idempotency_key="order-7-pay",
            policy=retrysafe.RetryPolicy(attempts=2),
            dependency="payments",
        )
    assert len(seen) == 2  # the per-call policy's attempts, not the client's
    for request in seen:
        assert request.headers["x-trace"] == "t-1"
        assert request.headers["idempotency-key"] == "order-7-pay"
        assert request.extensions["trace"] == "span-7"
        assert request.extensions[OPTIONS_EXTENSION].dependency == "payments"


def test_a_key_alone_keeps_the_headers_and_extensions() -> None:
    seen: list[httpx.Request] = []
    with recording_client(seen) as client:
        client.post(
            "https://api.test/pay",
            headers={"X-Trace": "t-2"},
            extensions={"trace": "span-8"},
            idempotency_key=True,
        )
    (request,) = seen
    assert request.headers["x-trace"] == "t-2"
    assert request.headers["idempotency-key"].strip()
    assert request.extensions["trace"] == "span-8"


def test_report_of_a_response_that_holds_no_report_is_none() -> None:
    """Only a CallReport is a report: anything else under the extension is not read as one."""
    assert retrysafe.report_of(httpx.Response(200)) is None
    foreign = httpx.Response(200, extensions={OPTIONS_EXTENSION: {"attempts": 2}})
    assert retrysafe.report_of(foreign) is None


# -- a key is what a header carries as it stands -----------------------------------------------


@pytest.mark.parametrize("key", ["commande-é-42", " order-1", "order-1 ", "order\t1", "order-1\n"])
def test_a_key_no_header_carries_as_it_stands_is_refused_before_anything_is_sent(key: str) -> None:
    """httpx refuses a non-ASCII header given as ``headers=`` and h11 a space at either
    end, but a key set as a keyword would go out as UTF-8 and be read back (on the
    error, in the report) as other characters: resent under that key, a write would be
    a new one. So ``idempotency_key=`` takes printable ASCII only, and says how to make
    such a key."""
    seen: list[httpx.Request] = []
    with (
        recording_client(seen) as client,
        pytest.raises(ValueError, match="printable ASCII") as refused,
    ):
        client.post("https://api.test/pay", json={"amount": 1}, idempotency_key=key)
    assert seen == []
    assert "pass True for a fresh key" in str(refused.value)
    assert "hashlib.sha256" in str(refused.value)


@pytest.mark.anyio
async def test_the_async_client_refuses_the_same_keys() -> None:
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200))
    async with retrysafe.AsyncClient(transport=transport) as client:
        with pytest.raises(ValueError, match="printable ASCII"):
            await client.post("https://api.test/pay", idempotency_key="commande-é-42")
    assert sent == []


def test_a_key_with_spaces_inside_it_is_sent_as_given() -> None:
    seen: list[httpx.Request] = []
    with recording_client(seen) as client:
        response = client.post("https://api.test/pay", idempotency_key="order 42 / pay")
    assert seen[0].headers["idempotency-key"] == "order 42 / pay"
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.idempotency_key == "order 42 / pay"


def test_a_key_header_set_on_a_built_request_reads_back_as_httpx_reads_it() -> None:
    """A header set after the request is built is sent as UTF-8: the report's key is the
    one httpx reads back from it, the caller's own characters, not its raw bytes."""
    seen: list[httpx.Request] = []
    with recording_client(seen) as client:
        request = client.build_request("POST", "https://api.test/pay")
        request.headers["Idempotency-Key"] = "commande-é-42"
        response = client.send(request)
    assert seen[0].headers.raw[-1][1] == "commande-é-42".encode()
    report = retrysafe.report_of(response)
    assert report is not None
    assert report.idempotency_key == "commande-é-42"


@pytest.mark.parametrize("given", ["other-key", True], ids=["another_key", "make_one"])
def test_a_key_in_the_headers_and_another_in_idempotency_key_is_refused(given: object) -> None:
    """One would silently replace the other: a write resent under the key its caller knows
    would go out under another, and be done twice."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200))
    with (
        retrysafe.Client(transport=transport) as client,
        pytest.raises(ValueError, match="give the key once"),
    ):
        client.post(
            "https://api.test/pay",
            headers={"Idempotency-Key": "order-7"},
            idempotency_key=given,  # type: ignore[arg-type]
        )
    assert sent == []


@pytest.mark.parametrize(
    "headers",
    [
        [("Idempotency-Key", "order-7")],
        [("Idempotency-Key", "  ")],
        [("Idempotency-Key", "order-7"), ("idempotency-key", "order-7")],
    ],
    ids=["the_same_key", "a_blank_header", "the_same_key_in_two_headers"],
)
def test_the_same_key_again_or_a_blank_header_is_one_key(headers: list[tuple[str, str]]) -> None:
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200))
    with retrysafe.Client(transport=transport) as client:
        client.post("https://api.test/pay", headers=headers, idempotency_key="order-7")
    assert [request.headers.get_list("idempotency-key") for request in sent] == [["order-7"]]


def test_a_key_of_the_wrong_kind_beside_a_header_is_told_as_such() -> None:
    with (
        retrysafe.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as client,
        pytest.raises(ValueError, match=r"must be True \(make one\) or a non-empty string, got 5"),
    ):
        client.post(
            "https://api.test/pay",
            headers={"Idempotency-Key": "order-7"},
            idempotency_key=5,  # type: ignore[arg-type]
        )
