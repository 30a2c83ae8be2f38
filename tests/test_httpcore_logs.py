"""httpcore's DEBUG traces, under a retrysafe client, carry no secret header value.

httpcore logs the response's headers as bytes pairs, and a failure's exception as it
reads: h11's refusal of a header value quotes the value whole. Over a real socket.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

import retrysafe
from local_http import QuietHandler, serving

COOKIE = "session=SESSION_COOKIE_SECRET_72"
TOKEN = "sk-live-TOKEN_FROM_FILE_72"


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        echoed = self.headers.get("Authorization")
        if echoed is not None:  # a debugging server that echoes what it was sent
            self.send_header("X-Debug-Echo", echoed)
        self.send_header("Set-Cookie", COOKIE)
        self.send_header("X-Request-Id", "req-72")
        self.send_header("Content-Location", "https://app.test/cb?access_token=TRACE_TOKEN_72&s=1")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving(_Handler) as url:
        yield url


def httpcore_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name.startswith("httpcore")]


def test_a_secret_response_header_is_hidden_and_the_others_shown(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="httpcore")
    with retrysafe.Client() as client:
        client.get(server)
    logged = "\n".join(httpcore_messages(caplog))
    assert "(b'Set-Cookie', b'[REDACTED]')" in logged
    assert "(b'X-Request-Id', b'req-72')" in logged, "an ordinary header stays"
    assert "SESSION_COOKIE_SECRET_72" not in logged
    # a URL in a header (a Location, a Content-Location): shown, its secrets hidden
    assert "https://app.test/cb?access_token=[REDACTED]&s=1" in logged
    assert "TRACE_TOKEN_72" not in logged


def test_a_header_value_h11_refuses_is_not_quoted(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A token read from a file with its newline: h11 refuses it, quoting it whole."""
    caplog.set_level(logging.DEBUG, logger="httpcore")
    transport = retrysafe.RetryTransport(policy=retrysafe.RetryPolicy(attempts=1))
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.LocalProtocolError):
        client.get(server, headers={"Authorization": f"Bearer {TOKEN}\n"})
    logged = "\n".join(httpcore_messages(caplog))
    assert "Illegal header value b'[REDACTED]'" in logged
    assert TOKEN not in logged


@pytest.mark.parametrize("shell", ["Client", "RetryTransport"])
def test_a_secret_the_server_echoes_in_an_ordinary_header_is_scrubbed(
    server: str, caplog: pytest.LogCaptureFixture, shell: str
) -> None:
    # Its name says nothing, but the value is the request's own token: scrubbed as it is
    # from an error's body.
    caplog.set_level(logging.DEBUG, logger="httpcore")
    client = (
        retrysafe.Client()
        if shell == "Client"
        else httpx.Client(transport=retrysafe.RetryTransport())
    )
    with client:
        client.get(server, headers={"Authorization": f"Bearer {TOKEN}"})
    logged = "\n".join(httpcore_messages(caplog))
    assert "(b'X-Debug-Echo', b'[REDACTED]')" in logged or "b'Bearer [REDACTED]'" in logged
    assert TOKEN not in logged
    assert "(b'X-Request-Id', b'req-72')" in logged, "an ordinary header stays"


@pytest.mark.anyio
async def test_the_async_shell_scrubs_an_echoed_secret_too(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="httpcore")
    async with retrysafe.AsyncClient() as client:
        await client.get(server, headers={"Authorization": f"Bearer {TOKEN}"})
    logged = "\n".join(httpcore_messages(caplog))
    assert TOKEN not in logged
    assert "X-Debug-Echo" in logged
