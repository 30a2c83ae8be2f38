"""The per-attempt status endpoints: /status, /fail, /sequence, /flaky."""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from retrysafe.chaos import KeyedChaos
from retrysafe.chaos.chance import draw, weighted_choice


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def test_status_answers_the_requested_code_with_attempt_header(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/status/418"))

    assert response.status_code == 418
    assert response.headers["x-attempt"] == "1"
    assert response.json() == {"status": 418, "attempt": 1, "key": chaos.key}


def test_status_sends_retry_after_verbatim(chaos: KeyedChaos, client: httpx.Client) -> None:
    for hint in ["7", "soon", "-1", "Wed, 21 Oct 2015 07:28:00 GMT"]:
        response = client.get(chaos.url("/status/503", retry_after=hint))
        assert response.headers["retry-after"] == hint


def test_status_without_content_codes_sends_an_empty_body(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/status/204"))

    assert response.status_code == 204
    assert response.content == b""


@pytest.mark.parametrize("code", ["100", "199", "600", "99", "abc"])
def test_status_refuses_codes_that_cannot_end_a_response(
    chaos: KeyedChaos, client: httpx.Client, code: str
) -> None:
    response = client.get(chaos.url(f"/status/{code}"))

    assert response.status_code == 400
    assert response.json()["parameter"] == "code"
    assert chaos.log() == []


def test_status_weighted_list_is_deterministic_per_key_and_attempt(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    options = [(503, 1.0), (200, 3.0)]
    seen = [client.get(chaos.url("/status/503:1,200:3", seed="s1")).status_code for _ in range(40)]

    expected = [weighted_choice(options, draw("s1", chaos.key, n)) for n in range(1, 41)]
    assert seen == expected
    assert {503, 200} <= set(seen)


def test_attempts_are_counted_per_endpoint_and_key(chaos: KeyedChaos, client: httpx.Client) -> None:
    client.get(chaos.url("/fail/{key}"))
    second = client.get(chaos.url("/fail/{key}"))
    other_key = client.get(chaos.url("/fail/{key}", key=chaos.key + "-other"))
    other_endpoint = client.get(chaos.url("/status/200"))

    assert second.headers["x-attempt"] == "2"
    assert other_key.headers["x-attempt"] == "1"
    assert other_endpoint.headers["x-attempt"] == "1"


def test_fail_fails_the_first_n_attempts_then_succeeds(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = chaos.url("/fail/{key}", times=2, status=502, retry_after=3)

    responses = [client.get(url) for _ in range(3)]

    assert [r.status_code for r in responses] == [502, 502, 200]
    assert [r.headers.get("retry-after") for r in responses] == ["3", "3", None]
    assert responses[2].json()["attempt"] == 3


def test_fail_defaults_to_one_503(chaos: KeyedChaos, client: httpx.Client) -> None:
    url = chaos.url("/fail/{key}")

    assert [client.get(url).status_code for _ in range(2)] == [503, 200]


def test_fail_rejects_a_bad_parameter_without_counting_it(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/fail/{key}", times="two"))

    assert response.status_code == 400
    assert response.json()["parameter"] == "times"
    assert "x-attempt" not in response.headers
    assert client.get(chaos.url("/fail/{key}", times=0)).headers["x-attempt"] == "1"


def test_sequence_plays_statuses_and_repeats_the_last_step(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = chaos.url("/sequence/{key}", steps=[503, 429, 200], retry_after=1)

    responses = [client.get(url) for _ in range(4)]

    assert [r.status_code for r in responses] == [503, 429, 200, 200]
    assert [r.headers.get("retry-after") for r in responses] == ["1", "1", None, None]


def test_sequence_transport_faults_surface_as_httpx_errors(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    url = chaos.url("/sequence/{key}", steps="reset,close,truncate,hang,200")

    with pytest.raises(httpx.ReadError):
        client.get(url)
    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        client.get(url)
    with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
        client.get(url)
    with pytest.raises(httpx.ReadTimeout):
        client.get(url, timeout=0.3)
    assert client.get(url).status_code == 200
    assert [r.action for r in chaos.log()] == ["reset", "close", "truncate", "hang", "status:200"]


def _raw_get(url: str) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
    target = f"{parts.path}?{parts.query}"
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: chaos\r\n\r\n".encode())
    return sock


def test_sequence_reset_is_a_real_tcp_reset(chaos: KeyedChaos) -> None:
    with (
        _raw_get(chaos.url("/sequence/{key}", steps="reset")) as sock,
        pytest.raises(ConnectionResetError),
    ):
        sock.recv(1024)


def test_sequence_close_is_a_clean_close_with_no_bytes(chaos: KeyedChaos) -> None:
    with _raw_get(chaos.url("/sequence/{key}", steps="close")) as sock:
        assert sock.recv(1024) == b""


def test_sequence_rejects_an_unknown_step(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/sequence/{key}", steps="503,explode"))

    assert response.status_code == 400
    assert response.json()["parameter"] == "steps"


def test_flaky_is_deterministic_given_seed_key_and_attempt(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    statuses = [client.get(chaos.url("/flaky", rate=0.3, seed=7)).status_code for _ in range(30)]

    expected = [503 if draw("7", chaos.key, n) < 0.3 else 200 for n in range(1, 31)]
    assert statuses == expected


def test_flaky_fails_at_about_the_requested_rate(chaos: KeyedChaos, client: httpx.Client) -> None:
    statuses = [client.get(chaos.url("/flaky", rate=0.3, seed=1)).status_code for _ in range(300)]

    assert set(statuses) == {200, 503}
    assert 0.2 < statuses.count(503) / 300 < 0.4


def test_flaky_extremes_always_or_never_fail(chaos: KeyedChaos, client: httpx.Client) -> None:
    never = {client.get(chaos.url("/flaky", rate=0)).status_code for _ in range(10)}
    always = {client.get(chaos.url("/flaky", rate=1)).status_code for _ in range(10)}

    assert never == {200}
    assert always == {503}


def test_log_records_every_field(chaos: KeyedChaos, client: httpx.Client) -> None:
    body = b'{"order": 1}'
    before = time.monotonic()
    response = client.post(
        chaos.url("/fail/{key}", times=1), content=body, headers={"Idempotency-Key": "abc"}
    )
    after = time.monotonic()

    [record] = chaos.log()
    assert before <= record.time <= after
    assert response.status_code == 503
    assert record.method == "POST"
    assert record.path == f"/fail/{chaos.key}"
    assert "times=1" in record.query
    assert record.endpoint == "fail"
    assert record.key == chaos.key
    assert record.attempt == 1
    assert record.idempotency_key == "abc"
    assert record.body_sha256 == hashlib.sha256(body).hexdigest()
    assert record.action == "status:503"
    assert record.detail == ""


def test_sequence_sends_retry_after_on_redirect_steps_too(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """``retry_after`` goes on every 3xx-5xx step, not only on failures."""
    url = chaos.url("/sequence/{key}", steps=[307, 200], retry_after=2)

    responses = [client.get(url) for _ in range(2)]

    assert [r.status_code for r in responses] == [307, 200]
    assert [r.headers.get("retry-after") for r in responses] == ["2", None]


def test_flaky_fails_with_the_requested_status(chaos: KeyedChaos, client: httpx.Client) -> None:
    response = client.get(chaos.url("/flaky", rate=1, status=502))

    assert response.status_code == 502
    assert [r.action for r in chaos.log()] == ["status:502"]


def test_status_names_an_informational_code_as_the_reason_for_refusing_it(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/status/199"))

    assert response.status_code == 400
    assert "informational" in response.json()["error"]


@pytest.mark.parametrize("hint", ["1\r\nX-Injected: yes", "1\nX-Injected: yes", "1\x00", "1\x7f"])
def test_status_refuses_a_retry_after_with_control_characters(
    chaos: KeyedChaos, client: httpx.Client, hint: str
) -> None:
    """A header value with a line break is a 400 naming ``retry_after``, never sent on."""
    response = client.get(chaos.url("/status/503", retry_after=hint))

    assert response.status_code == 400
    assert response.json()["parameter"] == "retry_after"
    assert "control characters" in response.json()["error"]
    assert chaos.log() == []


def _seed_where(accept: Callable[[float], bool], key: str, attempt: int) -> str:
    """A seed whose draw for ``(key, attempt)`` satisfies ``accept``."""
    seeds = (f"s{n}" for n in range(10_000))
    return next(seed for seed in seeds if accept(draw(seed, key, attempt)))


def test_flaky_fails_half_the_attempts_by_default(chaos: KeyedChaos, client: httpx.Client) -> None:
    just_under_half = _seed_where(lambda point: 0.4 <= point < 0.5, chaos.key, 1)
    just_over_half = _seed_where(lambda point: 0.5 <= point < 0.6, chaos.key, 2)

    first = client.get(chaos.url("/flaky", seed=just_under_half))
    second = client.get(chaos.url("/flaky", seed=just_over_half))

    assert (first.status_code, second.status_code) == (503, 200)
