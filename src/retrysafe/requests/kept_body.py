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

An error answer a streamed call raises on is read only so far
(:func:`read_at_most`): the error keeps far less, and the rest is not downloaded.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import requests
import urllib3

from retrysafe.kept_body import READ_PIECE, BodyStart, is_encoded, mark_cut

__all__ = ["read_at_most", "read_keeping_raw"]


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


def read_at_most(response: requests.Response, at_most: int) -> bytes:
    """Read at most ``at_most`` bytes of the body, as it came and decoded (see httpx's
    :func:`retrysafe.kept_body.read_at_most`); what is left goes unread, its
    connection closed. ``response.content`` is then the decoded bytes read, marked cut
    if the body was longer (see :func:`retrysafe.kept_body.was_cut`); a body that came
    whole within ``at_most`` bytes stays readable, raw, from ``response.raw`` (as
    :func:`read_keeping_raw` leaves it), even when it decodes to more. Errors are
    requests' own, as ``response.content`` raises them. The decoded bytes read."""
    original = response.raw
    if not isinstance(original, urllib3.HTTPResponse):  # (an adapter's own stand-in)
        return response.content
    came_whole, as_sent = _start_of(_AsSent(original), at_most, cut_short_ok=False)
    if not came_whole:
        response.close()  # (the rest goes unread, and its connection with it)
    if is_encoded(original.headers.get("content-encoding", "")):
        # (decoded a piece at a time: a small compressed body may decode to far more)
        decoded_whole, body = _start_of(
            _replay(original, as_sent), at_most, cut_short_ok=not came_whole
        )
    else:
        decoded_whole, body = came_whole, as_sent
    if not (came_whole and decoded_whole):
        mark_cut(response)
    response._content = body
    response._content_consumed = True  # type: ignore[attr-defined]
    if came_whole:
        response.raw = _replay(original, as_sent)
    return body


def _start_of(raw: object, at_most: int, *, cut_short_ok: bool) -> tuple[bool, bytes]:
    """Whether ``raw``'s body (read as ``response.iter_content`` reads one, with
    requests' own exceptions) ends within ``at_most`` bytes, and those bytes.
    ``cut_short_ok``: the body is the start of a longer one, compressed, so it may
    fail to decode at its end: what decoded before that is kept."""
    reader = requests.Response()
    reader.raw = raw
    start = BodyStart(at_most)
    try:
        for chunk in reader.iter_content(chunk_size=READ_PIECE):
            if not start.take(chunk):
                break
    except requests.RequestException:
        if not cut_short_ok:
            raise
    return not start.cut, start.content
