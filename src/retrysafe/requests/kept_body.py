"""A streamed requests call's body that the adapter had to read: kept so the caller can
read it again, raw, from ``response.raw``.

A call made with ``stream=True`` gets its body unread, unless the engine needs it
first: a failure's body is read for its verdict and its error's excerpt (and handed
back with ``raise_on_status=False``, or on the error), and so is a success's when a
rule reads it. ``response.content`` alone would leave ``response.raw`` spent, where
bare requests gives a caller that streams the bytes as they came: a gateway that
forwards an upstream's error copies ``response.raw`` with its ``Content-Encoding``.

So such a body is read as it came, once; ``response.content`` is decoded from those
bytes, and ``response.raw`` becomes a urllib3 response over them, unread: it reads
them raw, or decoded with ``decode_content=True``, as the original would have. The
encoded bytes are held beside the decoded body only when the server encoded it
(``Content-Encoding``); otherwise both are one object. A call that does not stream
reads its body as requests does.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import requests
import urllib3

from retrysafe.kept_body import is_encoded

__all__ = ["read_keeping_raw"]


class _AsSent:
    """What requests reads a body through (``raw.stream()``), made to give the bytes as
    they came: requests decodes what it streams, and the raw bytes are wanted here."""

    def __init__(self, raw: urllib3.HTTPResponse) -> None:
        self._raw = raw

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        return self._raw.stream(amt, decode_content=False)


def _read_through_requests(raw: object) -> bytes:
    """All of ``raw``'s body, read as ``response.content`` reads one, so a broken or
    undecodable body raises requests' own exceptions (``ChunkedEncodingError``,
    ``ContentDecodingError``, ``ConnectionError``) rather than urllib3's."""
    reader = requests.Response()
    reader.raw = raw
    return reader.content


def _replay(original: urllib3.HTTPResponse, body: bytes) -> urllib3.HTTPResponse:
    """An unread urllib3 response over ``body`` (the bytes as they came), with
    ``original``'s status and headers, which decodes them as ``original`` would."""
    return urllib3.HTTPResponse(
        body=io.BytesIO(body),
        headers=original.headers,
        status=original.status,
        version=original.version,
        reason=original.reason,
        preload_content=False,
        decode_content=original.decode_content,
        # (the bytes are what came, checked as they came: a HEAD's Content-Length, say,
        # announces bytes that never follow)
        enforce_content_length=False,
        request_url=original.url,
    )


def read_keeping_raw(response: requests.Response) -> bytes:
    """``response.content``, with ``response.raw`` left readable from the start."""
    original = response.raw
    if not isinstance(original, urllib3.HTTPResponse):  # (an adapter's own stand-in)
        return response.content
    as_sent = _read_through_requests(_AsSent(original))
    if is_encoded(original.headers.get("content-encoding", "")):
        body = _read_through_requests(_replay(original, as_sent))
    else:
        body = as_sent  # (the same bytes: held once)
    response._content = body
    response._content_consumed = True  # type: ignore[attr-defined]
    response.raw = _replay(original, as_sent)
    return body
