"""``retrysafe get URL`` and ``retrysafe request METHOD URL``: curl with retrysafe's policy.

Each retry is reported on stderr as it happens; the final body goes to stdout, or the
typed error to stderr with its family's exit code. Input is checked before anything is
sent, so a typo costs one clear line, never a request.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
import re
import sys
from typing import Any, TextIO

import httpx

from retrysafe import ApiError, CallReport, Client, EventHook, RetryEvent, RetryPolicy
from retrysafe.classify import NEVER_SENT_OUTCOMES
from retrysafe.cli.exit_codes import EXIT_OK, UsageError, exit_code_for
from retrysafe.cli.terminal import Style, safe_line, wants_color
from retrysafe.client_options import key_fits_a_header
from retrysafe.redact import redact_url_text
from retrysafe.request_facts import new_idempotency_key

__all__ = [
    "RequestSpec",
    "add_request_options",
    "build_policy",
    "parse_header",
    "parse_method",
    "parse_url",
    "request_spec",
    "run_request",
]

# RFC 9110 token characters: what a header name or a method may be made of.
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
#: Control characters, which RFC 9110 does not allow in a field value (a tab is allowed).
_FORBIDDEN_IN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

#: Command-line flag -> RetryPolicy field, for the flags that set the policy.
_POLICY_FLAGS = {
    "attempts": "attempts",
    "timeout": "attempt_timeout",
    "deadline": "deadline",
    "backoff_base": "backoff_base",
    "backoff_cap": "backoff_cap",
    "max_retry_after": "max_retry_after",
    "min_attempt_time": "min_attempt_time",
}


def add_request_options(parser: argparse.ArgumentParser) -> None:
    """The options ``get`` and ``request`` share: policy, headers, body, key, output."""
    policy = parser.add_argument_group("retry policy (defaults: RetryPolicy's)")
    policy.add_argument("--attempts", type=int, metavar="N", help="most attempts, first included")
    policy.add_argument(
        "--timeout", type=float, metavar="S", help="seconds per attempt (inf: no limit)"
    )
    policy.add_argument(
        "--deadline", type=float, metavar="S", help="seconds for the whole call (inf: no limit)"
    )
    policy.add_argument("--backoff-base", type=float, metavar="S", help="first backoff ceiling")
    policy.add_argument("--backoff-cap", type=float, metavar="S", help="largest backoff ceiling")
    policy.add_argument(
        "--min-attempt-time",
        type=float,
        metavar="S",
        help="least time left before the deadline for an attempt to start (0.5)",
    )
    policy.add_argument(
        "--max-retry-after",
        type=float,
        metavar="S",
        help="give up at once when the server asks to wait longer",
    )
    sent = parser.add_argument_group("what to send")
    sent.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="add a header (repeatable)",
    )
    body = sent.add_mutually_exclusive_group()
    body.add_argument(
        "-d", "--data", metavar="BODY", help="request body: text, @FILE, or @- for stdin"
    )
    body.add_argument("--json", metavar="JSON", help="JSON request body (sets Content-Type)")
    sent.add_argument(
        "--idempotency-key",
        metavar="KEY|auto",
        help="send this Idempotency-Key on every attempt ('auto': make one), "
        "which makes a POST safe to retry",
    )
    shown = parser.add_argument_group("output")
    shown.add_argument("-L", "--location", action="store_true", help="follow redirects")
    shown.add_argument(
        "-q", "--quiet", action="store_true", help="no retry log or summary on stderr"
    )


# -- checking input ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RequestSpec:
    """A request checked and ready to send."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    content: bytes | None
    json: Any
    has_json: bool
    #: The key sent with every attempt (``auto``'s made here, so the command can name it
    #: whatever ends the call), or None.
    idempotency_key: str | None
    policy: RetryPolicy
    follow_redirects: bool


def parse_url(text: str) -> str:
    """``text`` if it is an absolute http(s) URL with a host."""
    shown = redact_url_text(text)  # userinfo and secret parameters never reach a message
    if any(character.isspace() or not character.isprintable() for character in text):
        raise UsageError(f"invalid URL {shown!r}: percent-encode spaces and control characters")
    try:
        url = httpx.URL(text)
        host = url.host
    except (httpx.InvalidURL, ValueError) as exc:  # (ValueError: idna's, for a bad A-label)
        raise UsageError(f"invalid URL {shown!r}: {exc}") from None
    if url.scheme not in ("http", "https") or not host:
        raise UsageError(f"invalid URL {shown!r}: it needs http:// or https:// and a host")
    if "%" in host:  # httpx quotes what cannot be in a host, e.g. a '[' left unclosed
        raise UsageError(f"invalid URL {shown!r}: the host is not a name or an IP address")
    if url.port is not None and not 0 < url.port <= 65535:
        raise UsageError(f"invalid URL {shown!r}: the port must be 1 to 65535")
    return text


def parse_method(text: str) -> str:
    """An HTTP method name, upper-cased."""
    if not _TOKEN.match(text):
        raise UsageError(f"invalid method {text!r}: expected a name such as GET or POST")
    return text.upper()


def parse_header(text: str) -> tuple[str, str]:
    """``'Name: value'`` as ``("Name", "value")``.

    A malformed header is named in the error by its first word only: the rest may be a
    secret (``-H 'Authorization Bearer sk_live_...'``, the colon forgotten).
    """
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not _TOKEN.match(name):
        words = (name if colon else text).split()
        first = words[0] if words and (len(words) > 1 or colon) else ""
        shown = f" {first + ' ...'!r}" if first and _TOKEN.match(first) else ""
        raise UsageError(
            f"bad header{shown}: expected 'Name: value' (a token name, then a colon); "
            "the rest is not shown, in case it is a secret"
        )
    if _FORBIDDEN_IN_VALUE.search(value):
        raise UsageError(
            f"bad header {name!r}: its value may not contain line breaks or other control "
            "characters (a tab is fine)"
        )
    if not value.isascii():  # (httpx sends header text as ASCII, as the HTTP RFCs advise)
        raise UsageError(
            f"bad header {name!r}: its value must be ASCII text (percent-encode the rest, "
            "or use the RFC 8187 form the API documents)"
        )
    return name, value


def read_data(text: str, stdin: TextIO) -> bytes:
    """The ``--data`` body: the text itself, a file's bytes (``@FILE``) or stdin (``@-``)."""
    if not text.startswith("@"):
        return text.encode()
    source = text[1:]
    if source == "-":
        return stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
    try:
        with open(source, "rb") as file:
            return file.read()
    except OSError as exc:
        raise UsageError(f"cannot read --data file {source!r}: {exc.strerror}") from None


def parse_json_body(text: str) -> Any:
    """The ``--json`` body, parsed (so a typo fails here, not on the server)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--json is not valid JSON: {exc}") from None


def build_policy(args: argparse.Namespace) -> RetryPolicy:
    """A RetryPolicy from the flags given; RetryPolicy's defaults for the rest."""
    values = {
        field: getattr(args, flag)
        for flag, field in _POLICY_FLAGS.items()
        if getattr(args, flag) is not None
    }
    try:
        return RetryPolicy(**values)
    except ValueError as exc:
        least = values.get("min_attempt_time", RetryPolicy().min_attempt_time)
        if str(exc).startswith("RetryPolicy.min_attempt_time must be <= deadline"):
            # (RetryPolicy's own advice names its fields; here they are flags)
            if "deadline" not in values:  # (the default deadline: the flag raised past it)
                deadline = RetryPolicy().deadline
                example = (
                    f", e.g. --deadline {2 * least:g} --min-attempt-time {least:g}"
                    if math.isfinite(2 * least)
                    else ""
                )
                raise UsageError(
                    f"--min-attempt-time {least:g} is longer than the deadline ({deadline:g} "
                    f"s by default: --deadline): give a longer --deadline too{example}"
                ) from None
            deadline = values["deadline"]
            raise UsageError(
                f"--deadline {deadline:g} is shorter than --min-attempt-time ({least:g} s, the "
                "least time left for an attempt to start): lower it too, e.g. "
                f"--deadline {deadline:g} --min-attempt-time {deadline / 2:g}"
            ) from None
        message = str(exc)
        for flag, field in _POLICY_FLAGS.items():  # (RetryPolicy's fields, as the flags)
            option = f"--{flag.replace('_', '-')}"
            message = message.replace(f"RetryPolicy.{field}", option)
            if "_" in field:  # (a plain word such as "deadline" may be prose)
                message = re.sub(rf"\b{field}\b", option, message)
        raise UsageError(message) from None


def _idempotency_key(text: str | None) -> str | None:
    if text is None:
        return None
    if not text.strip():
        raise UsageError("--idempotency-key needs a key, or 'auto' to make one")
    if not key_fits_a_header(text):
        raise UsageError(
            f"--idempotency-key must be printable ASCII with no space at either end (it is "
            f"sent as a header), got {text!r}; or 'auto' to make one"
        )
    return new_idempotency_key() if text == "auto" else text


def request_spec(args: argparse.Namespace, stdin: TextIO) -> RequestSpec:
    """Check every input of a ``get``/``request`` command; raises :class:`UsageError`."""
    method = parse_method(args.method)
    url = parse_url(args.url)
    headers = tuple(parse_header(header) for header in args.header)
    policy = build_policy(args)
    idempotency_key = _idempotency_key(args.idempotency_key)
    # One key per request: one would replace the other (or, as two headers, be sent
    # joined, "a, b"), and a write resent under the key its operator typed would go out
    # under another, and be done twice. The same key again is one key.
    keys = set(_header_keys(headers))
    if idempotency_key is not None:
        keys.add(idempotency_key)
    if len(keys) > 1:
        raise UsageError(
            "give the idempotency key once: --idempotency-key or one -H 'Idempotency-Key: "
            "...', not two different ones"
        )
    return RequestSpec(
        method=method,
        url=url,
        headers=headers,
        content=None if args.data is None else read_data(args.data, stdin),
        json=None if args.json is None else parse_json_body(args.json),
        has_json=args.json is not None,
        idempotency_key=idempotency_key,
        policy=policy,
        follow_redirects=args.location,
    )


# -- sending and reporting --------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _retry_printer(stderr: TextIO, style: Style) -> EventHook:
    """A hook that prints one line per retry, as it happens (the URL is already redacted)."""

    def hook(event: RetryEvent) -> None:
        if event.kind != "retry":
            return
        got = f"HTTP {event.status} {event.outcome}" if event.status is not None else event.outcome
        line = f"attempt {event.attempt} got {got}; retrying in {_seconds(event.wait)}"
        stderr.write(style.paint(safe_line(f"retrysafe: {line}"), "yellow") + "\n")
        stderr.flush()

    return hook


class _MayHaveGoneOut:
    """A hook that learns whether any attempt of the call may have reached the server:
    one that ended with anything but a never-sent outcome (a refused or timed-out
    connect, a full pool), or one cut in flight by the interrupt (``interrupted``)."""

    def __init__(self) -> None:
        self.maybe = False

    def __call__(self, event: RetryEvent) -> None:
        if event.kind == "attempt" and event.outcome not in NEVER_SENT_OUTCOMES:
            self.maybe = True


def _send(spec: RequestSpec, hooks: list[EventHook]) -> httpx.Response:
    """Send the request through retrysafe; raises its ApiError on a final failure."""
    extra: dict[str, Any] = {}
    if spec.content is not None:
        extra["content"] = spec.content
    if spec.has_json:
        extra["json"] = spec.json
    # timeout=None: the policy's attempt timeout alone bounds each attempt.
    with Client(
        policy=spec.policy, hooks=hooks, timeout=None, follow_redirects=spec.follow_redirects
    ) as client:
        return client.request(
            spec.method,
            spec.url,
            headers=list(spec.headers),
            idempotency_key=spec.idempotency_key,
            **extra,
        )


def _header_keys(headers: tuple[tuple[str, str], ...]) -> list[str]:
    """The idempotency keys the ``-H`` headers give (blank ones are none)."""
    return [value for name, value in headers if name.lower() == "idempotency-key" and value]


def _key_sent(spec: RequestSpec) -> str | None:
    """The idempotency key the request went with: the flag's, or its header's (request_spec
    let through one at most)."""
    if spec.idempotency_key is not None:
        return spec.idempotency_key
    return next(iter(_header_keys(spec.headers)), None)


def _write_body(response: httpx.Response, stdout: TextIO) -> None:
    content = response.content
    stdout.flush()
    if hasattr(stdout, "buffer"):
        stdout.buffer.write(content)
        stdout.buffer.flush()
    else:  # a text-only stream (an embedding program's): decode as the response says
        stdout.write(response.text)
    if content and not content.endswith(b"\n") and stdout.isatty():
        stdout.write("\n")
    stdout.flush()


def _summary(response: httpx.Response) -> str:
    report = response.extensions.get("retrysafe")
    status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    if not isinstance(report, CallReport):
        return status
    plural = "" if report.attempts == 1 else "s"
    return f"{status} after {report.attempts} attempt{plural} in {_seconds(report.elapsed)}"


def _error_line(error: ApiError) -> str:
    status = "" if error.status is None else f", HTTP {error.status}"
    # (the body's start is in the message already: there is no .body to see here)
    message = str(error).replace(" (see .body)", "")
    line = f"{type(error).__name__} [{error.reason}{status}]: {message}"
    if error.reason == "unsafe_to_repeat":
        # The library's advice names its Python argument; say it the command's way too.
        line += " (on the command line: --idempotency-key auto)"
    return line


def run_request(args: argparse.Namespace) -> int:
    """Run ``get``/``request``: 0 with the body on stdout, or the error family's exit code."""
    stdout, stderr = sys.stdout, sys.stderr
    style = Style(wants_color(stderr, disabled=args.no_color))
    spec = request_spec(args, sys.stdin)
    gone_out = _MayHaveGoneOut()
    hooks: list[EventHook] = [gone_out] if args.quiet else [gone_out, _retry_printer(stderr, style)]
    try:
        response = _send(spec, hooks)
    except KeyboardInterrupt:
        key = _key_sent(spec)
        if key is not None and gone_out.maybe:
            # (no error to carry the hint the other endings give: the write may be done)
            stderr.write(
                safe_line(
                    "retrysafe: the request may have gone out; to finish it safely, resend "
                    f"it under the same key: --idempotency-key {key}"
                )
                + "\n"
            )
        elif key is not None:
            # (interrupted in a wait, every attempt before refused at connect: nothing sent)
            stderr.write("retrysafe: the request was not sent\n")
        raise
    except ApiError as error:
        stderr.write(style.paint(safe_line(f"retrysafe: {_error_line(error)}"), "red") + "\n")
        return exit_code_for(error)
    except httpx.InvalidURL as exc:
        raise UsageError(f"invalid URL {redact_url_text(spec.url)!r}: {exc}") from None
    _write_body(response, stdout)
    if not args.quiet:
        if _left_a_line_open(response.content, stdout, stderr):
            stderr.write("\n")  # (the summary is not glued to the body's last line)
        stderr.write(style.paint(safe_line(f"retrysafe: {_summary(response)}"), "dim") + "\n")
    return EXIT_OK


def _left_a_line_open(content: bytes, stdout: TextIO, stderr: TextIO) -> bool:
    """Whether the body ended mid-line where stderr's next line would continue it: both
    streams go to one pipe or file (``2>&1``). A terminal got its newline on stdout, and
    separate destinations keep the body's bytes as they came."""
    if not content or content.endswith(b"\n") or stdout.isatty():
        return False
    try:
        out, err = os.fstat(stdout.fileno()), os.fstat(stderr.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # (a stream with no file behind it)
        return stdout is stderr
    return (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)
