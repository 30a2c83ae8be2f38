"""Namers that group requests into dependencies by more than their origin.

By default a request's dependency is its origin (``request_facts.default_dependency``);
a namer from here is given as a client's ``dependency=`` when an API's limits are per
endpoint family. (Kept apart from request_facts, which the compiled build compiles:
this checks a user's argument, and gives its own message for a wrong one.)
"""

from __future__ import annotations

import httpx

from retrysafe.request_facts import DependencyNamer, default_dependency

__all__ = ["dependency_by_path"]


def dependency_by_path(segments: int = 1) -> DependencyNamer:
    """Group requests by origin plus their first ``segments`` path segments.

    For APIs whose limits are per endpoint family: a 429 on ``/search`` then pauses
    only ``https://api.example.com:443/search``, not ``/orders``::

        Client(dependency=retrysafe.dependency_by_path(1))
    """
    if not isinstance(segments, int) or isinstance(segments, bool) or segments < 0:
        raise ValueError(
            f"dependency_by_path(segments) needs a whole number >= 0, got {segments!r}"
        )

    def name(request: httpx.Request) -> str:
        parts = [part for part in request.url.path.split("/") if part][:segments]
        origin = default_dependency(request.url)
        return origin + "".join("/" + part for part in parts)

    return name
