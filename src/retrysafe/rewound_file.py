"""A request body read from a file that can be rewound: each attempt sends it from where
it began.

httpx sends ``content=`` a file object (``open(path, "rb")``, ``io.BytesIO``) by reading
it to its end, and reading it again reads nothing more: a retry would send an empty body.
So retrysafe took every such body as spent once sent, and did not repeat the request
(a 503 to an upload ended the call), where urllib3 and requests seek the file back and
send it again (trial105). A file that says it is ``seekable()`` is now read through
:class:`RewoundFile`, which seeks back to the position it was found at before each
attempt reads it. A pipe, a socket's file, a generator stay spent once sent.

(Multipart files, ``files=``, need none of this: httpx seeks each back to its start as it
sends it; see :func:`~retrysafe.request_facts.replayable_body`.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import httpx
from httpx._content import IteratorByteStream

__all__ = ["RewoundFile", "can_seek", "rewound_file_body"]

#: How much of the file one read takes: httpx's own for a file body.
_PIECE: Final = 65_536


class RewoundFile(httpx.SyncByteStream):
    """``file``'s bytes from ``start`` to its end, read again from ``start`` each time."""

    def __init__(self, file: Any, start: int) -> None:
        self._file = file
        self._start = start

    def __iter__(self) -> Iterator[bytes]:
        file = self._file
        file.seek(self._start)
        piece = file.read(_PIECE)
        while piece:
            yield piece
            piece = file.read(_PIECE)


def can_seek(file: object) -> bool:
    """Whether ``file`` says it can seek (``seekable()``). A missing or failing
    ``seekable()`` cannot tell, so: no. (Each shell asks this of a file body before it
    takes it for one it can send again: httpx's, requests', aiohttp's.)"""
    try:
        return bool(file.seekable())  # type: ignore[attr-defined]
    except Exception:
        return False


def rewound_file_body(stream: object) -> RewoundFile | None:
    """A :class:`RewoundFile` for ``stream`` if it is httpx's stream over a file object
    that can seek, not yet read (read already, its start is lost); else None."""
    if type(stream) is not IteratorByteStream:
        return None
    if stream._is_stream_consumed:
        return None
    file: Any = stream._stream
    if not callable(getattr(file, "read", None)):
        return None  # (an iterator of bytes: a generator, a list)
    if not can_seek(file):
        return None
    try:
        start = file.tell()
    except Exception:  # (no tell(), or it failed: where it begins cannot be told)
        return None
    if not isinstance(start, int):
        return None
    return RewoundFile(file, start)
