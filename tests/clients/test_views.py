"""The views the requests and aiohttp shells hand the engine equal httpx's own parse.

``view_url`` and ``view_headers`` build a request's or response's httpx view on
short paths (the view is built for every attempt); these tests hold them to what
``httpx.URL`` and ``httpx.Headers`` give for the same input, errors included.
"""

from __future__ import annotations

import httpx
import pytest
import requests
from requests.structures import CaseInsensitiveDict

from retrysafe.foreign_shell import request_view, response_view, view_headers, view_url
from retrysafe.policy import RetryPolicy
from retrysafe.requests.adapter import _header_pairs

URLS = [
    "http://127.0.0.1:8080/status/200?key=bench",
    "https://api.example.com/v1/orders/12345/items?limit=50&cursor=abcDEF123",
    "https://api.example.com",
    "https://api.example.com/",
    "https://API.Example.COM:443/Path",
    "HTTP://example.com:80/a",
    "http://example.com:8080",
    "https://user:p%40ss@example.com/private",
    "https://user:secret@example.com:8443/x?token=abc#frag",
    "http://[::1]:8000/ipv6?x=1",
    "https://münchen.example/straße?q=ä",
    "https://xn--mnchen-3ya.example/",
    "https://example.com/a b/c?d e=f g#h i",
    "https://example.com/already%20quoted/%7Euser?q=%2F&r=a%zz",
    "https://example.com/a/./b/../c/file.json",
    'https://example.com/{braces}/`tick`?x="quoted"&y=<tag>',
    "https://example.com/path?",
    "https://example.com/path#",
    "https://example.com/path?#",
    "https://example.com?only=query",
    "https://example.com#only-fragment",
    "http://exa mple.com/x",
]

INVALID_URLS = [
    "http://example.com:notaport/x",
    "http://1.2.3.999/x",
    "http://example.com/x\ny",
    "http://example.com/x\ty",
    "http://[::zz]/x",
    "http://" + "a" * 70000,
]


@pytest.mark.parametrize("url", URLS)
def test_view_url_equals_httpx_parse_component_for_component(url: str) -> None:
    expected = httpx.URL(url)
    assert view_url(url)._uri_reference == expected._uri_reference
    # the second time comes from the origins already parsed
    assert view_url(url)._uri_reference == expected._uri_reference
    assert str(view_url(url)) == str(expected)


@pytest.mark.parametrize("url", ["/relative/path?x=1", "mailto:someone@example.com", ""])
def test_view_url_of_a_url_without_scheme_or_host_is_httpx_own(url: str) -> None:
    assert view_url(url)._uri_reference == httpx.URL(url)._uri_reference


@pytest.mark.parametrize("url", INVALID_URLS)
def test_view_url_rejects_what_httpx_rejects_with_the_same_error(url: str) -> None:
    with pytest.raises(httpx.InvalidURL) as expected:
        httpx.URL(url)
    with pytest.raises(httpx.InvalidURL) as got:
        view_url(url)
    assert str(got.value) == str(expected.value)


HEADERS = [
    [("User-Agent", "python-requests/2"), ("Accept", "*/*"), ("X-Dup", "1"), ("x-dup", "2")],
    [],
    [(b"X-Bytes", b"raw"), ("X-Text", "text")],
    [("X-Bytes-Value", b"\xff\xfe")],
]


@pytest.mark.parametrize("pairs", HEADERS)
def test_view_headers_equal_httpx_headers(pairs: list[tuple[str, str]]) -> None:
    got = view_headers(pairs)
    expected = httpx.Headers(pairs)
    assert got.raw == expected.raw
    assert got._list == expected._list
    assert list(got.multi_items()) == list(expected.multi_items())


def test_view_headers_drop_the_named_header_in_any_case() -> None:
    pairs = [("Content-Type", "text/plain"), ("Content-Encoding", "gzip"), ("X", "1")]
    assert view_headers(pairs, dropping=b"content-encoding").raw == [
        (b"Content-Type", b"text/plain"),
        (b"X", b"1"),
    ]
    mixed = [(b"Content-Encoding", b"gzip"), ("CONTENT-ENCODING", "br"), ("Y", b"\x01")]
    assert view_headers(mixed, dropping=b"content-encoding").raw == [(b"Y", b"\x01")]


def test_view_headers_keep_text_beyond_ascii_as_the_bytes_it_came_from() -> None:
    # requests (http.client) reads a response's header bytes as latin-1, and sends a
    # request's text header as latin-1; aiohttp keeps undecodable bytes as surrogates.
    utf8 = "caf\u00e9".encode()
    assert view_headers([("X-Name", utf8.decode("latin-1"))]).raw == [(b"X-Name", utf8)]
    assert view_headers([("X-Name", "Jos\u00e9")]).raw == [(b"X-Name", b"Jos\xe9")]
    assert view_headers([("X-Name", "\u20ac")]).raw == [(b"X-Name", "\u20ac".encode())]
    bad = b"\xff\xfe".decode("utf-8", "surrogateescape")
    assert view_headers([("X-Name", bad)]).raw == [(b"X-Name", b"\xff\xfe")]


def test_view_headers_refuse_what_is_not_text_or_bytes() -> None:
    with pytest.raises(TypeError):
        httpx.Headers([("X-Number", 12)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        view_headers([("X-Number", 12)])  # type: ignore[list-item]


def test_request_view_of_a_requests_request_carries_its_method_url_and_headers() -> None:
    prepared = requests.Session().prepare_request(
        requests.Request(
            "post",
            "https://api.example.com/v1/pay?x=1",
            headers={"Idempotency-Key": "k-1", "Authorization": "Bearer s"},
        )
    )
    view = request_view(
        prepared.method or "", prepared.url or "", prepared.headers, replayable=True, stream=False
    )
    assert view.method == "POST"
    assert view.url == httpx.URL("https://api.example.com/v1/pay?x=1")
    assert view.headers["idempotency-key"] == "k-1"
    assert view.headers.raw == httpx.Headers(dict(prepared.headers)).raw


def test_response_view_leaves_out_content_encoding_and_keeps_the_rest() -> None:
    headers = [("Content-Type", "application/json"), ("Content-Encoding", "gzip")]
    view = response_view(503, headers, b"{}", RetryPolicy())
    assert view.headers.raw == [(b"Content-Type", b"application/json"), (b"Content-Length", b"2")]
    assert view.content == b"{}"


def test_request_view_has_what_httpx_request_sets_and_nothing_else() -> None:
    view = request_view("get", "https://example.com/x", [("A", "1")], replayable=True, stream=True)
    built = httpx.Request(
        "get", "https://example.com/x", headers=[("A", "1")], stream=view.stream, extensions={}
    )
    assert vars(view).keys() == vars(built).keys()
    assert (view.method, view.url, view.headers.raw) == (built.method, built.url, built.headers.raw)


def test_unread_response_view_has_what_httpx_response_sets_and_nothing_else() -> None:
    view = response_view(200, [("A", "1")], None, RetryPolicy())
    built = httpx.Response(200, headers=[("A", "1")], stream=view.stream)
    assert vars(view).keys() == vars(built).keys()
    for name, value in vars(built).items():
        if name != "headers":
            assert getattr(view, name) == value, name
    assert view.headers.raw == built.headers.raw
    with pytest.raises(httpx.ResponseNotRead):
        _ = view.content


def test_requests_header_pairs_are_what_items_gives() -> None:
    headers = CaseInsensitiveDict({"Accept": "*/*", "X-Key": "1"})
    headers["accept"] = "application/json"  # the later spelling and value win
    del headers["x-key"]
    headers["Idempotency-Key"] = "k"
    assert list(_header_pairs(headers)) == list(headers.items())
    plain = {"A": "1"}
    assert list(_header_pairs(plain)) == [("A", "1")]
