"""The ``retrysafe`` command: ``get``/``request`` against a real chaos server, input checks,
exit codes, the missing-extra message, and ``chaos`` serving in a real subprocess."""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe.cli import build_parser, main
from retrysafe.cli.exit_codes import ERROR_EXIT_CODES, EXIT_USAGE, exit_code_for

CONSOLE_SCRIPT = Path(sys.executable).parent / "retrysafe"
# Small waits so a retried call takes milliseconds.
FAST = ["--backoff-base", "0.01", "--backoff-cap", "0.05"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _ctrl_c_as_a_terminal_sends_it() -> None:
    """In a child: SIGINT at its default, so Python turns it into KeyboardInterrupt even
    when this run started with it ignored (a shell's background job, nohup)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def code_of(error_class: type[retrysafe.ApiError]) -> int:
    return next(code for family, code, _ in ERROR_EXIT_CODES if family is error_class)


# -- the command itself ------------------------------------------------------------------------


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert (code, out.strip()) == (0, f"retrysafe {retrysafe.__version__}")


def test_help_documents_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for family, number, _ in ERROR_EXIT_CODES:
        assert re.search(rf"^\s+{number}\s+{family.__name__}:", out, re.MULTILINE)


def test_get_help_documents_the_exit_codes_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "get", "--help")
    assert code == 0
    assert "ClientError" in out
    assert "--idempotency-key" in out


def test_each_error_family_has_its_own_exit_code() -> None:
    codes = [code for _, code, _ in ERROR_EXIT_CODES]
    assert len(set(codes)) == len(codes)
    assert not {0, 1, 2} & set(codes)


@pytest.mark.parametrize(
    ("error_class", "family"),
    [
        (retrysafe.BudgetExhausted, retrysafe.Refused),
        (retrysafe.CooldownActive, retrysafe.Refused),
        (retrysafe.PacingDelayed, retrysafe.Refused),
        (retrysafe.CircuitOpen, retrysafe.CircuitOpen),
    ],
)
def test_a_local_refusal_exits_with_its_familys_code_not_the_demo_failure_code(
    error_class: type[retrysafe.ApiError], family: type[retrysafe.ApiError]
) -> None:
    error = error_class.__new__(error_class)  # only its class is read
    assert exit_code_for(error) == code_of(family)
    assert code_of(family) != 1


def test_an_unknown_command_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "frobnicate")
    assert code == EXIT_USAGE
    assert len(err.strip().splitlines()) == 1


def test_demo_without_the_cli_extra_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    code, out, err = run(capsys, "demo")
    assert code == EXIT_USAGE
    assert out == ""
    assert err.strip().splitlines() == [
        "retrysafe demo: 'retrysafe demo' needs the cli extra (uvicorn is missing): "
        "pip install 'retrysafe[cli]'"
    ]


def test_chaos_without_the_cli_extra_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "starlette", None)
    code, _, err = run(capsys, "chaos")
    assert code == EXIT_USAGE
    assert "pip install 'retrysafe[cli]'" in err
    assert "Traceback" not in err


# -- get and request -----------------------------------------------------------------------------


def test_python_dash_m_runs_the_command_where_its_script_is_not_on_the_path() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "retrysafe", "get", "http://127.0.0.1:9/", "--attempts", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == EXIT_USAGE
    assert ran.stderr.strip() == "retrysafe get: --attempts must be >= 1, got 0"


def test_get_prints_the_body_on_stdout(capsys: pytest.CaptureFixture[str], chaos: Any) -> None:
    code, out, err = run(capsys, "get", chaos.url("/status/200"))
    assert code == 0
    assert json.loads(out) == {"status": 200, "attempt": 1, "key": chaos.key}
    assert "HTTP 200 OK after 1 attempt" in err


def test_a_short_deadline_works_with_a_shorter_least_attempt_time(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    argv = ["--deadline", "0.4", "--min-attempt-time", "0.1", "--backoff-base", "0.01"]
    code, out, _err = run(capsys, "get", chaos.url("/fail/{key}", times=1, status=503), *argv)
    assert code == 0
    assert json.loads(out)["attempt"] == 2


def test_timeout_inf_lifts_the_attempt_limit_and_the_deadline_still_bounds_the_call(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    slow = chaos.url("/delay", ms=300)
    code, _, err = run(capsys, "get", slow, "--timeout", "0.1", "--attempts", "1", "-q")
    assert code == code_of(retrysafe.TransportError)
    assert "timeout" in err
    code, out, _ = run(capsys, "get", slow, "--timeout", "inf", "--deadline", "5", "-q")
    assert code == 0
    assert json.loads(out)["status"] == 200


def test_a_503_then_200_shows_one_retry_line(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    code, out, err = run(capsys, "get", chaos.url("/fail/{key}", times=1, status=503), *FAST)
    assert code == 0
    assert json.loads(out)["attempt"] == 2
    retry_lines = [line for line in err.splitlines() if "retrying in" in line]
    assert len(retry_lines) == 1
    assert "attempt 1 got HTTP 503 service_unavailable" in retry_lines[0]


def test_quiet_prints_no_retry_log(capsys: pytest.CaptureFixture[str], chaos: Any) -> None:
    url = chaos.url("/fail/{key}", times=1, status=503)
    code, _, err = run(capsys, "get", url, "--quiet", *FAST)
    assert (code, err) == (0, "")


def test_a_404_exits_with_the_client_error_code(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    code, out, err = run(capsys, "get", chaos.url("/status/404"))
    assert code == code_of(retrysafe.ClientError)
    assert out == ""
    assert err.startswith("retrysafe: ClientError [not_found, HTTP 404]: GET ")
    assert len(err.strip().splitlines()) == 1
    # the body's start is in the line; a command line has no .body to see
    assert '({"status":404' in err
    assert "fix the request; repeating it will not help" in err
    assert ".body" not in err


def test_out_of_credits_exits_with_the_quota_code(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    code, _, err = run(capsys, "get", chaos.url("/quota"))
    assert code == code_of(retrysafe.QuotaExhausted)
    assert "QuotaExhausted [quota_exhausted, HTTP 429]" in err


def test_a_secret_in_the_url_never_reaches_stderr(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    url = chaos.url("/fail/{key}", times=5, status=404, api_key="sekrit-value-123")
    code, _, err = run(capsys, "get", url)
    assert code == code_of(retrysafe.ClientError)
    assert "sekrit-value-123" not in err
    assert "api_key=[REDACTED]" in err


def test_a_post_that_times_out_is_sent_once_and_exits_with_the_transport_code(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    code, _, err = run(
        capsys, "request", "POST", chaos.url("/hang"), "--timeout", "0.3", "--json", "{}"
    )
    assert code == code_of(retrysafe.TransportError)
    assert "TransportError [unsafe_to_repeat]" in err
    assert "--idempotency-key auto" in err
    assert "may already have acted on it" in err
    assert len(chaos.log()) == 1


def test_an_idempotency_key_makes_a_post_retry_with_one_key_and_one_effect(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    url = chaos.url("/idempotent/orders", fail_after_commit=500)
    code, out, err = run(
        capsys, "request", "post", url, "--json", '{"sku": 1}', "--idempotency-key", "auto", *FAST
    )
    assert code == 0
    assert json.loads(out)["resource"] == "orders"
    assert "attempt 1 got HTTP 500" in err
    keys = {record.idempotency_key for record in chaos.log()}
    assert len(keys) == 1
    assert None not in keys
    assert sum(chaos.ledger("orders").values()) == 1


def test_headers_and_a_data_file_reach_the_server(
    capsys: pytest.CaptureFixture[str], chaos: Any, tmp_path: Path
) -> None:
    body_file = tmp_path / "body.txt"
    body_file.write_bytes(b"name=jane")
    code, out, _ = run(
        capsys,
        "request",
        "PUT",
        chaos.url("/echo"),
        "-H",
        "X-Trace: abc",
        "-H",
        "Content-Type: text/plain",
        "-d",
        f"@{body_file}",
    )
    echoed = json.loads(out)
    assert code == 0
    assert (echoed["method"], echoed["body"]) == ("PUT", "name=jane")
    assert echoed["headers"]["x-trace"] == "abc"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # Never the header's text: the rest may be a secret typed without its colon.
        (["-H", "NoColonHere"], "bad header: expected 'Name: value'"),
        (["-H", "Bad Name: x"], "bad header 'Bad ...': expected 'Name: value'"),
        (["-H", ":x"], "bad header: expected 'Name: value'"),
        (["-H", "X-Note: caf\u00e9"], "bad header 'X-Note': its value must be ASCII text"),
        (["-H", "X-Note: a\x01b"], "bad header 'X-Note': its value may not contain line breaks"),
        (["-H", "X-Note: a\nb"], "bad header 'X-Note': its value may not contain line breaks"),
        # RetryPolicy's refusals, in the command's words: the flags, not the fields
        (["--attempts", "0"], "retrysafe get: --attempts must be >= 1, got 0"),
        (["--deadline", "0"], "retrysafe get: --deadline must be > 0 seconds, got 0.0"),
        (
            ["--deadline", "0.3"],
            "--deadline 0.3 is shorter than --min-attempt-time (0.5 s, the least time left for "
            "an attempt to start): lower it too, e.g. --deadline 0.3 --min-attempt-time 0.15",
        ),
        (
            ["--deadline", "1", "--min-attempt-time", "2"],
            "--deadline 1 is shorter than --min-attempt-time (2 s,",
        ),
        (  # (over the default deadline, which no flag named: it crashed with a KeyError)
            ["--min-attempt-time", "31"],
            "--min-attempt-time 31 is longer than the deadline (30 s by default: --deadline)",
        ),
        (["--timeout", "-1"], "retrysafe get: --timeout must be > 0 seconds, got -1.0"),
        (
            ["--backoff-base", "5", "--backoff-cap", "1"],
            "retrysafe get: --backoff-base must be <= --backoff-cap (5.0 > 1.0)",
        ),
        (["--timeout", "soon"], "argument --timeout: invalid float value: 'soon'"),
        (["--json", "{oops"], "--json is not valid JSON"),
        (["--idempotency-key", " "], "--idempotency-key needs a key"),
        (["--idempotency-key", "commande-é-42"], "--idempotency-key must be printable ASCII"),
        (["--idempotency-key", " order-1"], "--idempotency-key must be printable ASCII"),
        # a misspelt option: told by the command it was given to, with that command's help,
        # and by name only (its value may be a secret: a misspelt --header's token)
        (
            ["--atempts", "3"],
            "retrysafe get: unrecognized arguments: --atempts and a value (not shown, in case "
            "of a secret) (see retrysafe get --help)",
        ),
        (
            ["--hedaer", "Authorization: Bearer sk_live_MISSPELT_77"],
            "unrecognized arguments: --hedaer and a value (not shown",
        ),
    ],
)
def test_bad_input_is_one_clear_line_exit_2_and_sends_nothing(
    capsys: pytest.CaptureFixture[str], chaos: Any, argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, "get", chaos.url("/echo"), *argv)
    assert (code, out) == (EXIT_USAGE, "")
    assert len(err.strip().splitlines()) == 1
    assert message in err
    assert "MISSPELT_77" not in err
    assert chaos.log() == []


@pytest.mark.parametrize(
    ("argv", "told"),
    [
        (["--bogus", "get", "http://api.test/"], "retrysafe: unrecognized arguments: --bogus"),
        (["simulate", "--bogus", "outage"], "retrysafe simulate: unrecognized arguments"),
        (["simulate", "outage", "--bogus"], "retrysafe simulate outage: unrecognized"),
        (["demo", "extra"], "retrysafe demo: unrecognized arguments: an argument (not shown"),
    ],
)
def test_an_unknown_argument_is_told_by_the_command_it_was_given_to(
    capsys: pytest.CaptureFixture[str], argv: list[str], told: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (EXIT_USAGE, "")
    assert told in err


@pytest.mark.parametrize(
    "url",
    [
        "example.com/path",
        "ftp://example.com/",
        "http://exa mple/",
        "http://127.0.0.1:99999/",  # (a socket would wrap it round to port 34463)
        "http://127.0.0.1:0/",
        "http://[bad/",
        "http://xn--/",  # a malformed IDNA label
    ],
)
def test_an_invalid_url_is_exit_2(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, _, err = run(capsys, "get", url)
    assert code == EXIT_USAGE
    assert err.startswith(f"retrysafe get: invalid URL {url!r}")
    assert len(err.strip().splitlines()) == 1


def test_an_invalid_method_is_exit_2(capsys: pytest.CaptureFixture[str], chaos: Any) -> None:
    code, _, err = run(capsys, "request", "PO ST", chaos.url("/echo"))
    assert code == EXIT_USAGE
    assert "invalid method 'PO ST'" in err


def test_data_at_dash_sends_stdin_as_the_body(
    capsys: pytest.CaptureFixture[str], chaos: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("name=jane"))
    code, out, _ = run(capsys, "request", "PUT", chaos.url("/echo"), "-d", "@-")
    assert (code, json.loads(out)["body"]) == (0, "name=jane")


def test_chaos_port_accepts_0_to_65535() -> None:
    parser = build_parser()
    assert parser.parse_args(["chaos", "--port", "65535"]).port == 65535
    assert parser.parse_args(["chaos", "--port", "0"]).port == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["chaos", "--port", "65536"])


def test_exit_code_for_follows_the_error_class_hierarchy() -> None:
    class PaymentRequired(retrysafe.ClientError):
        pass

    error = PaymentRequired(
        reason="payment_required",
        outcome="payment_required",
        method="GET",
        url="http://127.0.0.1/",
        retryable=False,
        status=402,
    )
    assert exit_code_for(error) == code_of(retrysafe.ClientError)


def test_location_follows_redirects_to_the_end_of_the_chain(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    code, out, _ = run(capsys, "get", chaos.url("/redirect-chain/{key}", hops=2), "-L")

    assert code == 0
    assert json.loads(out)["hop"] == 2
    assert [record.detail for record in chaos.log()] == [f"hop {hop} of 2" for hop in range(3)]


def test_without_location_a_redirect_is_not_followed(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    code, out, _ = run(capsys, "get", chaos.url("/redirect-chain/{key}", hops=2))

    assert code == 0
    assert json.loads(out)["hop"] == 0
    assert len(chaos.log()) == 1


def test_ctrl_c_during_a_request_exits_130(chaos: Any) -> None:
    """Interrupted mid-call (SIGINT, as Ctrl-C sends), the command says so and exits 130."""
    process = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "get", chaos.url("/hang"), "--no-color"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_a_terminal_sends_it,
    )
    try:
        give_up = time.monotonic() + 10
        while not chaos.log() and time.monotonic() < give_up:
            time.sleep(0.02)
        assert chaos.log(), "the request never reached the server"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)
        assert process.returncode == 130
        assert err.strip().endswith("retrysafe get: interrupted")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_body_and_its_summary_sent_to_one_pipe_stay_on_lines_of_their_own(chaos: Any) -> None:
    """With ``2>&1`` the summary starts a line of its own, though the body (the chaos
    server's JSON) ends without a newline."""
    both = subprocess.run(
        [str(CONSOLE_SCRIPT), "get", chaos.url("/status/200"), "--no-color"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=30,
        check=True,
    ).stdout

    body, summary = both.decode().split("\n", 1)
    assert json.loads(body)["status"] == 200
    assert summary.startswith("retrysafe: HTTP 200 OK after 1 attempt in ")


def test_a_body_piped_apart_from_the_summary_keeps_its_bytes(chaos: Any) -> None:
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "get", chaos.url("/status/200"), "--no-color"],
        capture_output=True,
        timeout=30,
        check=True,
    )

    assert not done.stdout.endswith(b"\n")  # (nothing added to the server's bytes)
    assert json.loads(done.stdout)["status"] == 200
    assert done.stderr.startswith(b"retrysafe: HTTP 200 OK after 1 attempt in ")


def test_idempotency_key_auto_sends_a_generated_key_not_the_word_auto(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    url = chaos.url("/idempotent/orders")
    code, _, _ = run(capsys, "request", "POST", url, "--json", "{}", "--idempotency-key", "auto")

    [record] = chaos.log()
    assert code == 0
    assert record.idempotency_key not in (None, "", "auto")


def test_a_given_idempotency_key_is_sent_as_typed(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    url = chaos.url("/idempotent/orders")
    code, _, _ = run(capsys, "request", "POST", url, "--json", "{}", "--idempotency-key", "ord-42")

    assert code == 0
    assert [record.idempotency_key for record in chaos.log()] == ["ord-42"]


@pytest.mark.parametrize(
    "second",
    [
        ["--idempotency-key", "other-key"],
        ["--idempotency-key", "auto"],
        ["-H", "Idempotency-Key: ord-43"],
    ],
    ids=["flag", "auto", "second_header"],
)
def test_two_different_keys_are_a_usage_error(
    capsys: pytest.CaptureFixture[str], chaos: Any, second: list[str]
) -> None:
    """One would silently replace the other (two headers would go out joined, "a, b"): an
    operator resending a write under the key they know would send it under another, and
    the server would do it twice (trial66, review67)."""
    url = chaos.url("/idempotent/orders")
    code, _, err = run(
        capsys, "request", "POST", url, "--json", "{}", "-H", "Idempotency-Key: ord-42", *second
    )

    assert code == EXIT_USAGE
    assert "give the idempotency key once" in err
    assert chaos.log() == []  # nothing sent


def test_the_same_key_as_a_flag_and_as_a_header_is_one_key(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    url = chaos.url("/idempotent/orders")
    code, _, _ = run(
        capsys, "request", "POST", url, "--json", "{}",
        "-H", "Idempotency-Key: ord-42", "-H", "Idempotency-Key: ord-42",
        "--idempotency-key", "ord-42",
    )  # fmt: skip

    assert code == 0
    assert [record.idempotency_key for record in chaos.log()] == ["ord-42"]


def _every_client_sends_to(
    handler: Callable[[httpx.Request], httpx.Response], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every httpx client the command makes sends through ``handler`` (a MockTransport)."""
    real_client = httpx.Client.__init__

    def mock_client(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["transport"] = httpx.MockTransport(handler)
        real_client(self, *args, **kwargs)

    monkeypatch.setattr(httpx.Client, "__init__", mock_client)


@pytest.mark.parametrize(
    "keyed",
    [["--idempotency-key", "auto"], ["-H", "Idempotency-Key: ord-77"]],
    ids=["flag", "header"],
)
def test_an_interrupted_keyed_write_names_the_key_to_resend_it_under(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, keyed: list[str]
) -> None:
    """Ctrl-C while the write is out: no error carries the key, and with ``auto`` only the
    command knew it (trial66: the write was applied, and nothing said under which key)."""
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers["idempotency-key"])
        raise KeyboardInterrupt

    _every_client_sends_to(handler, monkeypatch)
    code, _, err = run(capsys, "request", "POST", "https://api.test/orders", "--json", "{}", *keyed)

    assert code == 130
    [key] = sent
    assert f"--idempotency-key {key}" in err
    assert err.rstrip().endswith("interrupted")


def test_an_interrupted_keyed_write_that_never_reached_the_server_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the wait after a refused connect: nothing went out, so the command does
    not say it may have (trial95), whatever the key."""
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers["idempotency-key"])
        raise httpx.ConnectError("connection refused", request=request)

    def interrupted(clock: object, seconds: float) -> None:
        raise KeyboardInterrupt

    _every_client_sends_to(handler, monkeypatch)
    monkeypatch.setattr(retrysafe.clock.SystemClock, "sleep", interrupted)  # (Ctrl-C in the wait)
    code, _, err = run(
        capsys, "request", "POST", "https://api.test/orders", "--json", "{}",
        "--idempotency-key", "auto",
    )  # fmt: skip

    assert code == 130
    assert len(sent) == 1  # the first attempt, refused at connect; then the wait
    assert "may have gone out" not in err
    assert "the request was not sent" in err


def test_no_command_prints_the_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)

    assert (code, out) == (EXIT_USAGE, "")
    assert "usage: retrysafe" in err


def test_chaos_warns_before_serving_on_an_address_that_is_not_loopback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """192.0.2.1 (TEST-NET-1) is not this machine's: the warning comes first, then the
    bind fails with exit 1, so nothing ever listens beyond loopback."""
    code, _, err = run(capsys, "chaos", "--host", "192.0.2.1", "--port", "0", "--no-color")

    assert code == 1
    lines = err.strip().splitlines()
    assert "192.0.2.1 is not a loopback address" in lines[0]
    assert lines[-1].startswith("retrysafe chaos: cannot serve on 192.0.2.1:0: ")


def test_max_retry_after_gives_up_at_once_on_a_longer_hint(
    capsys: pytest.CaptureFixture[str], chaos: Any
) -> None:
    url = chaos.url("/fail/{key}", times=1, retry_after=3)
    started = time.monotonic()
    code, out, err = run(capsys, "get", url, "--max-retry-after", "1", *FAST)

    assert time.monotonic() - started < 2.5
    assert (code, out) == (code_of(retrysafe.RetryAfterTooLong), "")
    assert "RetryAfterTooLong" in err
    assert len(chaos.log()) == 1


# -- chaos, as a real process ------------------------------------------------------------------


def test_chaos_serves_until_sigint_and_exits_cleanly() -> None:
    process = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "chaos", "--port", "0", "--no-color"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_a_terminal_sends_it,
    )
    try:
        assert process.stdout is not None
        first_line = process.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:\d+", first_line)
        assert match, first_line
        response = httpx.get(match.group(0) + "/status/200?key=cli-test", timeout=5)
        assert response.json() == {"status": 200, "attempt": 1, "key": "cli-test"}
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
        assert process.stderr is not None
        assert process.stderr.read().strip() == "retrysafe chaos: stopped"
        assert "reset_on_accept" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
