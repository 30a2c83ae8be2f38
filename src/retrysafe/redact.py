"""Keeping secrets out of logs, messages, reprs and metrics.

**Which names are secret.** A header or query parameter name is cut into segments at
``-``, ``_``, ``.``, spaces and camelCase boundaries, and lower-cased
(``X-Amz-Security-Token`` -> ``x amz security token``, ``apiKey`` -> ``api key``,
``APIKey`` -> ``api key``). The name is secret when its segments contain, in a row,
the segments of a registered secret name (:data:`SECRET_NAMES`): a single word such as
``key``, ``token``, ``sig`` or ``pass`` matches that whole segment only, so ``api_key``,
``X-Amz-Signature`` and ``sig`` are secret while ``keyword``, ``author`` and ``monkey``
are not. A plural is secret where it is named (``passwords``, ``secrets``, ``api_keys``,
``access_tokens``), not as a rule: ``max_tokens`` and ``keys`` say how many or which.
A few names that hold no secret though they end in one are built-in exceptions
(:data:`PUBLIC_NAMES`: ``Idempotency-Key``, ``public_key``, ``sort_key``, ``pageToken``):
their segments are set aside before matching, so ``X-Idempotency-Key`` and
``nextPageToken`` are public too.
Add your own with :func:`add_secret_names` (``add_secret_names("ticket", "acme-seal")``
makes ``X-Acme-Ticket`` and ``acmeSeal`` secret), process-wide.

**Which values are scrubbed.** :class:`Redactor` remembers the secret *values* of one
request, so that a server echoing them back in a body cannot smuggle them into a log
line or an error message, however it writes them: as sent, JSON-escaped (``\\/``,
``\\u002f``, every character as ``\\uXXXX``) or percent-encoded (``%2F``/``%2f``,
``+`` for a space) or HTML-escaped (``&amp;``, ``&#x27;``). Values shorter than 4
characters are not scrubbed from free text.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import re
import threading
import urllib.parse
import weakref
from collections.abc import Iterable

import httpx

__all__ = [
    "PUBLIC_NAMES",
    "REDACTED",
    "SCRUB_MARGIN",
    "QueryRedactingFilter",
    "SECRET_NAMES",
    "RedactingFilter",
    "TraceRedactingFilter",
    "Redactor",
    "add_secret_names",
    "hidden_values",
    "is_added_secret_name",
    "is_card_number",
    "is_secret_field",
    "is_secret_name",
    "multipart_fields",
    "name_segments",
    "printable",
    "redact_httpx_logs",
    "redact_url",
    "redact_url_text",
    "redact_urllib3_logs",
    "typed_userinfo",
    "url_text_secrets",
    "unshown_value",
]

REDACTED = "[REDACTED]"
#: How far past a cut a secret's written form may run (characters): more than a long
#: credential (a JWT of 2 KiB) written in its longest form, every character JSON-escaped
#: as 6. Text kept up to a cut is scrubbed with this much of what follows it, so that a
#: secret the cut crosses is replaced whole, not left with its head.
SCRUB_MARGIN = 16 * 1024


def unshown_value(refused: UnicodeEncodeError, hint: str = "") -> UnicodeEncodeError:
    """A refusal to encode a header's value (httpx's as ASCII, http.client's as latin-1),
    without the value: the error holds it whole, and its repr showed an
    ``Authorization`` token in clear (trial95, review88). The same type, so that an
    ``except UnicodeEncodeError`` still takes it; ``hint`` says what to send instead."""
    note = "the value is not shown: it may be a secret"
    return UnicodeEncodeError(
        refused.encoding,
        REDACTED,
        0,
        len(REDACTED),
        f"{refused.reason}; a header's value must be {refused.encoding} text "
        f"({hint + '; ' if hint else ''}{note})",
    )


#: The built-in secret names, matched on segments (see the module docstring).
SECRET_NAMES: tuple[str, ...] = (
    # credentials and their usual one-word spellings
    "authorization", "auth", "authn", "bearer", "cookie", "session", "sessionid", "sid",
    "key", "apikey", "accesskey", "secretkey", "privatekey",
    "token", "accesstoken", "authtoken", "idtoken", "refreshtoken", "sessiontoken",
    "securitytoken", "csrftoken", "xsrftoken", "csrf", "xsrf", "jwt", "otp", "totp",
    "secret", "clientsecret", "password", "passwd", "passphrase", "pass", "pwd",
    "credential", "credentials", "signature", "sig", "saml", "assertion",
    "authentication", "hmac", "jsessionid", "phpsessid", "sessid", "passcode",
    "code_verifier", "security_answer",
    # plurals that hold secrets (not "tokens" or "keys": max_tokens is a count)
    "passwords", "secrets", "api_keys", "apikeys", "access_tokens", "refresh_tokens",
    # payment cards' and people's short secrets (guessed in a thousand tries)
    "cvc", "cvv", "csc", "pin", "ssn",
)  # fmt: skip
#: Segment runs that carry no secret though they contain a secret name's segments: a key
#: the server reads as a name or a cursor, which a developer needs to see to debug paging
#: or sorting.
PUBLIC_NAMES: tuple[str, ...] = (
    "idempotency-key", "public-key", "sort-key", "page-token",
)  # fmt: skip
#: Secret values shorter than this are not scrubbed from free text (too many false hits).
_MIN_SCRUB_LENGTH = 4
#: Control characters (a header value that holds one is refused, quoted with it escaped).
#: (This module's patterns are compiled on first use, by ``re``'s own cache: a successful
#: call needs none of them, and ``import retrysafe`` is lighter without them.)
_CONTROL = r"[\x00-\x1f\x7f]"
_SEGMENT = r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+"
_registry_lock = threading.Lock()
#: The secret and public names' segments (see name_segments), worked out on first use.
_secret_patterns: frozenset[tuple[str, ...]] | None = None
_public_patterns: frozenset[tuple[str, ...]] = frozenset()
#: The segments of the names add_secret_names added.
_added_patterns: frozenset[tuple[str, ...]] = frozenset()


def name_segments(name: str) -> tuple[str, ...]:
    """``name`` cut at ``-``, ``_``, ``.``, spaces and camelCase boundaries, lower-cased."""
    return tuple(segment.lower() for segment in re.findall(_SEGMENT, name))


def _patterns(names: tuple[str, ...]) -> frozenset[tuple[str, ...]]:
    return frozenset(segments for segments in map(name_segments, names) if segments)


def _registered() -> tuple[frozenset[tuple[str, ...]], frozenset[tuple[str, ...]]]:
    """The secret names' and the public names' segments: the built-in names' (worked out
    on first use) and those added since."""
    secret = _secret_patterns
    if secret is None:
        with _registry_lock:
            secret = _with_built_in()
    return secret, _public_patterns


def _with_built_in() -> frozenset[tuple[str, ...]]:
    """The secret names' segments, the built-in names' worked out first if they are not
    yet (with the public names'). Called holding the registry's lock."""
    global _secret_patterns, _public_patterns
    if _secret_patterns is None:
        _public_patterns = _patterns(PUBLIC_NAMES)
        _secret_patterns = _patterns(SECRET_NAMES)
    return _secret_patterns


def add_secret_names(*names: str) -> None:
    """Treat headers and query parameters named like any of ``names`` as secret, from now on.

    Each name is matched by segments like the built-in ones: ``"ticket"`` makes
    ``X-Acme-Ticket`` and ``ticket_id`` secret but not ``tickets``; ``"acme-seal"`` makes
    ``X-Acme-Seal`` and ``acmeSeal`` secret but not ``seal``. Process-wide, thread-safe.
    """
    global _secret_patterns, _added_patterns, _judged
    added = _patterns(names)
    with _registry_lock:
        _secret_patterns = _with_built_in() | added
        _added_patterns = _added_patterns | added
        _judged = {}


def _reset_secret_names() -> None:
    """Back to the built-in names only (for tests)."""
    global _secret_patterns, _added_patterns, _judged
    with _registry_lock:
        _secret_patterns = None
        _added_patterns = frozenset()
        _judged = {}


def is_added_secret_name(name: str) -> bool:
    """Whether ``name`` is named like one of the names :func:`add_secret_names` added (the
    built-in ones left out)."""
    added = _added_patterns
    if not added:
        return False
    segments = name_segments(name)
    return any(_contains(segments, pattern) for pattern in added)


def _contains(segments: tuple[str, ...], pattern: tuple[str, ...]) -> list[int]:
    """The starts of ``pattern``'s runs in ``segments``."""
    width = len(pattern)
    return [
        start
        for start in range(len(segments) - width + 1)
        if segments[start : start + width] == pattern
    ]


#: Names already judged, against the names registered when they were: replaced by an
#: empty one whenever the registered names change (read before them: an answer worked out
#: against names registered since goes into a memo no longer read), and emptied when full
#: (a client may send any number of names).
_judged: dict[str, bool] = {}
_JUDGED_KEPT = 4096
#: Longer names are judged every time, not kept.
_JUDGED_LENGTH = 128


def is_secret_name(name: str) -> bool:
    """Whether a header or query parameter with this name carries a secret (see module doc)."""
    judged = _judged
    known = judged.get(name)
    if known is None:
        known = _judge_name(name)
        if len(name) <= _JUDGED_LENGTH:  # (a client may send names of any length)
            if len(judged) >= _JUDGED_KEPT:
                judged.clear()
            judged[name] = known
    return known


def _judge_name(name: str) -> bool:
    segments = name_segments(name)
    patterns, public = _registered()
    for pattern in public:  # blank out public runs: "X-Idempotency-Key" -> "x"
        for start in _contains(segments, pattern):
            width = len(pattern)
            segments = segments[:start] + ("",) * width + segments[start + width :]
    if any((segment,) in patterns for segment in segments):
        return True
    return any(_contains(segments, pattern) for pattern in patterns if len(pattern) > 1)


def hidden_values(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` (name, value pairs, in order) with the values of secret ones replaced:
    a copy of a request or response to keep beyond the call (a pickled error)."""
    return [(name, REDACTED if is_secret_name(name) else value) for name, value in headers]


def redact_url(url: httpx.URL | str) -> str:
    """The URL as text, with its password (or lone username) and secret query values replaced."""
    parsed = httpx.URL(url)
    if parsed.password:
        parsed = parsed.copy_with(username=parsed.username, password=REDACTED)
    elif parsed.username:
        # A lone username is usually a token ("https://ghp_...@host"): hide it.
        parsed = parsed.copy_with(username=REDACTED)
    # httpx percent-encodes the marker's brackets; show it as written.
    text = str(parsed).replace("%5BREDACTED%5D", REDACTED)
    if not parsed.query and not parsed.fragment and ";" not in parsed.raw_path.decode("ascii"):
        return text
    return _redacted_path_and_query(text)


def _redacted_path_and_query(text: str) -> str:
    """A URL's text with the secret values of its path segments' parameters (Java's
    ``;jsessionid=...``, each ending where its segment does) and of its query's and
    fragment's pairs hidden, the rest as written: re-encoding the query through httpx's
    params would read ``a=1;key=s`` as one value, and print a URL other than the one sent.
    """
    scheme = _url_parts()[0].match(text)
    authority_end = text.find("/", scheme.end() if scheme is not None else 0)
    query_start = len(text)
    for mark in "?#":
        found = text.find(mark, max(authority_end, 0))
        if found != -1:
            query_start = min(query_start, found)
    if authority_end == -1 or authority_end > query_start:
        authority_end = query_start
    path = _path_parameter().sub(_redacted_path_parameter, text[authority_end:query_start])
    query = _url_parts()[1].sub(_redacted_pairs, text[query_start:])
    return text[:authority_end] + path + query


@functools.cache
def _path_parameter() -> re.Pattern[str]:
    """A path segment's ``;name=value`` parameter (compiled on first use)."""
    return re.compile(r"(?P<start>;(?P<name>[^=;/?#]*)=)(?P<value>[^;/?#]*)")


def _redacted_path_parameter(match: re.Match[str]) -> str:
    name = urllib.parse.unquote(match.group("name"))
    return match.group("start") + (REDACTED if is_secret_name(name) else match.group("value"))


def _redacted_pairs(match: re.Match[str]) -> str:
    """The pairs of a URL's query or fragment from one ``?``, ``&`` or ``#`` to the next
    ``&`` or ``#``, a secret's value hidden.

    Whether ``;`` separates pairs depends on the server (httpx, and most servers today,
    read ``?token=a;b`` as one value, ``a;b``), so both readings are kept safe: a secret's
    value is hidden up to the next ``&`` or ``#``, ``;`` and all, and what follows an
    ordinary value's ``;`` is read as pairs of its own (``?page=1;api_key=...``).
    """
    pieces = match.group().split(";")
    for index, piece in enumerate(pieces):
        lead = 1 if index == 0 else 0  # (the first piece starts with its "?", "&" or "#")
        name, equals, _ = piece[lead:].partition("=")
        if equals and is_secret_name(urllib.parse.unquote_plus(name)):
            hidden = piece[: lead + len(name) + 1] + REDACTED
            return ";".join([*pieces[:index], hidden])
    return match.group()


#: Control and invisible formatting characters: C0, DEL, C1, soft hyphen, bidi overrides
#: and isolates, zero-width characters, line/paragraph separators, BOM, tag characters.
_UNPRINTABLE_CLASS = (
    "[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)


@functools.cache
def _unprintable() -> re.Pattern[str]:
    # (compiled on first use: `import retrysafe` is lighter without it)
    return re.compile(_UNPRINTABLE_CLASS)


def _escape_character(match: re.Match[str]) -> str:
    code = ord(match.group())
    return (
        f"\\x{code:02x}"
        if code <= 0xFF
        else f"\\u{code:04x}"
        if code <= 0xFFFF
        else f"\\U{code:08x}"
    )


def printable(text: str) -> str:
    """``text`` with every control or invisible formatting character written as an escape
    (``\\x1b``, ``\\u202e``), so text from a server cannot drive a terminal or hide in a log."""
    return _unprintable().sub(_escape_character, text)


_JSON_SHORT_ESCAPES = {
    "/": "\\/",
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_HTML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}


def _hex_digits(number: int, width: int) -> str:
    """``number`` in hex as a pattern matching upper- or lower-case digits."""
    return "".join(
        f"[{digit}{digit.upper()}]" if digit.isalpha() else digit for digit in f"{number:0{width}x}"
    )


def _character_pattern(character: str) -> str:
    """Every way an echo may write ``character``: as is, JSON-escaped, percent-encoded."""
    code = ord(character)
    units = (
        [code] if code <= 0xFFFF else [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + (code & 0x3FF)]
    )
    forms = [
        re.escape(character),
        "".join("\\\\u" + _hex_digits(unit, 4) for unit in units),
        "".join("%" + _hex_digits(byte, 2) for byte in character.encode("utf-8", "surrogatepass")),
    ]
    if character in _JSON_SHORT_ESCAPES:
        forms.append(re.escape(_JSON_SHORT_ESCAPES[character]))
    if character in _HTML_ENTITIES:
        forms.append(re.escape(_HTML_ENTITIES[character]))
    if not character.isalnum():  # HTML numeric references: &#47; &#x2F;
        forms.append(f"&#(?:0*{code}|[xX]0*{_hex_digits(code, 1)});")
    if character == " ":
        forms.append("\\+")
    return "(?:" + "|".join(forms) + ")"


def _secret_pattern(secret: str) -> str:
    return "".join(map(_character_pattern, secret))


@functools.cache
def _url_parts() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A typed URL's scheme and ``//``, and its query's pairs from one ``?``, ``&`` or
    ``#`` to the next ``&`` or ``#`` (compiled on first use)."""
    return (
        re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:)?//"),
        re.compile(r"[?&#][^&#]*"),
    )


def typed_userinfo(text: str) -> tuple[int, int] | None:
    """Where the userinfo of a URL as typed is (start, end: before its ``@``), or None.

    Generous, for a URL that may not parse: the userinfo ends at the last ``@`` before
    the query (a password typed with a ``/`` included). For one typed with a ``?`` or
    ``#``, only when what precedes it reads as ``user:password``, not ``host:port`` (so
    that an ``@`` in a query, ``https://api.test?email=a@b``, is left alone), it ends at
    the last ``@`` before the first ``/``, or, with none there (a password holding both,
    ``deploy:pw?x/y@host``), at the last ``@`` before the query's first ``=``.
    """
    scheme = _url_parts()[0].match(text)
    start = scheme.end() if scheme is not None else 0
    rest = text[start:]
    before_query = re.split(r"[?#]", rest, maxsplit=1)[0]
    if "@" in before_query:
        return start, start + before_query.rindex("@")
    authority = before_query.split("/", 1)[0]
    if ":" not in authority or authority.rpartition(":")[2].isdigit() or authority[:1] == "[":
        return None  # (host:port, or an IPv6 address: "[::1]")
    for end in (rest.split("/", 1)[0], rest.split("=", 1)[0]):
        if "@" in end:
            return start, start + end.rindex("@")
    return None


def url_text_secrets(text: str) -> list[str]:
    """The userinfo, secret path parameters and secret query values of a URL as typed
    (parseable or not)."""
    secrets: list[str] = []
    span = typed_userinfo(text)
    if span is not None:
        userinfo = text[span[0] : span[1]]
        user, _, password = userinfo.partition(":")
        # The password; or a lone username, which is usually a token ("ghp_...@host",
        # "sk_live_...:@host"). A username beside a password is a name, not a secret:
        # scrubbed from every text, "user" would hide "/users/1" and "User-Agent".
        secret = password or user
        secrets += [userinfo, secret]
        # httpx parses a password holding "/", "?" or "#" as other parts of the URL and
        # quotes a piece of it in its error ("Invalid port: 'SECRET'"): each piece too.
        secrets += re.split(r"[/?#:@]", secret)
    secrets += _path_and_query_secrets(text)
    return [secret for secret in secrets if secret]


def _path_and_query_secrets(text: str) -> list[str]:
    """The values of the secret path parameters (``/x;jsessionid=...``) and query
    parameters in ``text`` (a URL, or its path and query), as written and decoded: the
    values a URL's redaction hides (see :func:`_redacted_path_and_query`), for a
    :class:`Redactor` to scrub wherever else they appear (a body that echoes the path)."""
    secrets: list[str] = []
    path, _, rest = text.partition("?")
    for match in _path_parameter().finditer(path.partition("#")[0]):
        if is_secret_name(urllib.parse.unquote(match.group("name"))):
            value = match.group("value")
            secrets += [value, urllib.parse.unquote(value)]
    query = rest.partition("#")[0]
    # A secret's value runs to the next "&", ";" and all (as httpx reads it), and each
    # ";"-separated piece may be a pair of its own (as some servers read it): see
    # _redacted_pair.
    for pair in query.split("&") + query.replace(";", "&").split("&"):
        name, _, value = pair.partition("=")
        if is_secret_name(urllib.parse.unquote_plus(name)):
            secrets += [value, urllib.parse.unquote_plus(value), urllib.parse.unquote(value)]
    return [secret for secret in secrets if secret]


def redact_url_text(text: str) -> str:
    """``text`` (a URL as typed, maybe one httpx cannot parse) with its userinfo and secret
    query values replaced, and otherwise as written: for messages about bad input."""
    span = typed_userinfo(text)
    if span is not None:
        text = text[: span[0]] + REDACTED + text[span[1] :]
    return _redacted_path_and_query(text)


@functools.lru_cache(maxsize=64)
def _scrub_pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    """The pattern that finds any of ``secrets`` in any of their written forms, in any
    letter case (a server may echo a credential upper- or lower-cased, "unknown key
    BEARER SK_LIVE_...", and the echo is as secret as the value).

    Kept for the next failing call: a client's calls carry the same credentials, and
    writing out every character's forms costs far more than the scrub itself. (The
    secrets stay in this process's memory, where the requests that carried them were.)
    """
    return re.compile("|".join(map(_secret_pattern, secrets)), re.IGNORECASE)


class Redactor:
    """Scrubs the secret values of one request out of any text, in any of their encodings."""

    __slots__ = ("_pattern", "_secrets")

    def __init__(self, secrets: list[str]) -> None:
        unique = {secret for secret in secrets if len(secret) >= _MIN_SCRUB_LENGTH}
        # Longest first, so a token is not half-replaced by one of its prefixes.
        self._secrets = sorted(unique, key=len, reverse=True)
        self._pattern = _scrub_pattern(tuple(self._secrets)) if self._secrets else None

    @classmethod
    def for_request(
        cls, request: httpx.Request, *, card_numbers: bool = True, body: bool = True
    ) -> Redactor:
        """Collect every secret value the request carries: headers, query, userinfo, body
        fields named like secrets and, unless ``card_numbers`` is False, any number in
        its body that reads as a payment card's (one in ten 16-digit ids does too: fine
        to hide in a message, not to overlook when telling two requests apart). With
        ``body`` False, not the body's (reading a large one takes milliseconds)."""
        secrets: list[str] = []
        # The names as written: httpx's own view lower-cases them, losing camelCase.
        encoding = request.headers.encoding
        for raw_name, raw_value in request.headers.raw:
            name, value = raw_name.decode(encoding), raw_value.decode(encoding)
            if is_secret_name(name):
                secrets.append(value)
                # "Bearer abc123": the credential alone may be echoed without its scheme.
                words = value.split()
                secrets.extend(words[1:])
                secrets.extend(part.split("=", 1)[-1] for part in value.split(";"))
                # A signature among parameters (AWS's "Credential=..., Signature=<hex>",
                # HTTP Signatures' signature="..."), which a server may echo bare: those
                # named like secrets ("SignedHeaders=host", Digest's uri="/path" are not).
                for piece in re.split(r"[,;\s]+", value):
                    parameter, equals, given = piece.partition("=")
                    if equals and is_secret_name(parameter):
                        secrets.append(given.strip('"'))
                if len(words) == 2 and words[0].lower() == "basic":
                    secrets.extend(_basic_credentials(words[1]))
        for name, value in request.url.params.multi_items():
            if is_secret_name(name):
                secrets.append(value)
        # (and those httpx's reading of the query leaves inside another value, "?page=1;
        # api_key=...", and the path's: what the URL's redaction hides, the echo too)
        secrets.extend(_path_and_query_secrets(request.url.raw_path.decode("ascii", "replace")))
        if request.url.password:
            secrets.append(request.url.password)
        elif request.url.username:
            secrets.append(request.url.username)
        if body:
            found = _body_secrets(request)
            secrets.extend(found if card_numbers else (s for s in found if not is_card_number(s)))
        # A control character in a value (which httpx and h11 refuse, quoting the value
        # with it escaped: b'Bearer sk_...\\x00') leaves the secret only in pieces.
        controlled = [secret for secret in secrets if re.search(_CONTROL, secret)]
        secrets.extend(piece for secret in controlled for piece in re.split(_CONTROL, secret))
        # ...and whole, as the quote shows it (b'...\\x00...': Python's bytes repr)
        secrets.extend(repr(secret.encode("utf-8", "replace"))[2:-1] for secret in controlled)
        return cls([secret.strip() for secret in secrets])

    def scrub(self, text: str) -> str:
        """``text`` with every known secret value replaced by ``[REDACTED]``: as sent,
        JSON-escaped, percent-encoded or HTML-escaped (see the module docstring)."""
        if self._pattern is None:
            return text
        return self._pattern.sub(REDACTED, text)

    def scrub_bytes(
        self, content: bytes, *, cut: bool = False, at_most: int | None = None
    ) -> bytes:
        """``content`` scrubbed as :meth:`scrub` does. Bytes that are not UTF-8 (another
        charset, a character cut in two) pass through unchanged around the secrets found
        in the rest: a token echoed in a Latin-1 page, or in a body cut off mid-character,
        is hidden as in any other (review94: such a body was kept whole, token and all).

        ``cut``: the content is the start of a longer body, cut at its end; a secret may
        run past the cut, its head left here. The last :data:`SCRUB_MARGIN` characters
        are then dropped, and a secret that begins before them is replaced whole.

        ``at_most``: keep about that many bytes at most (a longer content is cut there, a
        margin past it scanned): what scanning costs grows with the content.
        """
        if at_most is not None and len(content) > at_most + SCRUB_MARGIN:
            content, cut = content[: at_most + SCRUB_MARGIN], True
        text = content.decode("utf-8", errors="surrogateescape")
        if cut:
            scrubbed = self.scrub_before(text, max(0, len(text) - SCRUB_MARGIN))
        else:
            scrubbed = self.scrub(text)
        return content if scrubbed == text else scrubbed.encode("utf-8", errors="surrogateescape")

    def scrub_before(self, text: str, limit: int) -> str:
        """The first ``limit`` characters of ``text``, scrubbed: a secret that starts
        before the limit and runs past it is replaced whole, and nothing after the
        limit is kept (``text`` should run far enough past it to hold such a secret)."""
        if self._pattern is None:
            return text[:limit]
        kept: list[str] = []
        done = 0
        for match in self._pattern.finditer(text):
            if match.start() >= limit:
                break
            kept.append(text[done : match.start()])
            kept.append(REDACTED)
            done = match.end()
        if done < limit:
            kept.append(text[done:limit])
        return "".join(kept)

    def scrub_exception(self, exc: BaseException) -> None:
        """Scrub the known secrets out of the messages of ``exc`` and of every exception it
        was raised from or while handling, in place: a traceback prints them all.

        httpx and h11 quote a header value they refuse to send ("Illegal header value
        b'Bearer sk_...\\n'"); the error retrysafe raises carries that exception as its
        cause, and ``RetryTransport`` may raise it as it is.
        """
        if self._pattern is None:
            return
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen and len(seen) < _CHAIN_LIMIT:
            seen.add(id(current))
            args = current.args
            scrubbed = tuple(self.scrub(arg) if isinstance(arg, str) else arg for arg in args)
            if scrubbed != args:
                current.args = scrubbed
            current = current.__cause__ or current.__context__

    def __repr__(self) -> str:
        return f"Redactor({len(self._secrets)} secrets)"


#: How many exceptions of one chain :meth:`Redactor.scrub_exception` looks at, at most.
_CHAIN_LIMIT = 32


#: A request body larger than this is not searched for secret fields.
BODY_SCAN_LIMIT = 64 * 1024
#: At most this many values are taken from one body (each one is a branch of the scrub).
_BODY_SECRETS_KEPT = 32
#: How deep a JSON body is searched.
_BODY_DEPTH = 32
#: A body field's value shorter than this is not taken for a secret (``"bearer"``,
#: ``"visa"``, a year): too many ordinary words would be hidden from messages.
_MIN_BODY_SECRET = 8
_CARD_DIGITS = r"[0-9][0-9 -]{11,22}[0-9]"


def _body_secrets(request: httpx.Request) -> list[str]:
    """The secret values of a JSON, form or multipart request body (not its files), which
    a server may echo back in its error ("invalid card: {...}"): values of 8 characters or
    more of fields named like secrets (but for a bare ``key``: in a body it is as often a
    sort key or a file name), and payment card numbers wherever they are. Only a body
    retrysafe holds as bytes is read (the requests and aiohttp shells' stand-ins hold
    their client's body when it is bytes: see ``foreign_shell.request_view``)."""
    if not isinstance(request.stream, httpx.ByteStream):
        return []
    try:
        content = request.content
    except httpx.RequestNotRead:  # (a stand-in for another client's request holds none)
        return []
    if not content or len(content) > BODY_SCAN_LIMIT:
        return []
    kind = request.headers.get("content-type", "").lower()
    text = content.decode("utf-8", errors="replace")
    if not kind or kind.startswith("application/octet-stream"):
        # Sent with no type (httpx's ``content=``, the CLI's ``--data``), or as bytes of
        # no particular kind (aiohttp's ``data=b"..."``): read as what it looks like, JSON
        # or a form, since a server may echo it all the same.
        kind = "json" if text.lstrip()[:1] in ("{", "[") else "x-www-form-urlencoded"
    secrets: list[str] = []
    if "x-www-form-urlencoded" in kind:
        for name, value in urllib.parse.parse_qsl(text, keep_blank_values=False):
            _take_field(name, value, secrets)
    elif "multipart/form-data" in kind:
        for name, value in multipart_fields(request.headers["content-type"], content):
            _take_field(name, value, secrets)
    elif "json" in kind:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return []
        _json_secrets(parsed, secrets, depth=0)
    return secrets[:_BODY_SECRETS_KEPT]


def multipart_fields(content_type: str, content: bytes) -> list[tuple[str, str]]:
    """The text fields of a ``multipart/form-data`` body, as (name, value); not its files."""
    import email.parser  # (here: only a failing call with a multipart body reads one)
    import email.policy

    fields: list[tuple[str, str]] = []
    try:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n" + content
        )
        for part in message.iter_parts() if message.is_multipart() else ():
            if part.get("content-disposition") is None or part.get_filename() is not None:
                continue
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if isinstance(name, str) and isinstance(payload, bytes):
                fields.append((name, payload.decode("utf-8", "replace").strip()))
    except Exception:  # a body the parser cannot read: none of its fields
        # (a best-effort scan on the path of a failing call's error: whatever a malformed
        # part makes the email parser raise must not replace that error)
        return fields
    return fields


def _json_secrets(value: object, into: list[str], *, depth: int) -> None:
    """Collect the secret values of a parsed JSON body (see :func:`_body_secrets`)."""
    if depth > _BODY_DEPTH or len(into) >= _BODY_SECRETS_KEPT:
        return
    if isinstance(value, dict):
        for name, item in value.items():
            if isinstance(item, (dict, list)):
                _json_secrets(item, into, depth=depth + 1)
            else:
                _take_field(str(name), item, into)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)):
                _json_secrets(item, into, depth=depth + 1)
            else:
                _take_field("", item, into)


def _take_field(name: str, value: object, into: list[str]) -> None:
    """Take a body field's value if it is a secret: named like one, or a card number."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return
    text = str(value)
    if is_card_number(text) or (len(text) >= _MIN_BODY_SECRET and is_secret_field(name)):
        into.append(text)


def is_secret_field(name: str) -> bool:
    """Whether a body field (JSON, form or multipart) with this name holds a secret: named
    like one, but for a bare ``key`` (in a body as often a sort key or a file name)."""
    return is_secret_name(name) and name_segments(name) != ("key",)


def is_card_number(text: str) -> bool:
    """Whether ``text`` is a payment card number: 13 to 19 digits (spaces or dashes
    between them allowed) that pass the Luhn check."""
    if not re.fullmatch(_CARD_DIGITS, text):
        return False
    digits = [int(digit) for digit in text if digit.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for index, digit in enumerate(reversed(digits)):
        if index % 2:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def _basic_credentials(encoded: str) -> list[str]:
    """``user:password`` and the password, from Basic credentials (nothing if malformed)."""
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return []
    return [decoded, decoded.partition(":")[2]]


class RedactingFilter(logging.Filter):
    """Redacts URLs in httpx's own log records ("HTTP Request: GET https://...?api_key=...").

    httpx logs every request's full URL at INFO; retrysafe's clients install
    this filter on the ``httpx`` logger so query secrets do not reach logs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_url(arg) if isinstance(arg, httpx.URL) else arg for arg in record.args
            )
        return True


_httpx_filter = RedactingFilter()


class TraceRedactingFilter(logging.Filter):
    """Redacts header values in httpcore's DEBUG trace records.

    httpcore writes each trace as finished text: the response's headers as bytes pairs
    (``(b'Set-Cookie', b'session=...')``) and a failure's exception, such as h11's
    refusal of a header value, which quotes it whole (``Illegal header value b'Bearer
    sk_...\\n'``: a token read from a file with its newline). A pair whose name is a
    secret's, and every refused value, is replaced; a URL in another header's value
    (``Location``) is shown redacted. Within a retrysafe attempt, the secret values of its
    request's headers, query and userinfo are scrubbed from the header pairs too, as from
    an error's body: a server that echoes the caller's token in a header of an ordinary
    name (``X-Debug-Echo``) must not get it into the log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg
        if isinstance(message, str) and ("b'" in message or 'b"' in message):
            pair, refused = _trace_parts()
            message = pair.sub(_redacted_header_pair, message)
            message = refused.sub(r"\g<start>" + REDACTED + r"\g<quote>", message)
            if "(b'" in message or '(b"' in message:  # (header pairs; not a request's repr)
                redactor = _attempts_redactor()
                if redactor is not None:
                    message = redactor.scrub(message)
            record.msg = message
        return True


#: The redactor of each request a trace scrubbed (read once per request, not per record:
#: a large body takes milliseconds to read, and a trace logs several records an attempt).
_trace_redactors: weakref.WeakKeyDictionary[httpx.Request, Redactor] = weakref.WeakKeyDictionary()


def _attempts_redactor() -> Redactor | None:
    """The redactor of the request of the retrysafe attempt running in this context, if
    any (made on its first trace record, then kept while the request lives)."""
    from retrysafe.attempt_deadline import current_call  # (loaded by any attempt)

    request = getattr(current_call.get(), "request", None)
    if not isinstance(request, httpx.Request):
        return None
    redactor = _trace_redactors.get(request)
    if redactor is None:
        # (the credentials a server echoes in a header: the request's headers, query and
        # userinfo; not its body's fields, whose reading is no price for a log line)
        redactor = _trace_redactors[request] = Redactor.for_request(request, body=False)
    return redactor


@functools.cache
def _trace_parts() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A header pair of bytes as httpcore's traces write it, and a refused header value
    (compiled on first use)."""
    quoted = r"b(?P<{0}q>['\"])(?P<{0}>(?:\\.|(?!(?P={0}q)).)*)(?P={0}q)"
    return (
        re.compile(r"\(" + quoted.format("name") + ", " + quoted.format("value") + r"\)"),
        re.compile(
            r"(?P<start>Illegal header value b(?P<quote>['\"]))(?:\\.|(?!(?P=quote)).)*(?P=quote)"
        ),
    )


def _redacted_header_pair(match: re.Match[str]) -> str:
    """A header pair of a trace: its value hidden if its name is a secret's, else any URL
    in it shown redacted (a ``Location`` with ``?access_token=...``)."""
    head = match.group()[: match.start("value") - match.start()]
    quote = match.group("valueq")
    if is_secret_name(match.group("name")):
        return head + REDACTED + quote + ")"
    value = match.group("value")
    if "?" in value or "@" in value or "#" in value or ";" in value:
        return head + redact_url_text(value) + quote + ")"
    return match.group()


_trace_filter = TraceRedactingFilter()
#: httpcore's loggers: one per module that traces (a filter sees only its own logger's
#: records, not those its children pass up).
_HTTPCORE_LOGGERS = (
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)


def redact_httpx_logs() -> None:
    """Install :class:`RedactingFilter` on the ``httpx`` logger, and
    :class:`TraceRedactingFilter` on httpcore's (once; safe to call again)."""
    httpx_logger = logging.getLogger("httpx")
    if _httpx_filter not in httpx_logger.filters:
        httpx_logger.addFilter(_httpx_filter)
    for name in _HTTPCORE_LOGGERS:
        trace_logger = logging.getLogger(name)
        if _trace_filter not in trace_logger.filters:
            trace_logger.addFilter(_trace_filter)


class QueryRedactingFilter(logging.Filter):
    """Redacts secret query values in a log record's text arguments.

    urllib3 logs each request's path and query as text at DEBUG (``"GET /?api_key=...
    HTTP/1.1" 200``); the requests shell installs this on urllib3's logger.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_url_text(arg) if isinstance(arg, str) and "=" in arg else arg
                for arg in record.args
            )
        return True


_urllib3_filter = QueryRedactingFilter()


def redact_urllib3_logs() -> None:
    """Install :class:`QueryRedactingFilter` on the ``urllib3`` connection pool's logger."""
    pool_logger = logging.getLogger("urllib3.connectionpool")
    if _urllib3_filter not in pool_logger.filters:
        pool_logger.addFilter(_urllib3_filter)
