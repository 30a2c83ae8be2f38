"""What a request tells retrysafe by itself: its dependency's default name, its key."""

from __future__ import annotations

import httpx
import pytest

from retrysafe.request_facts import default_dependency, idempotency_key_of


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://api.test/v1/things?page=2", "https://api.test:443"),
        ("http://api.test/", "http://api.test:80"),
        ("http://api.test:8080/x", "http://api.test:8080"),
        ("HTTPS://API.Test/x", "https://api.test:443"),
        # an IPv6 address keeps its brackets: the name is an origin as a URL writes it
        ("http://[::1]:8080/x", "http://[::1]:8080"),
        ("https://[2001:db8::1]/x", "https://[2001:db8::1]:443"),
    ],
)
def test_the_default_dependency_is_the_origin(url: str, name: str) -> None:
    assert default_dependency(httpx.URL(url)) == name
    assert default_dependency(httpx.URL(url)) == name  # (and again, from the cache)


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({}, None),
        ({"Idempotency-Key": "k-1"}, "k-1"),
        ({"idempotency-key": "k-2"}, "k-2"),
        ({"Idempotency-Key": ""}, None),
        ({"Idempotency-Key": "   "}, None),
    ],
)
def test_the_idempotency_key_is_the_header_unless_blank(
    headers: dict[str, str], key: str | None
) -> None:
    assert idempotency_key_of(httpx.Request("POST", "https://api.test/", headers=headers)) == key
