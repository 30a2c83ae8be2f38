"""What a server says about retrying beyond ``Retry-After``: pure, never-raising parsers.

Three kinds of hint, each read the way the clients that popularised it read it:

- a precise wait: ``retry-after-ms`` (the openai and anthropic SDKs), which wins
  over ``Retry-After`` when both are usable (:func:`retry_after_hint`);
- a verdict: ``x-should-retry`` (openai, anthropic) and ``Stripe-Should-Retry``
  (Stripe), ``true`` or ``false`` (:func:`server_says_retry`);
- an announced limit, sent on any response *before* a 429: the IETF ``RateLimit``
  and ``RateLimit-Policy`` fields, the older draft's ``RateLimit-Remaining`` /
  ``RateLimit-Reset``, and ``X-RateLimit-Remaining`` / ``X-RateLimit-Reset``
  (GitHub and many others) (:func:`exhausted_until`).

Every function takes what a server sent and returns ``None`` for anything it cannot
read (absent, empty, garbled, negative, not finite): a hint is advice, and bad
advice is ignored, never raised. Absurdly long waits are capped at
:data:`~retrysafe.timing.MAX_RETRY_AFTER`, like ``Retry-After``.
"""

from __future__ import annotations

import math
import re
from typing import Final

import httpx

from retrysafe.timing import MAX_RETRY_AFTER, parse_retry_after

__all__ = [
    "EPOCH_MILLISECONDS_FROM",
    "EPOCH_SECONDS_FROM",
    "RATE_LIMIT_HEADERS",
    "RateLimitAnnouncement",
    "announced_limit",
    "exhausted_until",
    "parse_reset",
    "parse_retry_after_ms",
    "parse_should_retry",
    "retry_after_hint",
    "server_says_retry",
]

_WHITESPACE: Final = " \t\r\n"
#: A non-negative decimal: digits with an optional fraction, or a bare fraction.
_DECIMAL = r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+"  # (compiled on first use, by re's cache)
#: More integer digits than this is past the cap whatever the unit (1e15 s).
_MAX_DIGITS: Final = 16
#: A reset at or above this reads as a Unix timestamp in seconds (2001-09-09), below it
#: as delta-seconds: no rate-limit window lasts 31 years, and no API resets before 2001.
EPOCH_SECONDS_FROM: Final = 1e9
#: A reset at or above this reads as a Unix timestamp in milliseconds (as seconds it
#: would be the year 33658).
EPOCH_MILLISECONDS_FROM: Final = 1e12


def _text(value: str | bytes | None) -> str | None:
    """The value as stripped text, or None when absent, empty or not ASCII."""
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    text = value.strip(_WHITESPACE)
    return text if text and text.isascii() else None


def _decimal(value: str | bytes | None) -> float | None:
    """A non-negative finite decimal (``"1500"``, ``"1500.5"``, ``".5"``), else None.

    No sign, exponent, underscore, ``inf`` or ``nan``: what a server means by a
    number of milliseconds or seconds, not everything Python's ``float()`` takes.
    """
    text = _text(value)
    if text is None or re.fullmatch(_DECIMAL, text) is None:
        return None
    whole = text.partition(".")[0].lstrip("0")
    if len(whole) > _MAX_DIGITS:
        return math.inf  # the callers cap it
    return float(text)


def parse_retry_after_ms(value: str | bytes | None) -> float | None:
    """Read a ``retry-after-ms`` header value (milliseconds) as seconds to wait.

    The header the openai and anthropic SDKs send and honour. Its value is a
    non-negative decimal number of milliseconds, fraction allowed (``"1500"``,
    ``"1500.5"``), surrounding whitespace ignored. Negative, signed, exponent,
    ``inf``/``nan``, empty or garbled values give ``None``; a huge one gives
    :data:`~retrysafe.timing.MAX_RETRY_AFTER`.
    """
    millis = _decimal(value)
    if millis is None:
        return None
    return min(millis / 1000.0, MAX_RETRY_AFTER)


def retry_after_hint(response: httpx.Response, now: float) -> float | None:
    """The server's wait hint in seconds: ``retry-after-ms`` when usable, else ``Retry-After``.

    ``retry-after-ms`` is the more precise of the two, so it wins when both are
    present; an unusable one falls back to ``Retry-After`` (delta-seconds or an
    HTTP-date, read against ``now``, wall-clock epoch seconds). None when neither
    is usable.

    A ``Retry-After`` of decimal seconds (``1.5``) is not HTTP's (which has whole
    seconds only, and :func:`~retrysafe.timing.parse_retry_after` keeps to it), but
    servers send it and the openai SDK honours it: read as no hint, the call would
    retry on its backoff, before the server's time. So it is waited out as given.

    Two ``Retry-After`` headers (a proxy's and the application's) reach the caller
    joined, as httpx joins a repeated header: ``2, 3``. Each asks for its wait, so the
    longest is waited out (read as no hint, the retry went on the backoff, before
    either). Only numbers are taken apart so: an HTTP-date holds a comma of its own.
    """
    headers = response.headers
    hint = parse_retry_after_ms(headers.get("retry-after-ms"))
    if hint is not None:
        return hint
    value = headers.get("retry-after")
    hint = parse_retry_after(value, now=now)
    if hint is None and value is not None:
        seconds = _decimal(value)
        if seconds is None and "," in value:
            waits = [_decimal(piece) for piece in value.split(",")]
            seconds = None if None in waits else max(w for w in waits if w is not None)
        if seconds is not None:
            return min(seconds, MAX_RETRY_AFTER)
    return hint


def parse_should_retry(value: str | bytes | None) -> bool | None:
    """Read an ``x-should-retry`` or ``Stripe-Should-Retry`` value: ``true`` or ``false``.

    Case-insensitive, surrounding whitespace ignored. Anything else (``1``,
    ``yes``, empty) is no hint: ``None``.
    """
    text = _text(value)
    if text is None:
        return None
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None


def server_says_retry(response: httpx.Response) -> bool | None:
    """Whether the server says to retry: ``x-should-retry`` / ``Stripe-Should-Retry``.

    ``x-should-retry`` is openai's and anthropic's, ``Stripe-Should-Retry``
    Stripe's; both read as :func:`parse_should_retry`. Should both be present and
    disagree, ``False`` wins: a repeat the server may not want is the costlier
    mistake. None when neither is usable.
    """
    headers = response.headers
    answers = (
        parse_should_retry(headers.get("x-should-retry")),
        parse_should_retry(headers.get("stripe-should-retry")),
    )
    if False in answers:
        return False
    if True in answers:
        return True
    return None


def parse_reset(value: str | bytes | None, now: float) -> float | None:
    """Read a ``RateLimit-Reset`` / ``X-RateLimit-Reset`` value as seconds from ``now``.

    A non-negative decimal, read by magnitude, since servers disagree on the unit:
    below 1e9 it is delta-seconds (the IETF draft; Reddit, many gateways); from 1e9
    it is a Unix timestamp in seconds (GitHub; Discord adds a fraction); from
    1e12 a Unix timestamp in milliseconds. A timestamp is read against ``now``
    (wall-clock epoch seconds); one already past gives ``0.0``. Garbled, negative
    or empty values give ``None``; huge ones are capped at
    :data:`~retrysafe.timing.MAX_RETRY_AFTER`.
    """
    number = _decimal(value)
    if number is None:
        return None
    if number < EPOCH_SECONDS_FROM:
        return number
    if not math.isfinite(now):
        return None
    moment = number / 1000.0 if number >= EPOCH_MILLISECONDS_FROM else number
    return min(max(0.0, moment - now), MAX_RETRY_AFTER)


# -- rate-limit announcements ----------------------------------------------------------

_IETF: Final = b"ratelimit"
_IETF_POLICY: Final = b"ratelimit-policy"
_DRAFT_REMAINING: Final = b"ratelimit-remaining"
_DRAFT_RESET: Final = b"ratelimit-reset"
_X_REMAINING: Final = b"x-ratelimit-remaining"
_X_RESET: Final = b"x-ratelimit-reset"
#: Header names (lower-cased bytes, as httpx keeps them) that may announce a limit.
RATE_LIMIT_HEADERS: Final = frozenset(
    {_IETF, _IETF_POLICY, _DRAFT_REMAINING, _DRAFT_RESET, _X_REMAINING, _X_RESET}
)
_INTEGER = r"[0-9]{1,15}"  # (compiled on first use, by re's cache)


class RateLimitAnnouncement:
    """A server's word that the quota is used up, with what it said about the reset.

    Made by :func:`announced_limit` only when some form says 0 remaining; the
    wait itself needs the wall clock (:meth:`seconds`), read only then.
    """

    __slots__ = ("resets",)

    def __init__(self, resets: tuple[str | float, ...]) -> None:
        #: Per exhausted form: a reset value still to read (text), or seconds known.
        self.resets = resets

    def seconds(self, now: float) -> float | None:
        """Seconds until the quota resets (the longest of the exhausted forms); None
        when no exhausted form gives a usable reset."""
        waits = [
            reset if isinstance(reset, float) else parse_reset(reset, now) for reset in self.resets
        ]
        known = [wait for wait in waits if wait is not None]
        if not known:
            return None
        return min(max(known), MAX_RETRY_AFTER)

    def __repr__(self) -> str:
        return f"RateLimitAnnouncement(resets={self.resets!r})"


def _fields(entries: list[tuple[bytes, bytes, bytes]]) -> dict[bytes, str]:
    """The rate-limit headers among ``entries`` by lower-cased name, repeats joined by
    ``", "`` (as ``Headers.get`` joins them)."""
    found: dict[bytes, str] = {}
    for _, name, value in entries:
        if name in RATE_LIMIT_HEADERS:
            text = value.decode("latin-1")
            found[name] = f"{found[name]}, {text}" if name in found else text
    return found


def announced_limit(response: httpx.Response) -> RateLimitAnnouncement | None:
    """The response's announcement that the rate limit is used up, or None.

    None when it has no rate-limit header (checked in one cheap pass), or when
    every form it sends says something remains, or is garbled. Forms read:

    - IETF ``RateLimit`` (draft-ietf-httpapi-ratelimit-headers-08 and later), a
      list of policies: ``RateLimit: "default";r=0;t=10``. ``r`` is the remaining
      quota, ``t`` the seconds until it resets; an item with ``r=0`` and no ``t``
      waits out its policy's window ``w`` from ``RateLimit-Policy:
      "default";q=100;w=60``. The intermediate drafts' dictionary form,
      ``RateLimit: limit=100, remaining=0, reset=10``, is read too.
    - ``RateLimit-Remaining: 0`` with ``RateLimit-Reset: 10`` (drafts up to -06).
    - ``X-RateLimit-Remaining: 0`` with ``X-RateLimit-Reset`` (GitHub and others).

    Both reset headers are read by :func:`parse_reset` (delta-seconds, or a Unix
    timestamp by magnitude). A remaining count reads as exhausted only when it is
    exactly the integer 0 (whitespace allowed); a form that says 0 without a usable
    reset counts as no wait.
    """
    # This runs for every response, successes included: one pass over the lower-cased
    # names (no decoding of other headers) settles the usual case, no rate-limit header.
    # (httpx's (raw, lower-cased, value) triples: private, like request_facts reads them;
    # the pin in pyproject keeps them.)
    entries: list[tuple[bytes, bytes, bytes]] = response.headers._list
    names = RATE_LIMIT_HEADERS
    for _, name, _ in entries:
        if name in names:
            break
    else:
        return None
    found = _fields(entries)
    resets: list[str | float] = []
    ietf = found.get(_IETF)
    if ietf is not None:
        resets.extend(_ietf_resets(ietf, found.get(_IETF_POLICY)))
    for remaining, reset in ((_DRAFT_REMAINING, _DRAFT_RESET), (_X_REMAINING, _X_RESET)):
        count = found.get(remaining)
        if count is not None and count.strip(_WHITESPACE) == "0":
            reset_value = found.get(reset)
            if reset_value is not None:
                resets.append(reset_value)
    if not resets:
        return None
    return RateLimitAnnouncement(tuple(resets))


def exhausted_until(response: httpx.Response, now: float) -> float | None:
    """Seconds to wait because the server announced 0 remaining; None if it did not.

    ``now`` is wall-clock epoch seconds, for resets given as timestamps. None when
    no rate-limit header says 0 remaining, or none that does gives a usable reset;
    ``0.0`` when the announced reset has already passed. See :func:`announced_limit`
    for the forms read, and :func:`parse_reset` for the unit rule.
    """
    announcement = announced_limit(response)
    return None if announcement is None else announcement.seconds(now)


def _ietf_resets(field: str, policy_field: str | None) -> list[str | float]:
    """The resets of the exhausted policies of an IETF ``RateLimit`` field."""
    items = _structured_list(field)
    if items is None:
        return []
    if items and all(name in _DRAFT07_KEYS and "" in params for name, params in items):
        dictionary = {name: params[""] for name, params in items}
        # the intermediate drafts' dictionary: limit=100, remaining=0, reset=10
        if _integer(dictionary.get("remaining")) == 0:
            reset = _integer(dictionary.get("reset"))
            if reset is not None:
                return [float(reset)]
        return []
    windows: dict[str, int] = {}
    if policy_field is not None:
        for name, params in _structured_list(policy_field) or ():
            window = _integer(params.get("w"))
            if window is not None:
                windows[name] = window
    resets: list[str | float] = []
    for name, params in items:
        if _integer(params.get("r")) != 0:
            continue
        reset = _integer(params.get("t"))
        if reset is None:
            reset = windows.get(name)
        if reset is not None:
            resets.append(float(reset))
    return resets


_DRAFT07_KEYS = frozenset({"limit", "remaining", "reset"})


def _integer(value: str | None) -> int | None:
    """A structured-field Integer that is not negative, else None."""
    if value is None or re.fullmatch(_INTEGER, value) is None:
        return None
    return int(value)


def _structured_list(field: str) -> list[tuple[str, dict[str, str]]] | None:
    """A lenient reading of an RFC 9651 List of Items with parameters.

    Each member is ``(item, {param: value})``; a String item is unquoted, a token
    kept as is; a bare ``key=value`` member (a Dictionary, as in earlier drafts) reads as
    item ``key`` with its value under the parameter ``""``. None when the field
    cannot be split (an unterminated string). Values are kept as text.
    """
    members: list[tuple[str, dict[str, str]]] = []
    for member in _split_outside_quotes(field, ","):
        if member is None:
            return None
        parts = _split_outside_quotes(member, ";")
        if any(part is None for part in parts):
            return None
        texts = [part.strip(_WHITESPACE) for part in parts if part is not None]
        head = texts[0]
        if not head:
            continue  # an empty member: skip it, as lenient parsers do
        params: dict[str, str] = {}
        if head.startswith('"'):
            name = _unquote(head)
            if name is None:
                return None
        else:
            name, equals, value = head.partition("=")
            if equals:
                params[""] = _unquote(value.strip(_WHITESPACE)) or ""
            name = name.strip(_WHITESPACE)
        for text in texts[1:]:
            key, equals, value = text.partition("=")
            unquoted = _unquote(value.strip(_WHITESPACE)) if equals else "?1"
            params[key.strip(_WHITESPACE).lower()] = unquoted if unquoted is not None else ""
        members.append((name, params))
    return members


def _unquote(text: str) -> str | None:
    """The content of an sf-string (``"a\\"b"`` -> ``a"b``), the text itself when not
    quoted, or None for a quote left open."""
    if not text.startswith('"'):
        return text
    if len(text) < 2 or not text.endswith('"'):
        return None
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def _split_outside_quotes(text: str, separator: str) -> list[str | None]:
    """Split on ``separator`` where it is not inside a double-quoted string; a trailing
    None marks a string left open."""
    parts: list[str | None] = []
    start = 0
    quoted = False
    escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append(text[start:index])
            start = index + 1
    if quoted:
        parts.append(None)
        return parts
    parts.append(text[start:])
    return parts
