"""The ``retrysafe`` command: a demo of what retrysafe does, curl with a retry policy, and
the chaos server in the foreground.

``retrysafe demo`` and ``retrysafe chaos`` need the ``cli`` extra (starlette, uvicorn):
``pip install 'retrysafe[cli]'``. ``get``, ``request`` and ``simulate`` need only retrysafe
itself (``simulate --plot`` needs the ``plot`` extra).
Every command is also callable in-process: ``main(["demo", "--json"])`` returns the exit
code instead of exiting.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from retrysafe import __version__
from retrysafe.cli.argv_secrets import argv_secrets
from retrysafe.cli.exit_codes import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    describe_exit_codes,
)
from retrysafe.cli.request_command import add_request_options, run_request
from retrysafe.cli.simulate_command import add_simulate_command
from retrysafe.cli.terminal import Style, is_terminal, safe_line, set_command_secrets, wants_color

__all__ = ["build_parser", "main"]

_EXTRA_HINT = "pip install 'retrysafe[cli]'"
_DESCRIPTION = (
    "Retry-safe HTTP calls: see what retrysafe retries and what it refuses to (demo), "
    "call an API with a retry policy (get, request), serve failures on demand (chaos), or "
    "see what retry settings do to a server on a virtual clock (simulate)."
)


class _Parser(argparse.ArgumentParser):
    """argparse, reporting bad arguments in one line instead of a usage block."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(safe_line(f"{self.prog}: {message} (see {self.prog} --help)") + "\n")
        raise SystemExit(EXIT_USAGE)


def _require_cli_extra(command: str) -> None:
    """Fail with one line naming the extra when starlette or uvicorn is missing."""
    try:
        for module in ("starlette", "uvicorn", "retrysafe.chaos"):
            importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or "a dependency"
        raise UsageError(
            f"'retrysafe {command}' needs the cli extra ({missing} is missing): {_EXTRA_HINT}"
        ) from None


def _run_demo(args: argparse.Namespace) -> int:
    """Run every demo case; 0 only when each behaved as expected."""
    _require_cli_extra("demo")
    from retrysafe.cli import demo
    from retrysafe.cli.demo_output import (
        LiveProgress,
        PlainProgress,
        render_report,
        report_as_json,
    )

    stdout, stderr = sys.stdout, sys.stderr
    progress = LiveProgress(stderr) if is_terminal(stderr) else PlainProgress(stderr)
    with progress:
        report = demo.run_demo(demo.CASES, progress=progress)
    if args.json:
        stdout.write(json.dumps(report_as_json(report), indent=2) + "\n")
    else:
        style = Style(wants_color(stdout, disabled=args.no_color))
        stdout.write("\n".join(render_report(report, style, stdout)) + "\n")
    stdout.flush()
    return EXIT_OK if report.ok else EXIT_FAILED


def _run_chaos(args: argparse.Namespace) -> int:
    _require_cli_extra("chaos")
    from retrysafe.cli.chaos_command import run_chaos

    return run_chaos(args)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {port}: expected 0-65535 (0: any free)")
    return port


def build_parser() -> argparse.ArgumentParser:
    """The ``retrysafe`` argument parser with its subcommands."""
    common = _Parser(add_help=False)
    common.add_argument("--no-color", action="store_true", help="plain text, no ANSI colour")
    exit_codes = describe_exit_codes()
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="retrysafe", description=_DESCRIPTION, epilog=exit_codes, formatter_class=formatter
    )
    parser.add_argument("--version", action="version", version=f"retrysafe {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="reproduce the failures an API client meets, and check retrysafe's answer to each",
        description="Start a chaos server on loopback and run each demo case against it with "
        "retrysafe.Client. Exit 0 only if every case behaved as expected. Needs the cli extra.",
    )
    demo.add_argument("--json", action="store_true", help="print the results as JSON")
    demo.set_defaults(run=_run_demo)

    for name, summary in (
        ("get", "GET a URL with retries; body on stdout, retries and errors on stderr"),
        ("request", "send any method with retries; body on stdout, retries and errors on stderr"),
    ):
        command = commands.add_parser(
            name,
            parents=[common],
            help=summary,
            description=summary,
            epilog=exit_codes,
            formatter_class=formatter,
        )
        if name == "request":
            command.add_argument("method", metavar="METHOD", help="GET, POST, PUT...")
        else:
            command.set_defaults(method="GET")
        command.add_argument("url", metavar="URL", help="an http:// or https:// URL")
        add_request_options(command)
        command.set_defaults(run=run_request)

    chaos = commands.add_parser(
        "chaos",
        parents=[common],
        help="serve the chaos server (endpoints that fail on demand) until Ctrl-C",
        description="Serve the chaos app and its raw TCP fault ports until Ctrl-C. "
        "Needs the cli extra.",
    )
    chaos.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    chaos.add_argument("--port", type=_port, default=8000, help="HTTP port (8000; 0: any free)")
    chaos.set_defaults(run=_run_chaos)

    add_simulate_command(commands)
    return parser


def _quiet_library_logs() -> None:
    """Keep the library's own warnings off the terminal: the command reports errors itself.

    Without a handler, Python's last-resort handler would print each final failure that
    ``retrysafe``'s logger records, next to the command's own line.
    """
    library_logger = logging.getLogger("retrysafe")
    if not library_logger.handlers:
        library_logger.addHandler(logging.NullHandler())


def _dispatch(args: argparse.Namespace) -> int:
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except UsageError as exc:
        sys.stderr.write(safe_line(f"retrysafe {args.command}: {exc}") + "\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write(f"retrysafe {args.command}: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep Python's exit-time
        # flush of stdout from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED


def _told_by(
    parser: argparse.ArgumentParser, args: argparse.Namespace, given: list[str], unknown: str
) -> Any:
    """The parser of the (sub)command the ``unknown`` argument was given to: the deepest
    one whose name comes before it in ``given`` (``retrysafe get``'s for ``retrysafe get
    URL --atempts 3``, the top one's for ``retrysafe --bogus get URL``)."""
    where = given.index(unknown) if unknown in given else len(given)
    start = 0
    while True:
        chosen = None
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                name = getattr(args, action.dest, None)
                if isinstance(name, str) and name in given[start:where]:
                    chosen = action.choices.get(name)
                    start = given.index(name, start) + 1
        if chosen is None:
            return parser
        parser = chosen


def _unknown_shown(unknown: list[str]) -> str:
    """The unrecognized arguments as the error shows them: options by name only, since a
    misspelt option's value may be a secret (``--hedaer 'Authorization: Bearer ...'``)."""
    names = [token.split("=", 1)[0] for token in unknown if token.startswith("-")]
    hidden = len(unknown) - len(names)
    if not hidden:
        return " ".join(names)
    if hidden == 1:
        values = "a value" if names else "an argument"
    else:
        values = f"{hidden} values" if names else f"{hidden} arguments"
    return " ".join([*names, f"{'and ' if names else ''}{values} (not shown, in case of a secret)"])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``retrysafe`` command with ``argv`` (default ``sys.argv[1:]``); the exit code."""
    parser = build_parser()
    # Found before parsing, so that no message about the input can print a secret in it.
    set_command_secrets(argv_secrets(sys.argv[1:] if argv is None else argv))
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # (told by the command they were given to, with its own --help)
            given = list(sys.argv[1:] if argv is None else argv)
            told = _told_by(parser, args, given, unknown[0])
            told.error(f"unrecognized arguments: {_unknown_shown(unknown)}")
    except SystemExit as exit_request:  # --help, --version, or a bad argument
        code = exit_request.code
        return code if isinstance(code, int) else EXIT_USAGE if code else EXIT_OK
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _quiet_library_logs()
    return _dispatch(args)
