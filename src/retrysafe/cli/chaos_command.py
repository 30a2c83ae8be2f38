"""``retrysafe chaos``: serve the chaos server in the foreground until Ctrl-C.

For trying a client (in any language) against failures on demand. It prints where
everything listens, then waits; Ctrl-C or SIGTERM stops it cleanly.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TextIO

from retrysafe.chaos import FAULT_NAMES, ChaosServer
from retrysafe.cli.exit_codes import EXIT_FAILED, EXIT_OK
from retrysafe.cli.terminal import Style, wants_color

__all__ = ["banner", "run_chaos"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def banner(server: ChaosServer, style: Style) -> list[str]:
    """Where the server listens: its base URL, its endpoints and each raw TCP fault."""
    paths = sorted(
        {str(getattr(route, "path", "")) for route in getattr(server.app, "routes", ())} - {""},
        key=lambda path: (path.startswith("/_chaos"), path),
    )
    lines = [
        style.paint(f"retrysafe chaos server on {server.url}", "bold") + "  (Ctrl-C to stop)",
        "",
        "endpoints (add ?key=NAME to keep separate state; the log is at /_chaos/log):",
    ]
    lines += [f"  {server.url}{path}" for path in paths]
    lines += ["", "raw TCP faults:"]
    width = max(len(name) for name in FAULT_NAMES)
    lines += [f"  {name.ljust(width)}  {server.fault_url(name)}" for name in FAULT_NAMES]
    return lines


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while serving, so both stop the server cleanly.

    Signal handlers belong to the main thread; elsewhere (an embedding program's worker
    thread) SIGTERM keeps its own meaning.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve_until_interrupted(server: ChaosServer, stdout: TextIO, style: Style) -> None:
    with _terminate_as_interrupt():
        try:
            server.start()
            stdout.write("\n".join(banner(server, style)) + "\n")
            stdout.flush()
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()


def run_chaos(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C; 0 after a clean stop, 1 when the server cannot start."""
    stdout, stderr = sys.stdout, sys.stderr
    style = Style(wants_color(stdout, disabled=args.no_color))
    if not _is_loopback(args.host):
        stderr.write(
            f"retrysafe chaos: warning: {args.host} is not a loopback address; "
            "anyone who can reach it can use the chaos server\n"
        )
    server = ChaosServer(args.host, args.port)
    try:
        _serve_until_interrupted(server, stdout, style)
    except (OSError, RuntimeError) as exc:
        stderr.write(f"retrysafe chaos: cannot serve on {args.host}:{args.port}: {exc}\n")
        return EXIT_FAILED
    stderr.write("retrysafe chaos: stopped\n")
    return EXIT_OK
