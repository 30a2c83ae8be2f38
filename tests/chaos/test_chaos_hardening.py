"""Hostile input to the chaos server: numbers it cannot honour, bodies it must not hoard.

A bad query parameter is the test author's mistake and is answered 400 naming the
parameter and the allowed range, never 500. A body over the app's limit is answered 413
as soon as the limit is passed, without reading the rest.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest

from retrysafe.chaos import ChaosServer, KeyedChaos
from retrysafe.chaos.app import DEFAULT_MAX_BODY_BYTES

# (method, path, parameter, kind, minimum, maximum) for every numeric query parameter.
NUMERIC_PARAMETERS: list[tuple[str, str, str, str, float, float]] = [
    ("GET", "/fail/{key}", "times", "int", 0, 1_000_000),
    ("GET", "/fail/{key}", "status", "status", 200, 599),
    ("GET", "/sequence/{key}", "steps", "status", 200, 599),
    ("GET", "/flaky", "rate", "float", 0, 1),
    ("GET", "/flaky", "status", "status", 200, 599),
    ("GET", "/retry-after", "seconds", "int", 0, 86_400),
    ("GET", "/retry-after", "status", "status", 200, 599),
    ("GET", "/delay", "ms", "int", 0, 600_000),
    ("GET", "/drip", "chunks", "int", 0, 10_000),
    ("GET", "/drip", "interval_ms", "int", 0, 600_000),
    ("GET", "/drip", "chunk_bytes", "int", 1, 10_000_000),
    ("GET", "/truncate", "promised", "int", 1, 10_000_000),
    ("GET", "/truncate", "sent", "int", 0, 10_000_000),
    ("GET", "/malformed", "status", "status", 200, 599),
    ("GET", "/rate-limit/b", "rps", "float", 1e-6, 1e6),
    ("GET", "/rate-limit/b", "burst", "int", 1, 1_000_000),
    ("GET", "/outage/{key}", "down_ms", "int", 0, 600_000),
    ("GET", "/capacity/p", "concurrency", "int", 0, 10_000),
    ("GET", "/capacity/p", "service_ms", "int", 0, 600_000),
    ("POST", "/idempotent/r", "fail_times", "int", 0, 1_000_000),
    ("GET", "/redirect-chain/{key}", "hops", "int", 0, 100),
    ("GET", "/redirect-chain/{key}", "hop", "int", 0, 3),
    ("GET", "/redirect-chain/{key}", "delay_ms", "int", 0, 600_000),
    ("GET", "/redirect-chain/{key}", "redirect", "status", 200, 599),
    ("GET", "/redirect-chain/{key}", "fail_times", "int", 0, 1_000_000),
    ("GET", "/redirect-chain/{key}", "fail_status", "status", 200, 599),
    ("GET", "/sse", "events", "int", 0, 10_000),
    ("GET", "/sse", "interval_ms", "int", 0, 600_000),
    ("GET", "/sse", "fail_times", "int", 0, 1_000_000),
    ("GET", "/sse", "fail_status", "status", 200, 599),
    ("POST", "/openai/{key}/v1/chat/completions", "events", "int", 0, 10_000),
    ("POST", "/openai/{key}/v1/chat/completions", "fail_times", "int", 0, 1_000_000),
    ("GET", "/tail/{key}", "slow_fraction", "float", 0, 1),
    ("GET", "/tail/{key}", "slow_ms", "int", 0, 600_000),
    ("GET", "/tail/{key}", "fast_ms", "int", 0, 600_000),
]

# Junk no numeric parameter accepts: overflow, non-finite, Python-only syntax, odd digits.
JUNK = [
    "1" + "0" * 400,
    "9" * 5000,
    "-" + "9" * 5000,
    "1e400",
    "-1e400",
    "inf",
    "-inf",
    "Infinity",
    "nan",
    "NaN",
    "1_0",
    "\u0661\u0662",  # Arabic-Indic digits, which int() and float() accept
    "\u00b2",  # superscript two: str.isdigit() says yes, int() says no
    "0x1f",
    "+-1",
    "1e",
    "",
]


def _bad_values(kind: str, minimum: float, maximum: float) -> list[str]:
    values = [value for value in JUNK if value]
    if kind == "float":
        values += [repr(minimum / 2) if minimum else "-1e-320", "1e-320" if minimum else "-0.5"]
        values += [repr(maximum * 2), "1e308"]
        if minimum > 0:
            values += ["-0", "-0.0", "0", "1e-320"]
    else:
        values += [str(int(minimum) - 1), str(int(maximum) + 1), "1.5", "1e3"]
        if minimum > 0:
            values += ["-0", "0"]
    return sorted(set(values))


CASES = [
    pytest.param(method, path, name, value, id=f"{path}:{name}={value[:12]!r}")
    for method, path, name, kind, minimum, maximum in NUMERIC_PARAMETERS
    for value in _bad_values(kind, minimum, maximum)
]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def _url(chaos: KeyedChaos, path: str, name: str, value: str) -> str:
    base = chaos.url(path)
    return f"{base}&{name}={quote(value, safe='')}"


def _assert_refused_with_range(response: httpx.Response, name: str) -> None:
    assert response.status_code == 400, response.text[:300]
    content = response.json()
    assert content["parameter"] == name
    assert re.search(r"from \S+ to \S+", content["error"]), content["error"]
    assert len(content["error"]) < 300, "the message echoes at most a short part of the value"


@pytest.mark.parametrize(("method", "path", "name", "value"), CASES)
def test_every_numeric_parameter_refuses_bad_numbers_with_400_naming_the_range(
    chaos: KeyedChaos, client: httpx.Client, method: str, path: str, name: str, value: str
) -> None:
    response = client.request(method, _url(chaos, path, name, value), content=b"{}")

    _assert_refused_with_range(response, name)


@pytest.mark.parametrize(
    "code",
    ["503:1e308,200:1e308", "503:nan", "503:1_0", "503:1e-320,200:-0", "503:" + "9" * 5000],
)
def test_status_weights_refuse_bad_numbers_with_400_naming_the_range(
    chaos: KeyedChaos, client: httpx.Client, code: str
) -> None:
    response = client.get(chaos.url(f"/status/{quote(code, safe=':,')}"))

    _assert_refused_with_range(response, "code")


def test_tiny_rps_and_huge_burst_are_400_not_500(chaos: KeyedChaos, client: httpx.Client) -> None:
    """The two reported: an OverflowError turned a parameter mistake into a 500."""
    tiny = client.get(chaos.url("/rate-limit/b", rps="1e-320"))
    huge = client.get(chaos.url("/rate-limit/b", burst=10**400))

    assert (tiny.status_code, huge.status_code) == (400, 400)


def test_negative_zero_is_zero_where_zero_is_allowed(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    response = client.get(chaos.url("/flaky", rate="-0.0"))

    assert response.status_code == 200


@pytest.mark.parametrize("interval", ["\u00b2", "9" * 5000, "\u0661"])
def test_trickle_fault_answers_400_to_an_odd_interval(chaos: KeyedChaos, interval: str) -> None:
    parts = urlsplit(chaos.fault_url("trickle_headers"))
    assert parts.hostname is not None
    assert parts.port is not None
    target = f"/?interval_ms={quote(interval, safe='')}"
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: chaos\r\n\r\n".encode())
        received = _read_response(sock)

    assert received.startswith(b"HTTP/1.1 400 ")


# Bodies


def _read_response(sock: socket.socket) -> bytes:
    """One HTTP response: the head and the Content-Length body, or up to the close."""
    received = b""
    try:
        while True:
            head, found, body = received.partition(b"\r\n\r\n")
            if found:
                length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
                if length is not None and len(body) >= int(length.group(1)):
                    return received
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk
    except ConnectionResetError:
        return received


def _status_and_json(received: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = received.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def _address(chaos: KeyedChaos) -> tuple[str, int]:
    parts = urlsplit(chaos.base_url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def _target(chaos: KeyedChaos, path: str) -> str:
    parts = urlsplit(chaos.url(path))
    return f"{parts.path}?{parts.query}"


@pytest.mark.parametrize("path", ["/echo", "/idempotent/orders", "/fail/{key}"])
def test_a_declared_body_over_the_limit_is_413_before_any_of_it_is_read(
    chaos: KeyedChaos, path: str
) -> None:
    """Content-Length says 3 MiB; the client sends only the head and waits for the answer.

    A server that read the body first would wait for bytes that never come.
    """
    declared = 3 * 1024 * 1024
    with socket.create_connection(_address(chaos), timeout=5) as sock:
        sock.sendall(
            f"POST {_target(chaos, path)} HTTP/1.1\r\nHost: chaos\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {declared}\r\n\r\n".encode()
        )
        status, content = _status_and_json(_read_response(sock))

    assert status == 413
    assert content["limit"] == DEFAULT_MAX_BODY_BYTES
    assert content["read"] == 0
    assert chaos.ledger("orders") == {}


def test_a_chunked_body_is_read_only_until_it_passes_the_limit(chaos: KeyedChaos) -> None:
    """No Content-Length: the body streams in; the server stops once past the limit.

    The client sends a little over the limit of a 3 MiB body and then waits: the answer
    must come without the rest, and the server must say it read no more than it got.
    """
    piece = 64 * 1024
    pieces = DEFAULT_MAX_BODY_BYTES // piece + 1
    chunk = f"{piece:x}\r\n".encode() + b"x" * piece + b"\r\n"
    with socket.create_connection(_address(chaos), timeout=5) as sock:
        sock.sendall(
            f"POST {_target(chaos, '/echo')} HTTP/1.1\r\nHost: chaos\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        for _ in range(pieces):
            sock.sendall(chunk)
        status, content = _status_and_json(_read_response(sock))

    assert status == 413
    assert DEFAULT_MAX_BODY_BYTES < int(str(content["read"])) <= pieces * piece


def test_a_body_at_the_limit_is_echoed_whole(chaos: KeyedChaos, client: httpx.Client) -> None:
    body = b"y" * DEFAULT_MAX_BODY_BYTES

    response = client.post(chaos.url("/echo"), content=body)

    assert response.status_code == 200
    assert len(response.json()["body"]) == DEFAULT_MAX_BODY_BYTES


def test_the_body_limit_is_a_setting_of_the_server() -> None:
    with ChaosServer(max_body_bytes=16) as server, httpx.Client(timeout=5) as client:
        at_limit = client.post(f"{server.url}/echo", content=b"z" * 16)
        over = client.post(f"{server.url}/echo", content=b"z" * 17)

    assert at_limit.status_code == 200
    assert (over.status_code, over.json()["limit"]) == (413, 16)


def test_a_negative_body_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max_body_bytes"):
        ChaosServer(max_body_bytes=-1)


# -- a URL written by hand (trial61) -----------------------------------------------------


def test_a_query_written_into_the_path_is_refused_with_the_way_to_write_it(
    chaos: KeyedChaos,
) -> None:
    """``key=`` would be glued onto the query's last value (``status=503?key=...``)."""
    with pytest.raises(ValueError, match=r"keyword arguments.*url\('/fail/\{key\}', times=2"):
        chaos.url("/fail/{key}?times=2&status=503")


def test_a_path_naming_the_literal_key_is_refused_with_the_way_to_write_it(
    chaos: KeyedChaos,
) -> None:
    """``/fail/key`` for ``/fail/{key}``: the literal path segment would win over the
    view's ``key=`` and share its state with every test that made the same slip."""
    with pytest.raises(ValueError, match=r"write \{key\} for this view's key"):
        chaos.url("/fail/key", times=1)


def test_a_path_naming_another_tests_key_is_refused_with_the_ways_to_write_it(
    chaos: KeyedChaos,
) -> None:
    """trial74: ``/fail/forecast`` kept its state under ``forecast``, shared by every test
    writing it, and ``chaos.log()`` (the view's key) stayed empty, without a word."""
    with pytest.raises(ValueError, match=r"names the state key 'forecast', not this view's"):
        chaos.url("/fail/forecast", times=2)
    with pytest.raises(ValueError, match=r"key='other' to share"):
        chaos.url("/outage/other")
    with pytest.raises(ValueError, match=r"names the state key"):  # (another test's, maybe)
        chaos.url(f"/fail/{chaos.key}0")
    assert chaos.url("/fail/forecast", key="forecast").endswith("/fail/forecast?key=forecast")
    # A key of the test's own, written either way, is its to use.
    assert chaos.url("/fail/{key}-b").endswith(f"/fail/{chaos.key}-b?key={chaos.key}")
    assert chaos.url(f"/fail/{chaos.key}-b") == chaos.url("/fail/{key}-b")


def test_keys_of_a_tests_own_in_the_path_keep_counters_apart(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    """The path's key wins over the query's: one test may keep several counters."""
    assert client.get(chaos.url(f"/fail/{chaos.key}-a", times=1)).status_code == 503
    assert client.get(chaos.url(f"/fail/{chaos.key}-b", times=1)).status_code == 503
    assert client.get(chaos.url(f"/fail/{chaos.key}-a", times=1)).status_code == 200


@pytest.mark.parametrize("misspelled", ["time", "Times", "tims", "retry-after"])
def test_a_near_miss_of_a_parameter_the_endpoint_takes_is_400_naming_it(
    chaos: KeyedChaos, client: httpx.Client, misspelled: str
) -> None:
    """Ignored, ``time=3`` left ``/fail`` failing once (its default) while the test meant
    three times: a test checking the wrong thing, and passing (trial61)."""
    refused = client.get(chaos.url("/fail/{key}", **{misspelled: 3}))
    assert refused.status_code == 400
    meant = "retry_after" if misspelled == "retry-after" else "times"
    assert refused.json() == {
        "error": f"/fail/{{key}} takes no parameter {misspelled!r}: {meant!r}? (it takes "
        "key, retry_after, status, times)",
        "parameter": misspelled,
    }
    assert chaos.log() == []  # not counted


@pytest.mark.parametrize(
    "own", ["api_key", "version", "bogus", "keys", "model", "status_code", "timeout", "limit"]
)
def test_a_parameter_of_the_clients_own_is_left_alone(
    chaos: KeyedChaos, client: httpx.Client, own: str
) -> None:
    """The chaos server stands in for an API: a client may add its own parameters to
    every call (an api_key), which no endpoint reads."""
    assert client.get(chaos.url("/fail/{key}", times=0, **{own: "x"})).status_code == 200


def test_echo_takes_any_parameter_and_sends_it_back(
    chaos: KeyedChaos, client: httpx.Client
) -> None:
    echoed = client.get(chaos.url("/echo", anything="goes"))
    assert echoed.status_code == 200
    assert echoed.json()["query"]["anything"] == "goes"


def test_every_parameter_an_endpoint_reads_is_declared() -> None:
    """A parameter read by name in an endpoint module but declared for no endpoint would
    be refused with 400 before the endpoint could read it."""
    import inspect

    import retrysafe.chaos as chaos_package
    from retrysafe.chaos.app import PARAMETERS

    declared = set().union(*(names for names in PARAMETERS.values() if names is not None))
    read: set[str] = set()
    for module_path in Path(inspect.getfile(chaos_package)).parent.glob("*.py"):
        source = module_path.read_text()
        read |= set(re.findall(r'_param\(\s*request,\s*"([a-z_]+)"', source))
        read |= set(re.findall(r'query_params\.get\("([a-z_]+)"', source))
    assert read  # (the patterns still find the reads)
    assert read - {"key", "require"} <= declared, read - declared
