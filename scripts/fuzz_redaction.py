"""Fuzz retrysafe's redaction through its real code paths.

Each case makes a secret (letters, digits, ``/+=%&"\\`` and friends, spaces, non-ASCII) and
a secret name (header or query, in many casings and separators), sends it in a header,
the query or the URL's userinfo through a ``retrysafe.Client`` on ``httpx.MockTransport``
whose server echoes it back in a 400 body: raw, JSON-escaped (``\\/``, ``\\uXXXX``),
percent-encoded (upper- or lower-case hex, ``+`` for spaces) or HTML-escaped. Then no
form of the secret may appear in ``str(error)``, ``repr(error)``, ``error.url``,
``error.body``, the log records, ``redact_url`` or ``Redactor.for_request(...).scrub``.
Each case also checks an ordinary name (``keyword``, ``author``, ``monkey``...) is left
readable. Prints the count and the result; exits 1 on any leak or wrong name.

    .venv/bin/python scripts/fuzz_redaction.py --count 100000 --seed 1
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import random
import re
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.redact import Redactor, is_secret_name, redact_url

SECRET_WORDS = [
    "key", "api_key", "apikey", "token", "access_token", "auth", "authorization", "secret",
    "client_secret", "password", "passwd", "pwd", "pass", "passphrase", "sig", "signature",
    "jwt", "session", "session_id", "cookie", "credential", "amz_signature",
    "amz_security_token", "amz_credential", "goog_signature", "refresh_token", "token_count",
]  # fmt: skip
PUBLIC_WORDS = [
    "keyword", "author", "monkey", "passage", "signal", "sigma", "tokens", "keys", "page",
    "q", "sort", "authored_by", "password_policy_url_hint", "idempotency_key",
]  # fmt: skip
# "password_policy_url_hint" has a "password" segment: by the rule it IS secret. Listed here
# only to be filtered by the rule below; PUBLIC_WORDS keeps the names the rule calls public.
PUBLIC_WORDS = [word for word in PUBLIC_WORDS if word != "password_policy_url_hint"]
PREFIXES = ["", "x", "my", "client", "x_amz", "x_goog", "app", "v2"]
ALPHABET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    "/+=-_.~!$&'()*,;:@%\"\\<>?#[]{}| "
)
UNICODE = "éüßøЖж中文😀🔑"


def styled(words: list[str], rng: random.Random) -> str:
    """The words joined in one of the ways names are written."""
    style = rng.choice(["kebab", "snake", "dot", "camel", "pascal", "upper", "train"])
    if style == "kebab":
        return "-".join(words)
    if style == "snake":
        return "_".join(words)
    if style == "dot":
        return ".".join(words)
    if style == "camel":
        return words[0] + "".join(word.capitalize() for word in words[1:])
    if style == "pascal":
        return "".join(word.capitalize() for word in words)
    if style == "upper":
        return "_".join(words).upper()
    return "-".join(word.capitalize() for word in words)


def make_name(base: str, rng: random.Random) -> str:
    words = [word for word in [rng.choice(PREFIXES), *base.split("_")] if word]
    return styled(words, rng)


def make_secret(rng: random.Random, *, header: bool) -> str:
    core = "".join(rng.choice("abcdefghjkmnpqrstuvwxyz23456789") for _ in range(6))
    extra = ALPHABET + ("" if header else UNICODE)
    noise = [rng.choice(extra) for _ in range(rng.randint(2, 30))]
    at = rng.randint(0, len(noise))
    secret = "".join(noise[:at]) + core + "".join(noise[at:])
    return " ".join(secret.split()) if header else secret.strip() or core


ENCODINGS: dict[str, Callable[[str], str]] = {
    "raw": lambda s: s,
    "json": lambda s: json.dumps(s, ensure_ascii=False)[1:-1],
    "json_ascii": lambda s: json.dumps(s)[1:-1],
    "json_php": lambda s: json.dumps(s)[1:-1].replace("/", "\\/"),
    "json_all_u": lambda s: "".join(
        f"\\u{unit:04x}"
        for char in s
        for unit in (
            [ord(char)]
            if ord(char) <= 0xFFFF
            else [0xD800 + ((ord(char) - 0x10000) >> 10), 0xDC00 + (ord(char) & 0x3FF)]
        )
    ),
    "quote": lambda s: urllib.parse.quote(s, safe=""),
    "quote_plus_lower": lambda s: re.sub(
        r"%[0-9A-F]{2}", lambda m: m.group().lower(), urllib.parse.quote_plus(s)
    ),
    "html": lambda s: html.escape(s, quote=True),
}


@dataclass
class Tally:
    cases: int = 0
    texts: int = 0
    leaks: list[str] = field(default_factory=list)
    wrong_names: list[str] = field(default_factory=list)


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def forms(secret: str) -> set[str]:
    """Every written form of ``secret`` a leak check looks for."""
    return {encode(secret) for encode in ENCODINGS.values()} | {secret}


def run(count: int, seed: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    state: dict[str, str] = {}

    def echo(request: httpx.Request) -> httpx.Response:
        where, name, encoding = state["where"], state["name"], state["encoding"]
        if where == "header":
            value = request.headers[name]
        elif where == "query":
            value = request.url.params[name]
        elif where == "password":
            value = request.url.password or ""
        else:
            value = request.url.username
        encode = ENCODINGS[encoding]
        text = f"denied {encode(value)} for {encode(str(request.url))} and {encode(value)}"
        return httpx.Response(400, text='{"error": "' + text + '"}')

    capture = Capture()
    library_logger = logging.getLogger("retrysafe")
    library_logger.addHandler(capture)
    level = library_logger.level  # (given back after: a test suite runs this too)
    library_logger.setLevel(logging.DEBUG)
    client = retrysafe.Client(transport=httpx.MockTransport(echo), policy=RetryPolicy(attempts=1))
    try:
        for number in range(count):
            where = rng.choice(["header", "query", "password", "username"])
            secret = make_secret(rng, header=where == "header")
            name = make_name(rng.choice(SECRET_WORDS), rng)
            public = make_name(rng.choice(PUBLIC_WORDS), rng)
            public_value = f"visible{number}"
            state.update(where=where, name=name, encoding=rng.choice(list(ENCODINGS)))
            url = httpx.URL("https://api.test/v1", params={public: public_value})
            headers: dict[str, str] = {}
            if where == "header":
                prefix = rng.choice(["", "Bearer ", "Token "]) if "auth" in name.lower() else ""
                headers[name] = prefix + secret
            elif where == "query":
                url = url.copy_merge_params({name: secret})
            else:
                user = "user" if where == "password" else secret
                userinfo = urllib.parse.quote(user, safe="")
                if where == "password":
                    userinfo += ":" + urllib.parse.quote(secret, safe="")
                url = httpx.URL(str(url).replace("https://", f"https://{userinfo}@"))
            tally.cases += 1
            if not is_secret_name(name) and where in ("header", "query"):
                tally.wrong_names.append(f"secret name {name!r} not secret")
            if is_secret_name(public):
                tally.wrong_names.append(f"public name {public!r} hidden")
            capture.messages.clear()
            try:
                client.get(url, headers=headers)
            except retrysafe.ClientError as error:
                request = httpx.Request("GET", url, headers=headers)
                produced = [
                    str(error),
                    repr(error),
                    error.url,
                    json.dumps(error.body, ensure_ascii=False),
                    redact_url(url),
                    Redactor.for_request(request).scrub(
                        error.response.text if error.response is not None else ""
                    ),
                    *capture.messages,
                ]
                tally.texts += len(produced)
                shown = redact_url(url)
                if f"{public}={public_value}" not in urllib.parse.unquote_plus(shown):
                    tally.wrong_names.append(f"public parameter {public!r} hidden in {shown}")
                for text in produced:
                    for form in forms(secret):
                        if form in text:
                            tally.leaks.append(
                                f"{where} {name!r}={secret!r} via {state['encoding']}: "
                                f"{form!r} in {text[:160]!r}"
                            )
                            break
            else:
                tally.leaks.append(f"case {number}: the echo did not fail")
    finally:
        client.close()
        library_logger.removeHandler(capture)
        library_logger.setLevel(level)
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="cases (100000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    tally = run(args.count, args.seed)
    elapsed = time.perf_counter() - started
    print(
        f"fuzz_redaction: {tally.cases} cases, {tally.texts} texts checked, "
        f"{len(tally.leaks)} leaks, {len(tally.wrong_names)} wrong names "
        f"(seed {args.seed}, {elapsed:.1f} s)"
    )
    for problem in (tally.leaks + tally.wrong_names)[:20]:
        print("  " + problem)
    return 1 if tally.leaks or tally.wrong_names else 0


if __name__ == "__main__":
    sys.exit(main())
