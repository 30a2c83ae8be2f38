"""The ``retrysafe`` command never prints a secret it was given, nor a server's control
characters: every usage error, every error line."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from retrysafe.cli import main
from retrysafe.cli.argv_secrets import argv_secrets
from retrysafe.cli.exit_codes import EXIT_USAGE

SECRET = "sk_live_51HxQ9CLIsecret"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


BAD_INPUT = {
    "header_without_colon": ["get", "https://api.test/", "-H", f"Authorization Bearer {SECRET}"],
    "header_without_colon_attached": ["get", "https://api.test/", f"-HAuthorization {SECRET}"],
    "lone_token_as_header": ["get", "https://api.test/", "--header", SECRET],
    "header_with_spaced_name": ["get", "https://api.test/", "-H", f"X-Api Key: {SECRET}"],
    "refused_url_password": ["get", f"ftp://user:{SECRET}@files.test/x"],
    "refused_url_api_key": ["get", f"ftp://files.test/x?api_key={SECRET}&page=2"],
    "url_with_space_and_token": ["get", f"https://api.test/x?access_token={SECRET} &q=1"],
    "unparsable_url_password": ["get", f"https://user:{SECRET}@api.test:12a/"],
    "scheme_less_url_token": ["get", f"{SECRET}@api.test/x"],
    "url_password_with_a_hash": ["get", f"https://user:pa#ss{SECRET}@api.test/x"],
    "url_password_with_a_question_mark": ["get", f"https://user:pa?ss{SECRET}@api.test/x"],
    "url_password_with_a_slash": ["get", f"https://user:pa/ss{SECRET}@api.test:12a/x"],
    # httpx reads the password up to the "?", "#" or "/" as a port, and quotes it
    "url_password_before_a_question_mark": ["get", f"http://user:{SECRET}?x@127.0.0.1/"],
    "url_password_before_a_hash": ["get", f"http://user:{SECRET}#x@127.0.0.1/"],
    "url_password_before_a_slash": ["get", f"http://user:{SECRET}/x@127.0.0.1/"],
    # ...and a password holding both: the userinfo still ends at its "@"
    "url_password_with_a_slash_then_a_question_mark": [
        "get",
        f"http://user:{SECRET}/x?yz@127.0.0.1:9/a",
    ],
    "url_password_with_a_hash_then_a_slash": ["get", f"http://user:{SECRET}#w/x@127.0.0.1:9/a"],
    "bad_policy_after_secret_header": [
        "get",
        "https://api.test/",
        "-H",
        f"Authorization: Bearer {SECRET}",
        "--attempts",
        "0",
    ],
    "argparse_error_with_secret_header": [
        "get",
        "https://api.test/",
        "-H",
        f"X-Api-Key: {SECRET}",
        "--attempts",
        "many",
    ],
}


@pytest.mark.parametrize("argv", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_a_usage_error_never_prints_the_secret_it_was_given(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, output = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert output.strip(), "the usage error says something"
    assert SECRET not in output
    assert "51HxQ9" not in output, "not even a part of it"


def test_a_usage_error_still_names_what_was_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    _, output = run(capsys, "get", "https://api.test/", "-H", f"Authorization Bearer {SECRET}")
    assert "Authorization" in output
    assert "Name: value" in output
    _, output = run(capsys, "get", f"ftp://files.test/x?api_key={SECRET}&page=2")
    assert "ftp://files.test/x?api_key=[REDACTED]&page=2" in output


def test_a_servers_control_characters_never_reach_the_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hostile = "denied\x1b]0;owned\x07\x1b[2J\x9b1m\u202egnp.exe\x00 end"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, text=hostile)

    real_client = httpx.Client.__init__

    def mock_client(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["transport"] = httpx.MockTransport(handler)
        real_client(self, *args, **kwargs)

    monkeypatch.setattr(httpx.Client, "__init__", mock_client)
    code, output = run(capsys, "get", "https://api.test/", "--attempts", "1")
    assert code != 0
    assert "denied" in output
    bad = [c for c in output if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0]
    assert bad == [], f"control characters {bad!r} in {output!r}"
    assert "\u202e" not in output


def test_a_username_beside_a_password_is_a_name_not_a_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the password is hidden: scrubbed from every text, the username ``user`` would
    hide ``/users/1`` and ``User-Agent`` in what the server answered."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"path": request.url.path, "ua": "User-Agent"})

    real_client = httpx.Client.__init__

    def mock_client(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["transport"] = httpx.MockTransport(handler)
        real_client(self, *args, **kwargs)

    monkeypatch.setattr(httpx.Client, "__init__", mock_client)
    code, output = run(capsys, "get", f"https://user:{SECRET}@api.test/users/1")
    assert code != 0
    assert "/users/1" in output
    assert "User-Agent" in output
    assert "51HxQ9" not in output


def test_a_lone_username_is_a_token_and_hidden_everywhere() -> None:
    redactor = argv_secrets(["get", f"https://{SECRET}@api.test/x"])
    assert redactor.scrub(f"unknown key {SECRET}") == "unknown key [REDACTED]"
    redactor = argv_secrets(["get", f"https://{SECRET}:@api.test/x"])  # (Stripe's form)
    assert redactor.scrub(f"unknown key {SECRET}") == "unknown key [REDACTED]"


@pytest.mark.parametrize(
    "url",
    [
        "https://api.test?email=a@b.com&page=2",
        "https://api.test#contact@team",
        "https://api.test:8443?email=a@b.com",
        "https://[::1]?email=a@b.com",  # (an IPv6 address's colons are no password's)
    ],
)
def test_an_at_sign_in_a_query_or_fragment_is_not_taken_for_userinfo(url: str) -> None:
    from retrysafe.redact import redact_url_text

    assert redact_url_text(url) == url


#: Every way argparse takes a header flag, each carrying the secret in a header value.
HEADER_FLAG_SPELLINGS = [
    ["-H", f"X-Api-Key: Bearer {SECRET}"],
    ["--header", f"X-Api-Key: Bearer {SECRET}"],
    [f"--header=X-Api-Key: Bearer {SECRET}"],
    [f"-HX-Api-Key: Bearer {SECRET}"],
]
HEADER_FLAG_IDS = ["-H VALUE", "--header VALUE", "--header=VALUE", "-HVALUE"]


@pytest.mark.parametrize("flag", HEADER_FLAG_SPELLINGS, ids=HEADER_FLAG_IDS)
def test_a_secret_header_echoed_in_an_error_reply_is_not_printed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, flag: list[str]
) -> None:
    """However the header flag is spelled, its secret value, and each word of it, is
    scrubbed from what the command prints, even when the server's error reply repeats it."""

    def handler(request: httpx.Request) -> httpx.Response:
        token = request.headers["x-api-key"].split()[-1]
        return httpx.Response(401, text=f"bad token {token}")

    real_client = httpx.Client.__init__

    def mock_client(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["transport"] = httpx.MockTransport(handler)
        real_client(self, *args, **kwargs)

    monkeypatch.setattr(httpx.Client, "__init__", mock_client)
    code, output = run(capsys, "get", "https://api.test/", "--attempts", "1", *flag)

    assert code != 0
    assert "bad token" in output
    assert SECRET not in output


@pytest.mark.parametrize("flag", HEADER_FLAG_SPELLINGS, ids=HEADER_FLAG_IDS)
def test_every_spelling_of_a_header_flag_marks_its_value_and_each_word_secret(
    flag: list[str],
) -> None:
    redactor = argv_secrets(["get", "https://api.test/", *flag])

    assert SECRET not in redactor.scrub(f"Bearer {SECRET}")
    assert SECRET not in redactor.scrub(f"unknown token {SECRET}.")


def test_a_secret_path_parameter_of_the_url_is_scrubbed_from_what_is_printed() -> None:
    """The URL shows ``;jsessionid=[REDACTED]``; a reply echoing the path must not show it
    either (trial66)."""
    redactor = argv_secrets(["get", f"https://api.test/cart;jsessionid={SECRET}/items"])

    assert SECRET not in redactor.scrub(f"no route /cart;jsessionid={SECRET}/items")
