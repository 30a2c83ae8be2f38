"""A header value http.client cannot send (not latin-1) is refused through the requests
adapter without showing it: http.client's ``UnicodeEncodeError`` holds the whole value,
so its repr showed an ``Authorization`` token in clear (review88). The same type is
raised, and nothing is sent."""

from __future__ import annotations

import traceback

import pytest
import requests

from retrysafe.chaos import KeyedChaos
from retrysafe.requests import RetryAdapter

SECRET = "s€cret-tőken-4242"


def _everything_shown(error: BaseException) -> str:
    """All a log line, a traceback or a debugger shows of ``error`` and what it carries."""
    shown = [repr(error), str(error), repr(error.args), repr(vars(error))]
    shown += traceback.format_exception(error)
    for attribute in ("object", "reason"):
        shown.append(repr(getattr(error, attribute, "")))
    return "\n".join(shown)


@pytest.mark.parametrize("header", ["Authorization", "X-Api-Key"])
def test_a_header_value_http_client_cannot_send_is_refused_unshown(
    chaos: KeyedChaos, header: str
) -> None:
    session = requests.Session()
    session.mount("http://", RetryAdapter())
    with pytest.raises(UnicodeEncodeError) as raised:
        session.post(chaos.url("/echo"), headers={header: f"Bearer {SECRET}"}, timeout=5)
    shown = _everything_shown(raised.value)
    assert "tőken" not in shown
    assert "4242" not in shown
    assert "latin-1" in str(raised.value)
    assert chaos.log() == []  # nothing was sent
