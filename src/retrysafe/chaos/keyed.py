"""A chaos server seen through one state key: what the ``chaos`` fixture hands a test.

Tests share one server; each gets its own key, so attempts, buckets, ledgers and log
records never leak between tests and nothing has to be reset.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote, urlencode

from retrysafe.chaos.app import PARAMETERS
from retrysafe.chaos.state import ChaosRecord

__all__ = ["KeyedChaos"]


def _query_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        items: Iterable[object] = value
        return ",".join(_query_value(item) for item in items)
    return str(value)


#: The endpoints whose second path segment is the state key (``/fail/{key}``...).
_KEYED_ENDPOINTS = frozenset(
    route.split("/")[1] for route in PARAMETERS if route.split("/")[2:3] == ["{key}"]
)


def _path_key(path: str) -> str | None:
    """The state key segment of a keyed endpoint's ``path`` as written (``forecast`` in
    ``/fail/forecast``, ``{key}-b`` in ``/fail/{key}-b``), or None (``{key}`` itself, or
    not a keyed endpoint)."""
    segments = path.lstrip("/").split("/")
    if len(segments) < 2 or segments[0] not in _KEYED_ENDPOINTS or segments[1] == "{key}":
        return None
    return segments[1]


def _check_key(key: str) -> None:
    """Refuse a state key no ``{key}`` endpoint can take."""
    if not key or "/" in key:
        # (a key is one path segment of the {key} endpoints: a '/' would split it)
        raise ValueError(f"a chaos state key must be non-empty and have no '/', got {key!r}")


class KeyedChaos:
    """URLs and state of a :class:`ChaosServer` for a single ``key``."""

    def __init__(self, server: ChaosServer, key: str) -> None:
        _check_key(key)
        self.server = server
        self.key = key

    @property
    def base_url(self) -> str:
        """The server's base URL, like ``http://127.0.0.1:54321``."""
        return self.server.url

    def url(self, path: str, /, **params: object) -> str:
        """``base_url + path`` with ``params`` as the query, scoped to this key.

        ``key=`` is added unless given, and ``{key}`` in ``path`` becomes the key (the
        given one, if any). A keyed endpoint's path that names a key of its own must
        name the view's key, or one that starts with it and a dash (``/fail/{key}-b``:
        a second counter of the test's); another is refused (``ValueError``), since the
        server would keep its state and log under a key other tests may share, and
        :meth:`log` would not see it. ``None`` values are left out, booleans become
        ``true``/``false`` and lists are joined with commas, so
        ``url("/sequence/{key}", steps=[503, "reset", 200])`` reads naturally. A query
        written into ``path`` is refused (``ValueError``): ``key=`` would be glued onto
        its last value.
        """
        if "?" in path:
            raise ValueError(
                f"give the query's values as keyword arguments, not in the path: "
                f"url({path.split('?', 1)[0]!r}, times=2, ...), not url({path!r})"
            )
        key = self.key if params.get("key") is None else str(params["key"])
        _check_key(key)  # (another key's URL answers 404 just the same)
        written = _path_key(path)
        named = None if written is None else written.replace("{key}", key)
        if named == "key":
            raise ValueError(
                f"{path!r} names the state key 'key' itself, shared by every test that "
                "writes it: write {key} for this view's key (url('/fail/{key}'))"
            )
        if named is not None and named != key and not named.startswith(key + "-"):
            # The path's key wins over the query's: the server would keep this URL's state
            # and log under ``named``, shared with every test that names it, and this
            # view's log() would never see it (trial74).
            raise ValueError(
                f"{path!r} names the state key {named!r}, not this view's {key!r}: its "
                "state and log would be shared with any test naming it, and log() would "
                "not show its requests. Write {key} for this view's key "
                "(url('/fail/{key}')), one that starts with it and a dash "
                f"({key + '-b'!r}) for a second counter, or key={named!r} to share "
                "that one on purpose"
            )
        params["key"] = key
        path = path.replace("{key}", quote(key, safe=""))
        if not path.startswith("/"):
            path = "/" + path
        query = urlencode(
            [(name, _query_value(value)) for name, value in params.items() if value is not None],
            safe=",:",
        )
        return f"{self.server.url}{path}?{query}"

    def openai_base_url(self) -> str:
        """The ``base_url`` for the openai SDK: ``.../openai/{key}/v1`` under this key.

        The SDK posts to ``{base_url}/chat/completions``; pass ``events``,
        ``interval_ms``, ``fail_times`` and ``fail_status`` as its ``default_query``.
        """
        return f"{self.server.url}/openai/{quote(self.key, safe='')}/v1"

    def log(self) -> list[ChaosRecord]:
        """This key's request records, in the order the server recorded them."""
        return self.server.log(self.key)

    def ledger(self, resource: str) -> dict[str, int]:
        """Side effects applied on ``/idempotent/{resource}`` under this key, per
        Idempotency-Key (``""`` for writes sent without one)."""
        return self.server.ledger(resource, self.key)

    def closed_port_url(self) -> str:
        """A URL whose port refuses connections."""
        return self.server.closed_port_url()

    def fault_url(self, name: str) -> str:
        """The URL of a raw TCP fault, e.g. ``"reset_on_accept"``."""
        return self.server.fault_url(name)


# At the end, as server.py imports this module at its own end: whichever of the two is
# imported first, each finds the other's class defined, and typing.get_type_hints
# resolves both modules' annotations.
from retrysafe.chaos.server import ChaosServer  # noqa: E402
