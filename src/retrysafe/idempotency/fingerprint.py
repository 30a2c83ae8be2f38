"""The fingerprint of a request: what must match for a repeat to count as the same request.

A store keeps the fingerprint of every keyed request, and whoever reads the store could
test guesses against it offline: a password under four guesses, a card's security code
among a thousand, a one-time code among a million, a card number among a million
candidates in seconds. So no guessable secret goes into it:

- a field named for a secret a person chooses or a short code (:func:`_guessable_name`:
  ``password``, ``pin``, ``cvc``, ``otp`` anywhere in its name; a name ending in ``pass``;
  a ``code``, ``token`` or ``answer`` named for what it verifies, such as
  ``verification_code``, ``sms_token``, ``security_code``, ``cardCode``; and the names
  added with :func:`retrysafe.redact.add_secret_names`) counts by its name alone;
- a query parameter whose name ends in a credential (:data:`CREDENTIALS`: ``..._token``,
  ``signature``, ``session_id``, ``api_key``...) does too: it authenticates or signs the
  URL, and a URL signed again is the same request;
- a payment card number counts by its first six and last four digits and its length, the
  part a receipt may print.

Two requests that differ only there are the same request: a key sent again with another
password or another card replays the first answer, where it would otherwise be refused as
a reused key. Every other field counts by its value, whatever secret-like word it holds:
``auth_amount`` is the sum to authorize, and ``payment_method_token`` in a body the card
to charge, so a key sent again for another sum or another card is another request. A
request holding no secret, nor any number that reads as a card's (13 to 19 digits that
pass the Luhn check, as one long id in ten does), is fingerprinted as it always was.

Names are judged alone: a nested ``{"mfa": {"code": ...}}`` counts its code by value
(name it ``mfa_code``, or add ``code`` with ``add_secret_names``), and a bare ``code`` or
``token`` does too, being as often a promo code or a card token as a one-time code.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Final
from urllib.parse import parse_qsl, urlencode

from retrysafe.redact import (
    is_added_secret_name,
    is_card_number,
    is_secret_name,
    multipart_fields,
    name_segments,
)

__all__ = [
    "CREDENTIALS",
    "GUESSABLE_SECRETS",
    "canonical_body",
    "canonical_query",
    "request_fingerprint",
]

#: What a secret field's value is fingerprinted as (the NUL keeps it apart from any text
#: a client would send).
_SECRET = "\x00secret"
#: Runs of digits that may be a card number inside a body of another kind (text,
#: multipart), or inside a longer value ("pay with 4242 4242 4242 4242").
_CARD_RUN = re.compile(r"(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])")


#: The segments of a field's name that make it count by its name alone, wherever they
#: stand: secrets a person chooses, and short codes, which a few thousand guesses find
#: from a hash.
GUESSABLE_SECRETS: frozenset[str] = frozenset(
    {
        "password", "passwd", "passphrase", "pwd", "passcode", "secret", "credential",
        "credentials", "pin", "cvc", "cvv", "cvn", "csc", "ssn", "otp", "totp", "hotp",
    }
)  # fmt: skip
#: A name ending in one of these counts by its name alone when the segment before says
#: what it verifies: ``verification_code``, ``sms_token``, ``security_answer``.
_VERIFIED_BY: dict[str, frozenset[str]] = {
    "code": frozenset(
        {
            "verification", "verify", "confirm", "sms", "mfa", "fa", "tfa", "factor",
            "time", "auth", "authentication", "security", "card", "recovery", "backup",
            "reset", "activation", "login", "email", "access",
        }
    ),
    "token": frozenset(
        {
            "verification", "verify", "sms", "mfa", "fa", "tfa", "factor", "time",
            "recovery", "backup", "reset", "activation", "login", "email",
        }
    ),
    "answer": frozenset({"security", "challenge"}),
}  # fmt: skip
#: The endings that name a credential a machine makes: its last segment, or its last two
#: as one word (``session_id``, ``api_key``).
CREDENTIALS: frozenset[str] = frozenset(
    {
        "token", "accesstoken", "authtoken", "idtoken", "refreshtoken", "sessiontoken",
        "securitytoken", "csrftoken", "xsrftoken", "csrf", "xsrf", "jwt", "bearer",
        "auth", "authn", "authorization", "authentication", "cookie", "session",
        "sessionid", "sid", "jsessionid", "phpsessid", "signature", "sig", "hmac",
        "saml", "assertion", "apikey", "accesskey", "secretkey", "privatekey",
    }
)  # fmt: skip


def _guessable_name(name: str) -> bool:
    """Whether a field named ``name`` holds a guessable secret by its name alone (see the
    module's docstring)."""
    segments = name_segments(name)
    if any(segment in GUESSABLE_SECRETS for segment in segments):
        return True
    if segments and segments[-1] == "pass":  # (a password; not boarding_pass_number)
        return True
    verifying = _VERIFIED_BY.get(segments[-1]) if len(segments) > 1 else None
    if verifying is not None and segments[-2] in verifying:
        return True
    return is_added_secret_name(name)


def _credential_name(name: str) -> bool:
    """Whether ``name`` ends in a credential's name (see :data:`CREDENTIALS`), and is no
    public name the logs leave alone, such as ``page_token``."""
    segments = name_segments(name)
    if not segments:
        return False
    ending = segments[-1] in CREDENTIALS or "".join(segments[-2:]) in CREDENTIALS
    return ending and is_secret_name(name)


def _hidden_in_query(name: str) -> bool:
    """Whether a query parameter named ``name`` counts by its name alone."""
    return _guessable_name(name) or _credential_name(name)


def request_fingerprint(
    method: str, path: str, query: bytes, body: bytes, content_type: str | None
) -> str:
    """A SHA-256 over the method, path, query, body and media type, in canonical forms,
    with no secret in them (see the module's docstring).

    Two requests that differ only in JSON formatting (key order, whitespace), in the
    order of distinct query parameters, or in their ``Content-Type``'s parameters or
    letter case get the same fingerprint; any other difference in method, path, query,
    body or media type gives another (the same bytes as JSON and as a form are read as
    different requests by the app, so they are different requests here too), but for a
    secret's value.
    """
    digest = hashlib.sha256()
    for part in (
        method.upper().encode(),
        path.encode("utf-8", "surrogateescape"),
        canonical_query(query),
        canonical_body(body, content_type),
        _media_type(content_type).encode("latin-1", "replace"),
    ):
        # Length-prefixed, so no two different splits of the same bytes collide.
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def _card_stand_in(text: str) -> str | None:
    """What a payment card number counts as: its first six and last four digits and its
    length; None for any other text."""
    if len(text) < 13 or not text[0].isdigit() or not is_card_number(text):
        return None  # (the first two tests: most values, cheaply)
    digits = "".join(character for character in text if character.isdigit())
    return f"\x00card:{digits[:6]}:{len(digits)}:{digits[-4:]}"


def _without_cards(text: str) -> str:
    """``text`` with every card number in it, whole or among other words, replaced by
    what it counts as."""
    whole = _card_stand_in(text)
    if whole is not None:
        return whole
    return _card_runs_replaced(text) if len(text) >= 13 else text


def _card_runs_replaced(text: str) -> str:
    """``text`` with every run of digits in it that is a card number replaced by what it
    counts as."""
    return _CARD_RUN.sub(lambda match: _card_stand_in(match.group(0)) or match.group(0), text)


def _without_secrets(pairs: list[tuple[str, str]], *, in_query: bool) -> list[tuple[str, str]]:
    """Query (``in_query``) or form ``pairs`` with each secret's value replaced by what
    it counts as."""
    hidden = _hidden_in_query if in_query else _guessable_name
    return [(name, _SECRET if hidden(name) else _without_cards(value)) for name, value in pairs]


def canonical_query(query: bytes) -> bytes:
    """The query string decoded and sorted by name, keeping the order of repeated names.

    Percent escapes are decoded byte for byte (as Latin-1), so escapes of different
    bytes never decode to the same text.
    """
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="latin-1")
    pairs.sort(key=lambda pair: pair[0])
    pairs = _without_secrets(pairs, in_query=True)
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode()


def canonical_body(body: bytes, content_type: str | None) -> bytes:
    """A JSON body rewritten with sorted keys and no whitespace; other bodies as sent;
    either with its secrets' values replaced (see the module's docstring).

    Numbers keep the exact text they were sent as: read as floats, two different amounts
    such as ``12345678901234567.89`` and ``…88`` would look the same. A body labelled
    JSON that does not parse is taken byte for byte, but for card numbers.
    """
    if not body:
        return body
    if not _is_json(content_type):
        return _other_body(body, content_type)
    try:
        document = json.loads(
            body, parse_float=_Literal, parse_int=_Literal, parse_constant=_Literal
        )
    except (ValueError, RecursionError):
        return _without_card_runs(body)
    return _write_canonical(document).encode("utf-8", "surrogatepass")


def _other_body(body: bytes, content_type: str | None) -> bytes:
    """A body that is not JSON, as sent, but for its secrets: a form's secret fields and
    card numbers, a multipart body's secret text fields, and card numbers anywhere."""
    media_type = _media_type(content_type)
    if media_type == "application/x-www-form-urlencoded":
        text = body.decode("latin-1")
        pairs = parse_qsl(text, keep_blank_values=True, encoding="latin-1")
        kept = _without_secrets(pairs, in_query=False)
        if kept == pairs:
            return body  # (no secret: the bytes as sent, field order and all)
        return b"\x00form:" + urlencode(kept, encoding="latin-1").encode("latin-1")
    if media_type == "multipart/form-data" and content_type is not None:
        if len(content_type) <= _FIELDS_READ_UNDER_AT_MOST:
            for name, value in multipart_fields(content_type, body):
                if value and _guessable_name(name):
                    body = _part_value_replaced(body, name, value.encode("utf-8", "replace"))
        body = _boundary_replaced(body, content_type)
    elif body.lstrip()[:1] in (b"{", b"["):
        # JSON sent as another type (text/plain, or none at all): its secrets too, if it
        # parses and has any (a body without keeps its bytes as sent).
        scrubbed = _json_without_secrets(body)
        if scrubbed is not None:
            return scrubbed
    return _without_card_runs(body)


#: The longest ``Content-Type`` (characters) under which a multipart body's fields are read
#: for their secrets: a boundary has at most 70 characters (RFC 2046), and the email parser
#: takes time quadratic in a crafted header's length (review93: 1.1 s of the server's CPU
#: for one request with a 65 KB header). Under a longer one, the fields count as sent.
_FIELDS_READ_UNDER_AT_MOST: Final = 1024
#: A ``Content-Type``'s ``boundary`` parameter, quoted (a quoted-string, whose backslash
#: escapes the next character) or not.
_BOUNDARY = re.compile(
    r';\s*boundary\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))', re.IGNORECASE | re.DOTALL
)
#: A quoted-string's escape: a backslash and the character it stands for.
_QUOTED_PAIR = re.compile(r"\\(.)", re.DOTALL)
#: What a multipart body's boundary is fingerprinted as.
_BOUNDARY_STAND_IN = b"\x00boundary"


def _boundary_replaced(body: bytes, content_type: str) -> bytes:
    """``body`` (multipart) with its boundary replaced by one stand-in, everywhere it
    delimits a part: a client encoding the same form again picks a new random boundary
    (httpx, requests, browsers do), and the form sent again under its key is the same
    request (fingerprinted as sent, it was refused as a reused key: trial92). A part
    cannot hold its body's boundary, so only the delimiters change."""
    found = _BOUNDARY.search(content_type)
    if found is None:
        return body
    quoted, bare = found.groups()
    text = bare if quoted is None else _QUOTED_PAIR.sub(r"\1", quoted)
    if not text:
        return body
    boundary = text.encode("latin-1", "replace")
    # (the delimiters only: at the body's start, or after a line's end; "--" and the
    # boundary inside a part's text is that part's value, kept: review88)
    delimiter = b"--" + boundary
    stand_in = b"--" + _BOUNDARY_STAND_IN
    if body.startswith(delimiter):
        body = stand_in + body[len(delimiter) :]
    return body.replace(b"\r\n" + delimiter, b"\r\n" + stand_in)


def _part_value_replaced(body: bytes, name: str, value: bytes) -> bytes:
    """``body`` (multipart) with ``value`` replaced by the secret's stand-in in the part
    of the field ``name`` only: the same text in another field (a PIN of 12, an amount of
    1200) still counts."""
    marker = b'name="' + name.encode("utf-8", "replace") + b'"'
    start = body.find(marker)
    while start != -1:
        payload = body.find(b"\r\n\r\n", start)
        if payload == -1:
            break
        payload += 4
        end = body.find(b"\r\n--", payload)
        end = len(body) if end == -1 else end
        at = body.find(value, payload, end)
        if at != -1:
            return body[:at] + _SECRET.encode() + body[at + len(value) :]
        start = body.find(marker, end)
    return body


def _json_without_secrets(body: bytes) -> bytes | None:
    """A body that parses as JSON, in canonical form with its secrets replaced, marked as
    such; None if it does not parse or its canonical form holds no stand-in."""
    try:
        document = json.loads(
            body, parse_float=_Literal, parse_int=_Literal, parse_constant=_Literal
        )
    except (ValueError, RecursionError):
        return None
    canonical = _write_canonical(document)
    if "\\u0000" not in canonical:
        return None  # (no secret: the bytes as sent)
    return b"\x00json:" + canonical.encode("utf-8", "surrogatepass")


def _without_card_runs(body: bytes) -> bytes:
    """``body`` with every card number in it replaced by what it counts as (read as
    Latin-1: every byte a character of its own, and back)."""
    return _card_runs_replaced(body.decode("latin-1")).encode("latin-1")


class _Literal:
    """JSON text written out exactly as it is: a number as sent, or punctuation."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_OPEN_ARRAY, _CLOSE_ARRAY = _Literal("["), _Literal("]")
_OPEN_OBJECT, _CLOSE_OBJECT = _Literal("{"), _Literal("}")
_COMMA, _COLON = _Literal(","), _Literal(":")
#: A secret field's value, whatever it was (a string, a number, an object).
_SECRET_VALUE = _Literal(json.dumps(_SECRET))


def _write_canonical(document: object) -> str:
    """Serialise a parsed document: keys sorted, no whitespace, numbers as sent.

    Iterative rather than recursive, so any depth the parser accepted is written too.
    """
    out: list[str] = []
    # (a long body repeats its few names many times)
    secret_names: dict[str, bool] = {}
    pending: list[object] = [document]
    while pending:
        item = pending.pop()
        if isinstance(item, _Literal):
            card = _card_stand_in(item.text)  # (a number; punctuation is never one)
            out.append(item.text if card is None else json.dumps("\x00number" + card))
        elif isinstance(item, str):
            out.append(json.dumps(_without_cards(item), ensure_ascii=False))
        elif item is None or item is True or item is False:
            out.append(json.dumps(item))
        elif isinstance(item, list):
            parts: list[object] = [_OPEN_ARRAY]
            for index, element in enumerate(item):
                parts.extend((_COMMA, element) if index else (element,))
            parts.append(_CLOSE_ARRAY)
            pending.extend(reversed(parts))
        elif isinstance(item, dict):
            parts = [_OPEN_OBJECT]
            for index, name in enumerate(sorted(item)):
                if index:
                    parts.append(_COMMA)
                secret = secret_names.get(name)
                if secret is None:
                    secret = secret_names[name] = _guessable_name(name)
                value = _SECRET_VALUE if secret else item[name]
                parts.extend((_Literal(json.dumps(name, ensure_ascii=False)), _COLON, value))
            parts.append(_CLOSE_OBJECT)
            pending.extend(reversed(parts))
        else:
            raise TypeError(f"not a parsed JSON value: {item!r}")
    return "".join(out)


def _media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` (lower-cased, no parameters); "" for none."""
    if content_type is None:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def _is_json(content_type: str | None) -> bool:
    media_type = _media_type(content_type)
    return media_type == "application/json" or media_type.endswith("+json")
