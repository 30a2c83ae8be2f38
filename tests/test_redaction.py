"""Redaction against hostile echoes: escaped and encoded secrets, name segments, control
characters. Each test drives the real path: a retrysafe.Client on httpx.MockTransport, its
error's message and the WARNING log record."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import traceback
import urllib.parse
from collections.abc import Callable

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy, redact
from retrysafe.failures import describe_body
from retrysafe.redact import Redactor, is_secret_name, redact_url, redact_url_text

TOKEN = "sk_live/4f9e+Zq=="  # a slash, a plus and padding: what escaping changes


def failing_echo(encode: Callable[[str], str]) -> httpx.MockTransport:
    """A server answering 400 with the request's Authorization token, as ``encode`` writes it."""

    def handler(request: httpx.Request) -> httpx.Response:
        token = request.headers["authorization"].split()[-1]
        body = '{"error": "bad token", "token": "' + encode(token) + '"}'
        return httpx.Response(
            400, content=body.encode(), headers={"content-type": "application/json"}
        )

    return httpx.MockTransport(handler)


def leaks(encode: Callable[[str], str], caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every text the failing call produced that still shows the token, as sent or as echoed."""
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    caplog.clear()
    with (
        retrysafe.Client(transport=failing_echo(encode), policy=RetryPolicy(attempts=1)) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.get("https://api.test/v1", headers={"Authorization": f"Bearer {TOKEN}"})
    produced = [
        str(caught.value),
        json.dumps(caught.value.body),
        *(record.getMessage() for record in caplog.records),
    ]
    # The attempt's DEBUG record and the final failure's WARNING record.
    assert len(produced) == 4, "the attempt and the failure were logged"
    return [text for text in produced for form in {TOKEN, encode(TOKEN)} if form in text]


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda match: match.group().lower(), text)


ECHOES: dict[str, Callable[[str], str]] = {
    "php_slash_escape": lambda t: t.replace("/", "\\/"),
    "json_u_escape_of_slash": lambda t: t.replace("/", "\\u002f"),
    "json_ascii_all_escaped": lambda t: "".join(f"\\u{ord(c):04x}" for c in t),
    "url_encoded": lambda t: urllib.parse.quote(t, safe=""),
    "form_encoded_lower_hex": lambda t: _lower_hex(urllib.parse.quote_plus(t)),
    "upper_cased": str.upper,
    "lower_cased": str.lower,
}


@pytest.mark.parametrize("render", ECHOES.values(), ids=ECHOES.keys())
def test_an_escaped_or_encoded_echo_of_a_token_never_reaches_the_message_or_log(
    render: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    assert leaks(render, caplog) == []


def test_a_secret_echoed_as_a_json_key_is_scrubbed_from_the_body() -> None:
    redactor = Redactor(["sk_live_KEYASKEY"])
    response = httpx.Response(400, json={"sk_live_KEYASKEY": "unknown key"})
    body, excerpt = describe_body(response, redactor)
    assert "sk_live_KEYASKEY" not in json.dumps(body)
    assert "sk_live_KEYASKEY" not in excerpt


def test_a_secret_the_body_limit_cuts_across_is_scrubbed_whole() -> None:
    redactor = Redactor(["sk_live_CUTACROSS123"])
    filler = "x" * (64 * 1024 - 10)  # the token starts 10 bytes before the kept body ends
    response = httpx.Response(400, content=(filler + "sk_live_CUTACROSS123").encode())
    body, _ = describe_body(response, redactor)
    assert isinstance(body, str)
    assert body.startswith(filler)
    assert "sk_live" not in body  # no half of it kept either


def echoing_body(request: httpx.Request) -> httpx.Response:
    return httpx.Response(422, content=b"invalid request: " + request.content)


def echoed_failure_texts(
    handler: Callable[[httpx.Request], httpx.Response],
    caplog: pytest.LogCaptureFixture,
    method: str = "GET",
    **request: object,
) -> list[str]:
    """Every text a call failing with ``handler``'s answer produced: the error's message,
    its body, and the log records (the final one carries the body's excerpt)."""
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with (
        retrysafe.Client(transport=httpx.MockTransport(handler)) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.request(method, "https://api.test/v1", **request)  # type: ignore[arg-type]
    produced = [str(caught.value), repr(caught.value.body)]
    return produced + [record.getMessage() for record in caplog.records]


def test_secret_fields_of_a_json_body_echoed_back_never_reach_the_message_or_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    payment = {
        "amount": 1200,
        "card": {"number": "4242 4242 4242 4242", "brand": "visa", "exp_year": 2030},
        "customer": {"password": "hunter2-long"},
        "card_number": "4000056655665556",
    }
    produced = echoed_failure_texts(echoing_body, caplog, "POST", json=payment)
    for text in produced:
        for secret in ("4242 4242 4242 4242", "4000056655665556", "hunter2-long"):
            assert secret not in text
    # What is not secret stays readable: the amount, the brand, the year.
    for ordinary in ("1200", "visa", "2030"):
        assert ordinary in produced[0]


def test_secrets_inside_json_arrays_echoed_back_never_reach_the_message_or_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A batch of credentials or cards is a list: its items are searched like fields."""
    batch = {
        "creds": [{"user": "svc-batch", "password": "hunter2-in-a-list"}],
        "cards": ["4000 0566 5566 5556"],
        "tags": ["nightly"],
    }
    produced = echoed_failure_texts(echoing_body, caplog, "POST", json=batch)
    for text in produced:
        for secret in ("hunter2-in-a-list", "4000 0566 5566 5556"):
            assert secret not in text
    for ordinary in ("svc-batch", "nightly"):
        assert ordinary in produced[0]


def test_a_four_character_secret_echoed_back_is_scrubbed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only values under 4 characters are left in free text (too many false hits): a
    4-character key is as secret as a long one."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, text=f"key {request.headers['x-api-key']} is revoked")

    produced = echoed_failure_texts(handler, caplog, headers={"X-Api-Key": "Q7z4"})
    assert "is revoked" in produced[0]
    for text in produced:
        assert "Q7z4" not in text


@pytest.mark.parametrize("echoed", ["user_and_password", "password_alone"])
def test_basic_credentials_echoed_decoded_never_reach_the_message_or_log(
    echoed: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that decodes ``Authorization: Basic ...`` may quote what it found,
    ``user:password`` or the password alone: neither is the base64 that was sent."""

    def handler(request: httpx.Request) -> httpx.Response:
        decoded = base64.b64decode(request.headers["authorization"].split()[1]).decode()
        shown = decoded if echoed == "user_and_password" else decoded.partition(":")[2]
        return httpx.Response(401, text=f"invalid credentials: {shown}")

    produced = echoed_failure_texts(handler, caplog, auth=("svc-reports", "Pw-BASIC-5521"))
    assert "invalid credentials" in produced[0]
    for text in produced:
        assert "Pw-BASIC-5521" not in text


def test_ordinary_body_fields_stay_readable_in_the_error() -> None:
    """A bare ``key`` (a sort key, a file name), a token's type, a short value: not secrets."""
    body = {
        "sort": {"key": "created_at"},
        "Key": "reports/2026.csv",
        "token_type": "bearer",
        "card_id": "card_8Xy21",
        "number": "4242424242424241",  # (fails the card check: an order number)
    }
    with (
        retrysafe.Client(transport=httpx.MockTransport(echoing_body)) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.post("https://api.test/x", json=body)
    for ordinary in ("created_at", "reports/2026.csv", "bearer", "card_8Xy21", "4242424242424241"):
        assert ordinary in str(caught.value.body)


def test_a_deeply_nested_json_body_still_ends_as_the_calls_error() -> None:
    nested = b"[" * 5000 + b"]" * 5000
    with (
        retrysafe.Client(transport=httpx.MockTransport(echoing_body)) as client,
        pytest.raises(retrysafe.ClientError),
    ):
        client.post(
            "https://api.test/x", content=nested, headers={"content-type": "application/json"}
        )


def test_many_echoes_of_a_long_secret_leave_none_of_it_at_the_cut() -> None:
    secret = "sk_live_" + "A" * 92  # 100 characters, echoed a thousand times (100 KB)
    redactor = Redactor([secret])
    response = httpx.Response(400, content=("x" + secret * 1000).encode())
    body, _ = describe_body(response, redactor)
    assert isinstance(body, str)
    assert "sk_live" not in body
    assert body.endswith("[REDACTED]")


def test_secret_fields_of_a_form_body_echoed_back_are_scrubbed() -> None:
    form = {"grant_type": "refresh_token", "refresh_token": "rt-FORMSECRET-91", "client_id": "app"}
    with (
        retrysafe.Client(transport=httpx.MockTransport(echoing_body)) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.post("https://auth.test/token", data=form)
    assert "rt-FORMSECRET-91" not in str(caught.value)
    assert "grant_type=refresh_token" in str(caught.value)


@pytest.mark.parametrize(
    "content",
    [
        b"grant_type=refresh_token&refresh_token=rt-UNTYPED-FORM-1&client_id=app",
        b'{"grant_type": "refresh_token", "refresh_token": "rt-UNTYPED-FORM-1"}',
    ],
)
def test_secret_fields_of_a_body_sent_without_a_type_are_scrubbed(content: bytes) -> None:
    """``content=`` (or the CLI's ``--data``) sends no Content-Type: the body is read as
    the form or the JSON it looks like."""
    with (
        retrysafe.Client(transport=httpx.MockTransport(echoing_body)) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.post("https://auth.test/token", content=content)
    assert "rt-UNTYPED-FORM-1" not in str(caught.value)
    assert "rt-UNTYPED-FORM-1" not in str(caught.value.body)
    assert "refresh_token" in str(caught.value)


def test_secret_fields_of_a_multipart_form_are_scrubbed_and_its_files_left_alone() -> None:
    with (
        retrysafe.Client(transport=httpx.MockTransport(echoing_body)) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.post(
            "https://auth.test/login",
            data={"username": "bob", "password": "MULTIPART-PW-31"},
            files={"avatar": ("a.png", b"PNG-BYTES-NOT-A-SECRET")},
        )
    shown = str(caught.value) + str(caught.value.body)
    assert "MULTIPART-PW-31" not in shown
    assert 'name="password"' in shown
    assert "bob" in shown


def test_a_digest_authorizations_path_and_realm_are_not_taken_for_secrets() -> None:
    """Digest's ``Authorization`` names the request's path (``uri=``) and the realm: a
    server's error quoting the path keeps it."""

    def handler(request: httpx.Request) -> httpx.Response:
        if "Authorization" not in request.headers:
            challenge = 'Digest realm="orders-service-realm", nonce="abc123", qop="auth"'
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        return httpx.Response(500, text="internal error on /api/v1/orders/1234567")

    policy = RetryPolicy(attempts=1)
    with (
        retrysafe.Client(transport=httpx.MockTransport(handler), policy=policy) as client,
        pytest.raises(retrysafe.ServerError) as caught,
    ):
        client.get("https://api.test/api/v1/orders/1234567", auth=httpx.DigestAuth("al", "pw"))
    assert "internal error on /api/v1/orders/1234567" in str(caught.value)


def test_a_multipart_body_the_parser_cannot_read_leaves_the_calls_error_as_it_is() -> None:
    """The scan for secret fields is best effort: a malformed part (a NUL in its header)
    must not replace the call's error with the parser's."""
    body = (
        b"--x\r\nContent-Disposition: form-data; name=\"doc\"; filename*=U\x00F-8''a.txt"
        b"\r\n\r\ndata\r\n--x--\r\n"
    )
    transport = httpx.MockTransport(lambda request: httpx.Response(500))
    with (
        retrysafe.Client(transport=transport, policy=RetryPolicy(attempts=1)) as client,
        pytest.raises(retrysafe.ServerError),
    ):
        client.post(
            "https://api.test/upload",
            content=body,
            headers={"Content-Type": "multipart/form-data; boundary=x"},
        )


@pytest.mark.parametrize("after", ["?x", "#x", "/x", "/x?y", "#x/y"])
def test_a_url_httpx_refuses_is_refused_without_its_password(after: str) -> None:
    """httpx reads a password up to a "?", "#" or "/" as a port, and quotes it."""
    password = "sk_live_" + "URLPIECE4"
    url = f"http://user:{password}{after}@127.0.0.1/"
    with retrysafe.Client() as client, pytest.raises(httpx.InvalidURL) as caught:
        client.get(url)
    assert password not in "".join(traceback.format_exception(caught.value))
    with (
        retrysafe.Client() as client,
        pytest.raises(httpx.InvalidURL) as caught,
        client.stream("GET", url),
    ):
        pass
    assert password not in "".join(traceback.format_exception(caught.value))

    async def refused() -> None:
        async with retrysafe.AsyncClient() as client:
            await client.get(url)

    with pytest.raises(httpx.InvalidURL) as caught:
        asyncio.run(refused())
    assert password not in "".join(traceback.format_exception(caught.value))


def _raise_chained(token: str) -> None:
    try:
        raise ValueError(f"Illegal header value b'Bearer {token}\\n'")
    except ValueError as inner:
        raise RuntimeError(f"wrapped: Bearer {token}") from inner


def test_an_exception_raised_from_others_is_scrubbed_along_its_whole_chain() -> None:
    token = "sk_live_" + "CHAINED1"  # (built here: a traceback prints source lines)
    redactor = Redactor([f"Bearer {token}"])
    with pytest.raises(RuntimeError) as caught:
        _raise_chained(token)
    redactor.scrub_exception(caught.value)
    printed = "".join(traceback.format_exception(caught.value))
    assert "ValueError: Illegal header value" in printed
    assert token not in printed


@pytest.mark.parametrize("control", ["\x00", "\r", "\x7f"])
def test_a_secret_header_value_httpx_refuses_stays_out_of_the_whole_chain(control: str) -> None:
    """h11 quotes a header value it refuses with the control character escaped (as
    ``\\x00``): the secret must not survive in the error's chain or traceback."""
    token = "sk_live_" + "NULBYTE9"
    tail = "XYZ"  # (after the control character: too short to scrub as a piece of its own)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.LocalProtocolError(
            f"Illegal header value {request.headers.raw[-1][1]!r}"  # as h11 words it
        )

    with (
        retrysafe.Client(transport=httpx.MockTransport(refused)) as client,
        pytest.raises(retrysafe.ApiError) as caught,
    ):
        client.get(
            "https://api.test/x", headers={"Authorization": f"Bearer {token}{control}{tail}"}
        )
    printed = "".join(traceback.format_exception(caught.value))
    assert "Illegal header value" in printed
    assert token not in printed
    assert tail not in printed


# -- which names are secret -------------------------------------------------------------------

MISSED = [
    "sig",  # Azure SAS
    "pass",
    "passphrase",
    "jwt",
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "X-Goog-Signature",
    "X-Goog-Credential",
    "apiKey",
    "APIKey",
    "accessToken",
    "client.secret",
    "apikey",
    "sessionid",
    "jsessionid",  # Java's session, in a path (";jsessionid=") or a cookie
    "PHPSESSID",
    "hmac",  # a webhook's signature
    "X-Authentication",
    "primaryKey",  # Azure's storage and API Management keys: primaryKey, secondaryKey
]
OVER_HIDDEN = [
    "keyword",
    "author",
    "monkey",
    "Authored-By",
    "passage",
    "signal",
    "sigma",
    # a key or token the server reads as a name or a cursor: shown, to debug paging
    "public_key",
    "sort_key",
    "pageToken",
    "nextPageToken",
    "page_token",
]


def test_a_public_name_does_not_hide_a_secret_name_beside_it() -> None:
    assert is_secret_name("X-Public-Key-Signature")
    assert is_secret_name("page_token_secret")


def test_a_secret_parameter_of_a_path_segment_is_hidden_and_the_path_kept() -> None:
    """Java's URL rewriting puts the session in the path: ``/cart;jsessionid=...``."""
    url = "https://app.test/a;v=1/cart;jsessionid=JSESS_31/items?page=2;token=T_31&q=x#f"
    assert redact_url(url) == (
        "https://app.test/a;v=1/cart;jsessionid=[REDACTED]/items?page=2;token=[REDACTED]&q=x#f"
    )


def test_a_signature_among_a_headers_parameters_is_scrubbed_bare() -> None:
    """AWS SigV4's ``Authorization`` carries ``Signature=<hex>`` among parameters, and S3
    echoes the bare hex (``<SignatureProvided>``); parameters not named like secrets
    (``SignedHeaders``) are no secrets."""
    signature = "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
    value = (
        "AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/20260101/us-east-1/s3/aws4_request, "
        f"SignedHeaders=host;x-amz-date, Signature={signature}"
    )
    request = httpx.Request("GET", "https://b.test/k", headers={"Authorization": value})
    redactor = Redactor.for_request(request)
    echoed = f"<SignatureProvided>{signature}</SignatureProvided> for host x-amz-date"
    assert redactor.scrub(echoed) == (
        "<SignatureProvided>[REDACTED]</SignatureProvided> for host x-amz-date"
    )


@pytest.mark.parametrize("name", MISSED)
def test_names_whose_segment_is_a_secret_word_are_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", OVER_HIDDEN)
def test_names_that_merely_contain_the_letters_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_urls_show_ordinary_parameters_and_hide_presigned_ones() -> None:
    url = (
        "https://b.test/o?keyword=cats&author=ann&monkey=1&sig=SASSIG123"
        "&X-Amz-Signature=AMZSIG456&jwt=JWT789&idempotency-key=k1"
    )
    shown = redact_url(url)
    for kept in ("keyword=cats", "author=ann", "monkey=1", "idempotency-key=k1"):
        assert kept in shown
    for secret in ("SASSIG123", "AMZSIG456", "JWT789"):
        assert secret not in shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # ";" separates pairs too (servers read it so): the URL as sent, its secret hidden
        (
            "https://api.test/v1?page=1;api_key=SEMISECRET",
            "https://api.test/v1?page=1;api_key=[REDACTED]",
        ),
        # ...yet httpx, and most servers, read a ";" inside a value as part of it: a
        # secret's value is hidden up to the next "&", ";" and all
        (
            "https://api.test/v1?token=tok_A;tok_B_TAIL&page=2",
            "https://api.test/v1?token=[REDACTED]&page=2",
        ),
        (
            "https://api.test/v1?page=1;sort=asc;api_key=K1;K2#top",
            "https://api.test/v1?page=1;sort=asc;api_key=[REDACTED]#top",
        ),
        # a fragment is never sent, but an OAuth reply carries its token there
        (
            "https://api.test/cb#access_token=FRAGSECRET&state=s1",
            "https://api.test/cb#access_token=[REDACTED]&state=s1",
        ),
        # what is not a secret stays as written, encoding included
        ("https://api.test/s?q=a%20b&page=2", "https://api.test/s?q=a%20b&page=2"),
        (
            "https://api.test/s?token=T%2B1&q=x",
            "https://api.test/s?token=[REDACTED]&q=x",
        ),
        # a secret's name percent-encoded is still that name
        (
            "https://api.test/v1?api%5Fkey=PCTSECRET&page=2",
            "https://api.test/v1?api%5Fkey=[REDACTED]&page=2",
        ),
        (
            "https://api.test/cb#access%5Ftoken=PCTSECRET&state=s1",
            "https://api.test/cb#access%5Ftoken=[REDACTED]&state=s1",
        ),
    ],
)
def test_urls_hide_secrets_in_every_form_of_query_and_keep_the_rest_as_sent(
    url: str, shown: str
) -> None:
    assert redact_url(url) == shown


def test_a_percent_encoded_secret_parameter_never_reaches_the_error_or_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    transport = httpx.MockTransport(lambda request: httpx.Response(404))
    with (
        retrysafe.Client(transport=transport) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.get("https://api.test/v1?api%5Fkey=PCT-ENCODED-KEY-61&page=2")
    produced = [str(caught.value), caught.value.url]
    produced += [record.getMessage() for record in caplog.records]
    assert "api%5Fkey=[REDACTED]&page=2" in caught.value.url
    for text in produced:
        assert "PCT-ENCODED-KEY-61" not in text


def test_a_long_query_of_semicolon_pairs_is_redacted_whole() -> None:
    """Thousands of ``;`` pairs (a filter list, a tracking URL): every one is read, and a
    secret after them hidden, with no limit on how many."""
    query = ";".join(f"f{index}=v{index}" for index in range(5000))
    shown = redact_url(f"https://api.test/search?{query};token=LATE-SECRET-5000&page=2")
    assert shown.endswith(";f4999=v4999;token=[REDACTED]&page=2")


def test_a_secret_value_holding_a_semicolon_never_reaches_the_error_event_or_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """httpx sends ``?token=tok_A;tok_B`` as one value, ``tok_A;tok_B``: none of it shows."""
    caplog.set_level(logging.DEBUG)
    url = "https://api.test/v1?token=tok_HEAD_31;tok_TAIL_SECRET_31&page=2"
    assert httpx.URL(url).params["token"] == "tok_HEAD_31;tok_TAIL_SECRET_31"
    events: list[retrysafe.RetryEvent] = []
    transport = httpx.MockTransport(lambda request: httpx.Response(503))
    policy = retrysafe.RetryPolicy(attempts=2, backoff_base=0.001)
    with (
        retrysafe.Client(transport=transport, policy=policy, hooks=[events.append]) as client,
        pytest.raises(retrysafe.ServerError) as caught,
    ):
        client.get(url)
    produced = [str(caught.value), caught.value.url, *(event.url for event in events)]
    produced += [record.getMessage() for record in caplog.records]
    assert events
    assert "token=[REDACTED]&page=2" in caught.value.url
    for text in produced:
        assert "tok_HEAD_31" not in text
        assert "TAIL_SECRET_31" not in text


@pytest.mark.parametrize(
    ("typed", "shown"),
    [
        (
            "https://alice:pw-TYPED-77@api.test/v1?page=2",
            "https://[REDACTED]@api.test/v1?page=2",
        ),
        # a password with a "/" that httpx cannot parse: hidden whole all the same
        ("https://alice:pw/TYPED-77@api.test/v1", "https://[REDACTED]@api.test/v1"),
        # ...or with a "/" and a "?" or "#", which httpx reads as a host, port and path
        ("http://alice:Hu/x?TYPED-77@127.0.0.1:9/a", "http://[REDACTED]@127.0.0.1:9/a"),
        ("http://alice:Pa#w/TYPED-77@127.0.0.1:9/a", "http://[REDACTED]@127.0.0.1:9/a"),
        # (an "@" in the query after such a password is the query's)
        (
            "http://alice:Hu/x?TYPED-77@127.0.0.1/a?to=b@c.test",
            "http://[REDACTED]@127.0.0.1/a?to=b@c.test",
        ),
        (
            "https://ghp_LONETOKEN99@api.test/x?token=T1&q=1",
            "https://[REDACTED]@api.test/x?token=[REDACTED]&q=1",
        ),
    ],
)
def test_a_url_as_typed_is_shown_without_its_userinfo(typed: str, shown: str) -> None:
    """``redact_url_text`` words messages about a URL the caller typed, maybe one httpx
    refuses: its userinfo is hidden, the rest shown as typed."""
    assert redact_url_text(typed) == shown


def test_users_can_register_their_own_secret_names() -> None:
    assert not is_secret_name("X-Acme-Ticket")
    redact.add_secret_names("ticket", "acme-seal")
    try:
        assert is_secret_name("X-Acme-Ticket")
        assert is_secret_name("acmeSeal")
        assert is_secret_name("x_acme_seal_v2")
        assert not is_secret_name("seal")
    finally:
        redact._reset_secret_names()
    assert not is_secret_name("X-Acme-Ticket")


# -- control characters -----------------------------------------------------------------------

HOSTILE = "boom\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\x00\x7f done"


def test_control_characters_from_a_failing_body_never_reach_the_message_or_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(500, text=HOSTILE))
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with (
        retrysafe.Client(transport=transport, policy=RetryPolicy(attempts=1)) as client,
        pytest.raises(retrysafe.ServerError) as caught,
    ):
        client.get("https://api.test/v1")
    texts = [str(caught.value), *(record.getMessage() for record in caplog.records)]
    assert any("boom" in text for text in texts)
    for text in texts:
        bad = [c for c in text if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c == "\u202e"]
        assert bad == [], f"control characters {bad!r} in {text!r}"
    assert "\\x1b" in str(caught.value), "escaped visibly, not dropped silently"
    assert caught.value.body == HOSTILE, "the body itself is the caller's data, kept as it came"


# -- the fuzz run, small ------------------------------------------------------------------------


def test_fuzzed_secrets_never_survive_any_encoding_and_ordinary_names_stay_readable() -> None:
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).parent.parent / "scripts" / "fuzz_redaction.py"
    spec = importlib.util.spec_from_file_location("fuzz_redaction", path)
    assert spec is not None
    assert spec.loader is not None
    fuzz = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fuzz  # its dataclasses look their module up
    spec.loader.exec_module(fuzz)
    tally = fuzz.run(800, seed=7)
    assert tally.cases == 800
    assert tally.leaks == []
    assert tally.wrong_names == []


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("https://api.test/cart;jsessionid=PATHSECRET1234/items", "PATHSECRET1234"),
        ("https://api.test/v1?page=2;api_key=PAIRSECRET5678", "PAIRSECRET5678"),
    ],
    ids=["path_parameter", "semicolon_query_pair"],
)
def test_a_secret_the_url_redaction_hides_is_scrubbed_from_an_echo_of_the_path(
    url: str, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that echoes the path it got ("no route /cart;jsessionid=...") must not get
    into a message what the URL's own redaction hides (trial66: the CLI printed it)."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text=f"no route {request.url.raw_path.decode()}")

    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with (
        retrysafe.Client(
            transport=httpx.MockTransport(handler), policy=RetryPolicy(attempts=1)
        ) as client,
        pytest.raises(retrysafe.ClientError) as caught,
    ):
        client.get(url)
    assert "no route" in str(caught.value)
    assert "[REDACTED]" in str(caught.value)
    produced = [str(caught.value), json.dumps(caught.value.body), caplog.text]
    assert [text for text in produced if secret in text] == []


@pytest.mark.parametrize(
    "name",
    ["passcode", "api_keys", "apiKeys", "sessid", "passwords", "secrets",
     "access_tokens", "code_verifier", "securityAnswer"],
)  # fmt: skip
def test_these_names_hold_secrets_too(name: str) -> None:
    """Names a trial got through in clear (trial95): a one-time passcode, a list of keys, a
    PHP session id, PKCE's verifier."""
    assert is_secret_name(name)
    shown = redact_url(f"https://api.test/v1?{name}=SECRETVALUE123&page=2")
    assert "SECRETVALUE123" not in shown
    assert "page=2" in shown


@pytest.mark.parametrize(
    "name", ["max_tokens", "tokens", "keys", "signal", "keywords", "sign_in", "signUp"]
)
def test_a_count_or_a_list_of_names_is_no_secret(name: str) -> None:
    """``max_tokens`` is how many (an LLM API's), ``keys`` which, ``sign_in`` a page:
    left readable (``sign`` as a signature's name hid them all: review88)."""
    assert not is_secret_name(name)


@pytest.mark.parametrize("way", ["get", "stream", "constructor"])
def test_a_header_value_httpx_cannot_send_is_refused_without_showing_it(way: str) -> None:
    """httpx refuses a header value that is not ASCII with a ``UnicodeEncodeError`` that
    holds the whole value: an ``Authorization`` token in clear in its repr and in any log
    of it (trial95; through ``stream()`` and the constructor too, review88). The same
    type of error, without the value."""
    token = "Bearer s3cr3t-t" + "\u00f6k3n"
    mock = httpx.MockTransport(lambda r: httpx.Response(200))

    def send() -> None:
        if way == "constructor":
            retrysafe.Client(transport=mock, headers={"Authorization": token})
        with retrysafe.Client(transport=mock) as client:
            if way == "get":
                client.get("https://api.test/", headers={"Authorization": token})
            with client.stream("GET", "https://api.test/", headers={"Authorization": token}):
                pass

    with pytest.raises(UnicodeEncodeError) as caught:
        send()
    error = caught.value
    assert "s3cr3t" not in repr(error)
    assert "s3cr3t" not in str(error)
    assert "must be ascii text" in str(error)
    # (a traceback shows neither httpx's error nor a cause: they hold the value)
    assert error.__cause__ is None
    assert error.__suppress_context__
