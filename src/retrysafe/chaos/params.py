"""Reading query parameters strictly: a bad value is the test author's bug, answered 400.

A chaos endpoint that guessed what ``times=two`` meant would make a test pass or fail for
the wrong reason, so every parameter is validated and a mistake is named in the reply.
Unknown parameters are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = [
    "InvalidParameter",
    "choice_param",
    "float_param",
    "header_name_param",
    "header_value_param",
    "int_param",
    "invalid_parameter_response",
    "status_code",
]


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


def int_param(
    request: Request,
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """The integer parameter ``name`` (decimal digits, optional sign), or ``default``."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise InvalidParameter(name, f"expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise InvalidParameter(name, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidParameter(name, f"must be at most {maximum}, got {value}")
    return value


def float_param(
    request: Request,
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
) -> float:
    """The finite number parameter ``name``, or ``default``."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidParameter(name, f"expected a number, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidParameter(name, f"expected a finite number, got {raw!r}")
    if minimum is not None and value < minimum:
        raise InvalidParameter(name, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidParameter(name, f"must be at most {maximum}, got {value}")
    if above is not None and value <= above:
        raise InvalidParameter(name, f"must be more than {above}, got {value}")
    return value


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
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise InvalidParameter(name, f"expected an HTTP status code, got {raw!r}") from None
    if 100 <= value <= 199:
        raise InvalidParameter(name, f"{value} is informational (1xx) and cannot end a response")
    if not 200 <= value <= 599:
        raise InvalidParameter(name, f"expected a status code from 200 to 599, got {value}")
    return value
