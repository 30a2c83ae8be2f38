"""Reading query parameters strictly: a bad value is the test author's bug, answered 400.

A chaos endpoint that guessed what ``times=two`` meant would make a test pass or fail for
the wrong reason, so every parameter is validated and a mistake is named in the reply
(a near miss of a parameter the endpoint takes too: ``app.PARAMETERS``). Numbers are
plain ASCII decimals (no ``1_000``, ``inf``, ``nan`` or non-ASCII digits), bounded on
both sides, and a refusal says the range.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Collection

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = [
    "MAX_TIMES",
    "InvalidParameter",
    "choice_param",
    "float_param",
    "header_name_param",
    "header_value_param",
    "int_param",
    "invalid_parameter_response",
    "parse_int",
    "parse_number",
    "status_code",
]


#: The most ``times``/``fail_times`` any endpoint accepts: more than any test can send.
MAX_TIMES = 1_000_000


class InvalidParameter(Exception):
    """A query or path parameter the chaos server cannot honour; answered with a 400."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


async def invalid_parameter_response(request: Request, exc: Exception) -> Response:
    """Starlette exception handler: a 400 naming the parameter and what is wrong with it."""
    if not isinstance(exc, InvalidParameter):  # pragma: no cover - registered for it only
        raise exc
    return JSONResponse({"error": exc.message, "parameter": exc.name}, status_code=400)


# Plain ASCII decimal numbers only: Python also reads ``1_000``, ``inf``, ``nan`` and
# non-ASCII digits, none of which a test author means. The length cap keeps a
# 5,000-digit value from reaching int() (or the error message) at all.
_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_MAX_NUMBER_TEXT = 40
_MAX_SHOWN = 40


def _shown(raw: str) -> str:
    """``raw`` for an error message: quoted, and cut short when long."""
    if len(raw) <= _MAX_SHOWN:
        return repr(raw)
    return f"{raw[:_MAX_SHOWN]!r}... ({len(raw)} characters)"


def _number_text(value: float) -> str:
    """A bound as written in a message: ``600000``, ``0.5``, ``1e-06``."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def parse_int(name: str, raw: str, *, minimum: int, maximum: int) -> int:
    """``raw`` as a decimal integer from ``minimum`` to ``maximum``, else :exc:`InvalidParameter`.

    Every refusal says the allowed range.
    """
    allowed = f"expected an integer from {minimum} to {maximum}"
    text = raw.strip()
    if not _INTEGER.fullmatch(text):
        raise InvalidParameter(name, f"{allowed}, got {_shown(raw)}")
    value = int(text, 10)
    if not minimum <= value <= maximum:
        raise InvalidParameter(name, f"{allowed}, got {value}")
    return value


def parse_number(name: str, raw: str, *, minimum: float, maximum: float) -> float:
    """``raw`` as a finite decimal number from ``minimum`` to ``maximum``.

    Negative zero is read as zero; anything outside the range, non-finite, or not plain
    decimal notation raises :exc:`InvalidParameter` with a message saying the range.
    """
    allowed = f"expected a number from {_number_text(minimum)} to {_number_text(maximum)}"
    text = raw.strip()
    if len(text) > _MAX_NUMBER_TEXT or not _NUMBER.fullmatch(text):
        raise InvalidParameter(name, f"{allowed}, got {_shown(raw)}")
    value = float(text) + 0.0  # -0.0 + 0.0 is 0.0
    if not (math.isfinite(value) and minimum <= value <= maximum):
        raise InvalidParameter(name, f"{allowed}, got {_shown(raw)}")
    if 0 < abs(value) < sys.float_info.min:
        # Subnormal: within the range, yet dividing by it overflows.
        raise InvalidParameter(name, f"{allowed}, got {_shown(raw)}, too close to zero")
    return value


def int_param(request: Request, name: str, default: int, *, minimum: int, maximum: int) -> int:
    """The integer parameter ``name`` (decimal digits, optional sign), or ``default``."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    return parse_int(name, raw, minimum=minimum, maximum=maximum)


def float_param(
    request: Request, name: str, default: float, *, minimum: float, maximum: float
) -> float:
    """The finite number parameter ``name`` (plain decimal notation), or ``default``."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    return parse_number(name, raw, minimum=minimum, maximum=maximum)


def choice_param(request: Request, name: str, default: str, choices: Collection[str]) -> str:
    """The parameter ``name``, which must be one of ``choices``; ``default`` when absent."""
    value = request.query_params.get(name) or default
    if value not in choices:
        raise InvalidParameter(name, f"must be one of {', '.join(sorted(choices))}, got {value!r}")
    return value


def header_value_param(request: Request, name: str) -> str | None:
    """The parameter ``name`` to be sent verbatim as a header value; ``None`` when absent.

    Anything an HTTP/1.1 header can carry is accepted (including values a client should
    reject, like ``soon`` or ``-1``); line breaks and other control characters are not.
    """
    value = request.query_params.get(name)
    if value is None:
        return None
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise InvalidParameter(name, "a header value must be Latin-1 text") from None
    if any((ord(char) < 0x20 and char != "\t") or ord(char) == 0x7F for char in value):
        raise InvalidParameter(name, "a header value cannot contain control characters")
    return value.strip(" \t")


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def header_name_param(request: Request, name: str, default: str) -> str:
    """The parameter ``name`` as a header name (an HTTP token), or ``default``."""
    value = request.query_params.get(name) or default
    if not _TOKEN.match(value):
        raise InvalidParameter(name, f"not a valid header name: {value!r}")
    return value


def status_code(name: str, raw: str) -> int:
    """A final HTTP status (200..599) parsed from ``raw``.

    1xx codes are informational and cannot end a response, so they are refused (400)
    rather than silently changed into something else.
    """
    allowed = "expected an HTTP status code from 200 to 599"
    text = raw.strip()
    if not (len(text) <= 3 and text.isascii() and text.isdigit()):
        raise InvalidParameter(name, f"{allowed}, got {_shown(raw)}")
    value = int(text, 10)
    if 100 <= value <= 199:
        raise InvalidParameter(
            name, f"{value} is informational (1xx) and cannot end a response; {allowed}"
        )
    if not 200 <= value <= 599:
        raise InvalidParameter(name, f"{allowed}, got {value}")
    return value
