"""The ``retrysafe`` command's exit codes (one per error family, so scripts can branch), and
:class:`UsageError`, which any command raises for bad input to exit with :data:`EXIT_USAGE`."""

from __future__ import annotations

from retrysafe import (
    ApiError,
    BadResponse,
    CircuitOpen,
    ClientError,
    DeadlineExceeded,
    QuotaExhausted,
    RateLimited,
    Refused,
    RetryAfterTooLong,
    ServerError,
    TransportError,
)

__all__ = [
    "ERROR_EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "describe_exit_codes",
    "exit_code_for",
]

EXIT_OK = 0
#: An API error of no known family, a demo case that misbehaved, a server that cannot start.
EXIT_FAILED = 1
#: Bad arguments, a bad URL, header or policy value, or the ``cli`` extra missing.
EXIT_USAGE = 2
#: Stopped with Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad input: reported as one line (no traceback) with exit code :data:`EXIT_USAGE`."""


#: Each error family's exit code and what it tells the caller to do.
ERROR_EXIT_CODES: tuple[tuple[type[ApiError], int, str], ...] = (
    (ClientError, 3, "fix the request (4xx)"),
    (RateLimited, 4, "too fast (429), even after waiting as long as allowed"),
    (QuotaExhausted, 5, "out of credits (429, quota header 0)"),
    (ServerError, 6, "the server kept failing (5xx)"),
    (TransportError, 7, "no usable response: connect error, reset or timeout"),
    (BadResponse, 8, "truncated, unreadable or rejected body"),
    (CircuitOpen, 9, "circuit open: nothing was sent"),
    (DeadlineExceeded, 10, "the deadline ran out"),
    (RetryAfterTooLong, 11, "the server asked to wait longer than allowed"),
    (Refused, 12, "held back by load protection (retry budget, cooldown, pacing)"),
)


def exit_code_for(error: ApiError) -> int:
    """The exit code of ``error``'s family (the nearest one in its class hierarchy)."""
    codes = {family: code for family, code, _ in ERROR_EXIT_CODES}
    for cls in type(error).__mro__:
        if cls in codes:
            return codes[cls]
    return EXIT_FAILED


def describe_exit_codes() -> str:
    """The exit codes as help text, one per line."""
    lines = [
        "exit codes:",
        f"  {EXIT_OK:>3}  success",
        f"  {EXIT_FAILED:>3}  failed (demo: a case did not behave as expected; chaos: could "
        "not serve)",
        f"  {EXIT_USAGE:>3}  usage error: bad argument, URL, header or policy value; extra missing",
    ]
    lines += [
        f"  {code:>3}  {family.__name__}: {meaning}" for family, code, meaning in ERROR_EXIT_CODES
    ]
    lines.append(f"  {EXIT_INTERRUPTED:>3}  interrupted (Ctrl-C)")
    return "\n".join(lines)
