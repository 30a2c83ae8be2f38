"""What makes two requests "the same request" under one key."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrysafe.idempotency import fingerprint as fingerprint_module
from retrysafe.idempotency import request_fingerprint

JSON = "application/json"

documents = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


def fingerprint(
    body: bytes = b"",
    *,
    method: str = "POST",
    path: str = "/orders",
    query: bytes = b"",
    content_type: str | None = JSON,
) -> str:
    return request_fingerprint(method, path, query, body, content_type)


@given(documents, st.booleans(), st.integers(min_value=0, max_value=4))
def test_json_formatting_never_changes_the_fingerprint(
    document: Any, sort_keys: bool, indent: int
) -> None:
    compact = json.dumps(document, separators=(",", ":")).encode()
    formatted = json.dumps(document, sort_keys=sort_keys, indent=indent).encode()

    assert fingerprint(compact) == fingerprint(formatted)


def test_json_key_order_does_not_matter_but_values_do() -> None:
    assert fingerprint(b'{"a":1,"b":2}') == fingerprint(b'{"b": 2, "a": 1}')
    assert fingerprint(b'{"a":1}') != fingerprint(b'{"a":2}')
    assert fingerprint(b'{"a":1}') != fingerprint(b'{"a":"1"}')
    assert fingerprint(b"[1,2]") != fingerprint(b"[2,1]")
    # Elements stay apart: two amounts are not one written without its comma.
    assert fingerprint(b"[1,2]") != fingerprint(b"[12]")
    assert fingerprint(b'{"a":[1,2]}') != fingerprint(b'{"a":[12]}')


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("12345678901234567.89", "12345678901234567.88"),
        ("0.1", "0.10000000000000000001"),
        ("1e400", "9e999"),
        ("-1e400", "-9e999"),
        ("0", "-0"),
        ("123456789012345678901234567890", "123456789012345678901234567891"),
    ],
)
def test_json_numbers_that_floats_cannot_tell_apart_are_different_requests(
    first: str, second: str
) -> None:
    assert fingerprint(f'{{"amount":{first}}}'.encode()) != fingerprint(
        f'{{"amount":{second}}}'.encode()
    )


@given(st.decimals(allow_nan=False, allow_infinity=False, max_value=10**40, min_value=-(10**40)))
def test_a_digit_past_float_precision_still_makes_another_request(number: Decimal) -> None:
    text = format(number, "f")
    longer = text + ("" if "." in text else ".") + "0000000000000000000001"

    assert fingerprint(f'{{"n":{text}}}'.encode()) != fingerprint(f'{{"n":{longer}}}'.encode())


def test_exact_numbers_still_ignore_key_order_and_whitespace() -> None:
    assert fingerprint(b'{"amount":12345678901234567.89,"to":"bob"}') == fingerprint(
        b'{ "to" : "bob" ,\n  "amount" : 12345678901234567.89 }'
    )


def test_structured_json_media_types_count_as_json() -> None:
    merge_patch = "application/merge-patch+json; charset=utf-8"

    assert fingerprint(b'{"a":1, "b":2}', content_type=merge_patch) == fingerprint(
        b'{"b":2,"a":1}', content_type=merge_patch
    )


def test_other_bodies_are_compared_byte_for_byte() -> None:
    form = "application/x-www-form-urlencoded"

    assert fingerprint(b'{"a":1}', content_type=None) != fingerprint(
        b'{ "a": 1 }', content_type=None
    )
    assert fingerprint(b"a=1&b=2", content_type=form) != fingerprint(b"b=2&a=1", content_type=form)


def test_a_json_body_that_does_not_parse_is_taken_as_sent() -> None:
    assert fingerprint(b"{broken") == fingerprint(b"{broken")
    assert fingerprint(b"{broken") != fingerprint(b"{broken ")
    assert fingerprint(b"\xff\xfe") != fingerprint(b"\xfe\xff")


def test_a_deeply_nested_body_is_fingerprinted_without_failing() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000

    assert fingerprint(deep) != fingerprint(deep[1:-1])


def test_the_media_type_counts_but_not_its_parameters_or_case() -> None:
    """The same bytes as JSON and as plain text are read differently by the app: two
    requests. A charset parameter, or the letter case, changes nothing."""
    body = b'{"a":1}'
    assert fingerprint(body, content_type=JSON) != fingerprint(body, content_type="text/plain")
    assert fingerprint(body, content_type=JSON) != fingerprint(body, content_type=None)
    assert fingerprint(body, content_type=JSON) == fingerprint(
        body, content_type="Application/JSON; charset=utf-8"
    )
    form = "application/x-www-form-urlencoded"
    assert fingerprint(b"a=1", content_type=form) != fingerprint(b"a=1", content_type=None)


def test_method_path_and_query_each_count() -> None:
    base = fingerprint(b"{}")

    assert fingerprint(b"{}", method="PATCH") != base
    assert fingerprint(b"{}", path="/orders/other") != base
    assert fingerprint(b"{}", path="/Orders") != base  # paths are case-sensitive
    assert fingerprint(b"{}", query=b"express=1") != base


def test_distinct_query_names_may_come_in_any_order_but_repeats_keep_theirs() -> None:
    assert fingerprint(query=b"a=1&b=2") == fingerprint(query=b"b=2&a=1")
    assert fingerprint(query=b"tag=x&tag=y") != fingerprint(query=b"tag=y&tag=x")
    assert fingerprint(query=b"a=") != fingerprint(query=b"")


def test_percent_escapes_of_different_bytes_are_different_queries() -> None:
    assert fingerprint(query=b"to=%FF") != fingerprint(query=b"to=%FE")
    assert fingerprint(query=b"%FF=1") != fingerprint(query=b"%FE=1")
    assert fingerprint(query=b"to=%C3%A9") != fingerprint(query=b"to=%C3%A8")
    assert fingerprint(query=b"to=%41") == fingerprint(query=b"to=A")


def test_fields_cannot_bleed_into_each_other() -> None:
    assert fingerprint(b"", path="/ab") != fingerprint(b"b", path="/a")
    # The body's end and the media type meet too: "x" as text/plain is not an untyped
    # "xtext/plain".
    assert fingerprint(b"x", content_type="text/plain") != fingerprint(
        b"xtext/plain", content_type=None
    )


# -- no secret in the fingerprint ------------------------------------------------------
# A store keeps every keyed request's fingerprint. Were a secret hashed into it, whoever
# reads the store could test guesses offline: a password among four guesses, a card
# number among a million candidates in seconds. So a guess must change nothing.

FORM = "application/x-www-form-urlencoded"
VISA, OTHER_VISA = "4242424242424242", "4242421000084242"  # same first six, last four
MASTERCARD = "5555555555554444"


@pytest.mark.parametrize(
    "template",
    [
        b'{"user":"ann","password":"%s"}',
        b'{"user":"ann","auth":{"client_secret":"%s"}}',
        b'{"user":"ann","pin_code":"%s","key":"sort-by-date"}',
        b'[{"user":"ann","passwd":"%s"}]',
        b'{"user":"ann","password_confirmation":"%s"}',
    ],
)
def test_a_secret_field_counts_by_its_name_not_its_value(template: bytes) -> None:
    guesses = {fingerprint(template % guess) for guess in (b"hunter2", b"letmein", b"x", b"")}

    assert len(guesses) == 1
    assert fingerprint(template % b"hunter2") != fingerprint(b'{"user":"ann"}')


TOKEN_A, TOKEN_B = "tok_1N3T00LkdIwHu7ixAAAA", "tok_1N3T00LkdIwHu7ixBBBB"


@pytest.mark.parametrize(
    ("name", "first", "second"),
    [
        ("payment_token", TOKEN_A, TOKEN_B),  # the card to charge
        ("payment_method_token", TOKEN_A, TOKEN_B),
        ("refresh_token", "r1-3f9a8c77e01b44d2", "r2-77b0d1c3aa9f0e51"),
        ("session_id", "s-1f2e3d4c5b6a7988", "s-99aa88bb77cc66dd"),
    ],
)
def test_a_body_field_named_for_a_credential_counts_by_its_long_value(
    name: str, first: str, second: str
) -> None:
    """A token a machine makes is too long and random to guess from a hash, and in a body
    it is as often what the request acts on: counted by name, a key sent again for
    another card would replay the first charge's answer (trial62)."""
    assert fingerprint(f'{{"{name}":"{first}"}}'.encode()) != fingerprint(
        f'{{"{name}":"{second}"}}'.encode()
    )
    assert fingerprint(f"{name}={first}".encode(), content_type=FORM) != fingerprint(
        f"{name}={second}".encode(), content_type=FORM
    )


@pytest.mark.parametrize("name", ["sms_token", "mfa_token", "verification_token"])
def test_a_token_named_for_what_it_verifies_counts_by_its_name(name: str) -> None:
    """Some APIs name a one-time code a token (six or seven digits): a million guesses
    (review61)."""
    assert fingerprint(f'{{"{name}":"123456"}}'.encode()) == fingerprint(
        f'{{"{name}":"654321"}}'.encode()
    )
    assert fingerprint(f'{{"{name}":123456}}'.encode()) == fingerprint(
        f'{{"{name}":654321}}'.encode()
    )


@pytest.mark.parametrize("name", ["access_token", "X-Amz-Signature", "sig", "session_id"])
def test_a_query_credential_counts_by_its_name_as_a_url_signed_again_is_the_same(
    name: str,
) -> None:
    assert fingerprint(query=f"to=ann&{name}={TOKEN_A}".encode()) == fingerprint(
        query=f"to=ann&{name}={TOKEN_B}".encode()
    )


@pytest.mark.parametrize(
    "name",
    [
        "auth_code", "passcode", "verification_code", "sms_code", "mfa_code",
        "two_factor_code", "security_code", "securityCode", "cardCode", "security_answer",
        "one_time_code", "oneTimeCode", "recovery_code", "backup_code", "2fa_code",
        "two_fa_code", "tfa_code", "emailCode", "reset_code", "activation_code",
        "user_pass", "pass",
    ],
)  # fmt: skip
def test_a_code_named_for_what_it_verifies_counts_by_its_name(name: str) -> None:
    """(review61 and review62: each of these was counted by its value, a six-digit code
    among a million guesses.)"""
    assert fingerprint(f'{{"{name}":"123456"}}'.encode()) == fingerprint(
        f'{{"{name}":"654321"}}'.encode()
    )
    assert fingerprint(query=f"{name}=123456".encode()) == fingerprint(
        query=f"{name}=654321".encode()
    )


@pytest.mark.parametrize(
    "name",
    [
        "auth_amount", "promo_code", "country_code", "status_code", "code", "token",
        "pincode", "card_currency_code", "card_country_code", "auth_response_code",
        "confirmation_code", "pass_id", "boarding_pass_number", "session",
    ],
)  # fmt: skip
def test_a_name_that_only_holds_a_secret_word_elsewhere_counts_by_its_value(
    name: str,
) -> None:
    """``auth_amount`` is the sum to authorize, whatever ``auth`` means in a header: a key
    sent again for another sum is another request, body or query (trial62); a pincode is
    India's postal code, a ``card_currency_code`` a currency, a ``pass_id`` no password
    (review62). A bare ``code`` or ``token`` is as often a promo code or a card token."""
    assert fingerprint(f'{{"{name}":"100"}}'.encode()) != fingerprint(
        f'{{"{name}":"99999"}}'.encode()
    )
    if name not in ("token", "session"):  # (in a query, credentials: see below)
        assert fingerprint(query=f"{name}=100".encode()) != fingerprint(
            query=f"{name}=99999".encode()
        )


def test_a_short_card_token_in_a_body_still_counts_by_its_value() -> None:
    """Stripe's test tokens (``tok_visa``, ``tok_amex``) are short: the card to charge."""
    for body in (b'{"payment_method_token":"%s"}', b"payment_method_token=%s"):
        content_type = FORM if body.startswith(b"payment") else JSON
        assert fingerprint(body % b"tok_visa", content_type=content_type) != fingerprint(
            body % b"tok_amex", content_type=content_type
        )


def test_a_multipart_secret_is_hidden_in_its_own_part_only() -> None:
    """The same text in another field still counts (review62: a PIN of 12 hid the 12 of
    an amount of 1200)."""
    boundary = "b0undary"
    content_type = f"multipart/form-data; boundary={boundary}"

    def form(pin: str, amount: str) -> bytes:
        return (
            f'--{boundary}\r\nContent-Disposition: form-data; name="pin"\r\n\r\n{pin}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="amount"\r\n\r\n'
            f"{amount}\r\n--{boundary}--\r\n"
        ).encode()

    assert fingerprint(form("12", "1200"), content_type=content_type) != fingerprint(
        form("34", "3400"), content_type=content_type
    )
    assert fingerprint(form("12", "1200"), content_type=content_type) == fingerprint(
        form("34", "1200"), content_type=content_type
    )


@pytest.mark.parametrize("quoted", [False, True])
def test_a_form_encoded_again_with_another_boundary_is_the_same_request(quoted: bool) -> None:
    """httpx, requests and browsers pick a new random boundary each time they encode a
    form: the same form sent again under its key is the same request (trial92: it was
    refused as a reused key), and its secret fields still count by their names."""

    def fingerprint_of(boundary: str, amount: str, pin: str = "1234") -> str:
        request = httpx.Request(
            "POST",
            "https://shop.test/upload",
            data={"amount": amount, "pin": pin},
            files={"file": ("a.txt", b"the file's bytes")},
        )
        sent = request.headers["content-type"].split("boundary=")[1]
        body = request.read().replace(sent.encode(), boundary.encode())
        quote = '"' if quoted else ""
        return fingerprint(
            body, content_type=f"multipart/form-data; boundary={quote}{boundary}{quote}"
        )

    first = fingerprint_of("a1b2c3", "1200")
    assert fingerprint_of("f9e8d7", "1200") == first
    assert fingerprint_of("0000ff", "1200", pin="9876") == first  # (a secret, by its name)
    assert fingerprint_of("0000ee", "3400") != first


@pytest.mark.parametrize(
    ("parameter", "boundary"),
    [('"a\\"1"', 'a"1'), ('"b\\\\2"', "b\\2"), ('"c 3"', "c 3")],
    ids=["escaped-quote", "escaped-backslash", "space"],
)
def test_a_quoted_boundary_is_read_as_its_quoted_string_says(parameter: str, boundary: str) -> None:
    """A quoted boundary is a quoted-string: a backslash escapes the character after it
    (review88: the boundary was cut at the backslash, so the delimiters were kept and the
    same form with another boundary read as another request)."""

    def form(boundary: str, amount: str) -> bytes:
        return (
            f'--{boundary}\r\nContent-Disposition: form-data; name="amount"\r\n\r\n'
            f"{amount}\r\n--{boundary}--\r\n"
        ).encode()

    first = fingerprint(
        form(boundary, "12"), content_type=f"multipart/form-data; boundary={parameter}"
    )
    again = fingerprint(form("x9", "12"), content_type="multipart/form-data; boundary=x9")
    other = fingerprint(form("x9", "34"), content_type="multipart/form-data; boundary=x9")
    assert first == again
    assert first != other


def test_an_empty_quoted_boundary_leaves_the_body_as_sent() -> None:
    """``boundary=""`` names no boundary: nothing in the body is set aside as a delimiter
    (it reads as under no boundary at all), and its bytes count."""
    body = b'--\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n----\r\n'
    empty = 'multipart/form-data; boundary=""'
    assert fingerprint(body, content_type=empty) == fingerprint(
        body, content_type="multipart/form-data"
    )
    assert fingerprint(body, content_type=empty) != fingerprint(
        body.replace(b"1", b"2"), content_type=empty
    )


def test_a_value_holding_its_forms_boundary_text_still_counts() -> None:
    """Only the delimiters are set aside: a value that holds "--" and the boundary is that
    value (boundaries x and y with values "a--x1" and "a--y1" read the same: review88)."""

    def form(boundary: str, value: str) -> str:
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="ref"\r\n\r\n{value}\r\n'
            f"--{boundary}--\r\n"
        ).encode()
        return fingerprint(body, content_type=f"multipart/form-data; boundary={boundary}")

    assert form("x", "ref a--x1") != form("y", "ref a--y1")
    assert form("x", "ref a--z1") == form("y", "ref a--z1")


def test_a_name_added_as_a_secret_counts_by_its_name() -> None:
    """``retrysafe.redact.add_secret_names`` adds to the guessable ones: the app knows its
    own secrets."""
    from retrysafe.redact import _reset_secret_names, add_secret_names

    assert fingerprint(b'{"acme_seal":"a1"}') != fingerprint(b'{"acme_seal":"b2"}')
    add_secret_names("acme-seal")
    try:
        assert fingerprint(b'{"acme_seal":"a1"}') == fingerprint(b'{"acme_seal":"b2"}')
        assert fingerprint(b'{"seal":"a1"}') != fingerprint(b'{"seal":"b2"}')
    finally:
        _reset_secret_names()


def test_a_whole_object_under_a_secret_name_counts_by_its_name() -> None:
    assert fingerprint(b'{"credentials":{"user":"ann","pin":"1234"}}') == fingerprint(
        b'{"credentials":{"user":"bob","pin":"9999"}}'
    )


def test_a_bare_key_field_in_a_body_still_counts_by_its_value() -> None:
    """In a body, ``key`` is as often a sort key or a file name as a secret."""
    assert fingerprint(b'{"key":"a.txt"}') != fingerprint(b'{"key":"b.txt"}')


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"card":{"number":"%s","exp":"12/30"}}', JSON),
        (b'{"card":{"number":%s}}', JSON),
        (b"amount=500&card[number]=%s&card[exp_month]=12", FORM),  # Stripe's form
        (b"charge 500 to %s please", "text/plain"),
        (b"{broken %s", JSON),
    ],
)
def test_a_card_number_counts_by_its_first_six_and_last_four_digits(
    body: bytes, content_type: str
) -> None:
    def of(card: str) -> str:
        return fingerprint(body % card.encode(), content_type=content_type)

    assert of(VISA) == of(OTHER_VISA)  # the middle six digits: no way to test guesses
    assert of(VISA) != of(MASTERCARD)  # another card: another request


def test_a_card_number_in_the_query_or_spaced_out_counts_the_same_way() -> None:
    assert fingerprint(query=f"card={VISA}".encode()) == fingerprint(
        query=f"card={OTHER_VISA}".encode()
    )
    spaced = b'{"number":"4242 4242 4242 4242"}'
    assert fingerprint(spaced) == fingerprint(b'{"number":"4242 4210 0008 4242"}')


def test_a_secret_in_the_query_or_a_form_counts_by_its_name() -> None:
    assert fingerprint(query=b"to=ann&access_token=abc") == fingerprint(
        query=b"to=ann&access_token=xyz"
    )
    assert fingerprint(query=b"to=ann&otp=123456") == fingerprint(query=b"to=ann&otp=654321")
    assert fingerprint(b"user=ann&password=abc", content_type=FORM) == fingerprint(
        b"user=ann&password=xyz", content_type=FORM
    )
    # (the rest of a form still counts as sent, field order too)
    assert fingerprint(b"user=ann&password=abc", content_type=FORM) != fingerprint(
        b"password=abc&user=ann", content_type=FORM
    )


def test_a_multipart_secret_field_counts_by_its_name() -> None:
    boundary = "b0undary"
    content_type = f"multipart/form-data; boundary={boundary}"

    def form(password: str) -> bytes:
        return (
            f'--{boundary}\r\nContent-Disposition: form-data; name="user"\r\n\r\nann\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="password"\r\n\r\n'
            f"{password}\r\n--{boundary}--\r\n"
        ).encode()

    assert fingerprint(form("hunter22"), content_type=content_type) == fingerprint(
        form("letmein1"), content_type=content_type
    )


def test_a_long_number_that_is_no_card_number_still_counts_whole() -> None:
    """An id of 16 digits that fails the Luhn check is no card: every digit counts."""
    assert fingerprint(b'{"order":4242424242424241}') != fingerprint(b'{"order":4242421000084241}')


def test_the_journal_fingerprints_a_request_without_its_secrets() -> None:
    """The client's journal keeps the same fingerprint on disk (over the URL without its
    credentials): a short password or a card's middle digits change nothing."""
    from retrysafe.idempotency.journal import request_fingerprint_of

    def of(url: str, body: dict[str, Any]) -> str:
        return request_fingerprint_of(httpx.Request("POST", url, json=body))

    base = of("https://u:pw1@api.test/pay?order=1", {"card": VISA, "password": "abc"})
    assert base == of("https://u:pw2@api.test/pay?order=1", {"card": OTHER_VISA, "password": "x"})
    assert base != of("https://u:pw1@api.test/pay?order=2", {"card": VISA, "password": "abc"})
    assert base != of("https://u:pw1@api.test/pay?order=1", {"card": MASTERCARD, "password": "a"})


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("auth_amount=100", "auth_amount=99999"),
        ("payment_token=tok_a", "payment_token=tok_b"),
        ("access_token=" + TOKEN_A, "access_token=" + TOKEN_B),
        ("X-Amz-Signature=ab12", "X-Amz-Signature=cd34"),
        ("password=abc", "password=xyz"),
        ("order=1", "order=2"),
    ],
)
def test_the_journal_reads_a_query_as_the_middleware_does(first: str, second: str) -> None:
    """Whether two runs are the same operation to the client's journal, and the same
    request to the server, never disagree (review61: the journal read the query by the
    logs' names, and resumed a crashed ``?auth_amount=100`` for ``?auth_amount=99999``)."""
    from retrysafe.idempotency.journal import request_fingerprint_of

    def journal(query: str) -> str:
        return request_fingerprint_of(httpx.Request("POST", f"https://api.test/pay?{query}"))

    same_to_journal = journal(first) == journal(second)
    same_to_server = fingerprint(query=first.encode()) == fingerprint(query=second.encode())
    assert same_to_journal == same_to_server


def test_a_cards_security_code_and_a_pin_count_by_their_names() -> None:
    """Three or four digits: a thousand guesses would find them in a hash."""
    form = "amount=500&card[number]={card}&card[cvc]={cvc}"
    assert fingerprint(form.format(card=VISA, cvc=314).encode(), content_type=FORM) == fingerprint(
        form.format(card=VISA, cvc=271).encode(), content_type=FORM
    )
    assert fingerprint(b'{"card":{"cvv":"314","pin":"1234"}}') == fingerprint(
        b'{"card":{"cvv":"271","pin":"9999"}}'
    )


def test_a_card_number_among_other_words_counts_by_its_first_six_and_last_four() -> None:
    def of(card: str) -> str:
        return fingerprint(f'{{"note":"pay with {card} please"}}'.encode())

    assert of("4242 4242 4242 4242") == of("4242 4210 0008 4242")
    assert of("4242 4242 4242 4242") != of(MASTERCARD)
    assert fingerprint(query=f"memo=card+{VISA}".encode()) == fingerprint(
        query=f"memo=card+{OTHER_VISA}".encode()
    )


@pytest.mark.parametrize("content_type", ["text/plain", None])
def test_json_sent_as_another_type_keeps_its_secrets_out_too(content_type: str | None) -> None:
    def of(password: str) -> str:
        body = f'{{"user":"ann","password":"{password}"}}'.encode()
        return fingerprint(body, content_type=content_type)

    assert of("hunter2") == of("letmein")
    # (a body with no secret keeps its bytes as sent: formatting still counts there)
    assert fingerprint(b'{"a":1}', content_type=content_type) != fingerprint(
        b'{ "a": 1 }', content_type=content_type
    )


@pytest.mark.parametrize("name", ["partition_key", "object_key", "key_id"])
def test_a_field_named_only_by_key_counts_by_its_value(name: str) -> None:
    """An id as often as a credential, and a credential so named is long and random:
    two requests that differ there are two (a key reused for another object is refused)."""
    assert fingerprint(f'{{"{name}":"a/1.txt"}}'.encode()) != fingerprint(
        f'{{"{name}":"b/2.txt"}}'.encode()
    )
    # (a secret by its other segment)
    assert fingerprint(b'{"secret_key":"a"}') == fingerprint(b'{"secret_key":"b"}')


def test_a_crafted_long_content_type_is_not_parsed_for_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A multipart body's fields are read for secrets only under a Content-Type of at most
    1,024 characters: the email parser takes time quadratic in a crafted header's length
    (review93: 1.1 s of the server's CPU for one request with 65 KB of '; boundary="a').
    Under a longer one the fields count as sent, and its boundary is still set aside."""
    parsed: list[str] = []
    real = fingerprint_module.multipart_fields

    def noting(content_type: str, content: bytes) -> list[tuple[str, str]]:
        parsed.append(content_type)
        return real(content_type, content)

    monkeypatch.setattr(fingerprint_module, "multipart_fields", noting)
    body = b'--b1\r\nContent-Disposition: form-data; name="pin"\r\n\r\n1234\r\n--b1--\r\n'
    crafted = "multipart/form-data" + '; boundary="a' * 5_000 + "; boundary=b1"
    fingerprint(body, content_type=crafted)
    assert parsed == []
    fingerprint(body, content_type="multipart/form-data; boundary=b1")
    assert parsed == ["multipart/form-data; boundary=b1"]
