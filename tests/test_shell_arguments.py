"""A shell built with an argument of the wrong kind says so at once, and what to pass
instead, rather than failing on the first call with an AttributeError."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe import Governor, GovernorSettings

SHELLS = [
    pytest.param(lambda **kw: retrysafe.Client(**kw), id="Client"),
    pytest.param(lambda **kw: retrysafe.AsyncClient(**kw), id="AsyncClient"),
    pytest.param(
        lambda **kw: retrysafe.RetryTransport(
            httpx.MockTransport(lambda r: httpx.Response(200)), **kw
        ),
        id="RetryTransport",
    ),
]


@pytest.mark.parametrize("make", SHELLS)
def test_a_policy_that_is_not_a_retry_policy_is_refused(make: Any) -> None:
    with pytest.raises(TypeError, match=r"policy must be a retrysafe\.RetryPolicy, got dict"):
        make(policy={"attempts": 3})


@pytest.mark.parametrize("make", SHELLS)
def test_governor_settings_given_as_the_governor_are_refused_with_the_fix(make: Any) -> None:
    with pytest.raises(TypeError, match=r"governor=retrysafe\.Governor\(settings\)"):
        make(governor=GovernorSettings())


@pytest.mark.parametrize("make", SHELLS)
def test_a_governor_of_another_kind_is_refused(make: Any) -> None:
    with pytest.raises(TypeError, match=r"governor must be a retrysafe\.Governor, got str"):
        make(governor="shared")


@pytest.mark.parametrize("make", SHELLS)
@pytest.mark.parametrize("hooks", [["log"], "print", [print, 3]])
def test_hooks_that_are_not_callables_are_refused(make: Any, hooks: Any) -> None:
    with pytest.raises(TypeError, match="hooks must be a sequence of callables"):
        make(hooks=hooks)


def test_good_arguments_still_make_a_working_client() -> None:
    seen: list[retrysafe.RetryEvent] = []
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(
        transport=transport, governor=Governor(GovernorSettings()), hooks=[seen.append]
    ) as client:
        assert client.get("http://api.test/").status_code == 200
    assert [event.kind for event in seen][-1] == "success"


@pytest.mark.parametrize("seconds", ["5", None, True])
def test_a_deadline_that_is_not_a_number_says_how_to_give_one(seconds: Any) -> None:
    with pytest.raises(TypeError, match=r"retrysafe\.deadline\(5\)"):
        retrysafe.deadline(seconds)


def test_a_negative_deadline_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="seconds >= 0"):
        retrysafe.deadline(-1)


def test_report_of_something_else_than_an_httpx_response_names_the_right_reader() -> None:
    class NotHttpx:
        extensions: dict[str, Any] = {}  # noqa: RUF012 - a stand-in, never mutated

    with pytest.raises(TypeError, match=r"retrysafe\.requests\.report_of"):
        retrysafe.report_of(NotHttpx())  # type: ignore[arg-type]


@pytest.mark.parametrize("dependency", [3, ["search"]])
def test_a_per_call_dependency_must_be_a_name(dependency: Any) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with (
        retrysafe.Client(transport=transport) as client,
        pytest.raises(TypeError, match=r"dependency for one call must be a name \(str\)"),
    ):
        client.get("http://api.test/", dependency=dependency)


def test_per_request_cookies_warn_as_httpx_does_and_still_go() -> None:
    # retrysafe's request() builds and sends the request itself, not through httpx's
    # request(), so it gives httpx's deprecation warning itself.
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    with (
        retrysafe.Client(transport=httpx.MockTransport(answer)) as client,
        pytest.warns(DeprecationWarning, match="per-request cookies") as warned,
    ):
        client.get("http://api.test/", cookies={"session": "s1"})
    # The very words of httpx's own warning: a filter written for httpx's matches it.
    with (
        httpx.Client(transport=httpx.MockTransport(answer)) as bare,
        pytest.warns(DeprecationWarning, match="per-request cookies") as httpx_warned,
    ):
        bare.get("http://api.test/", cookies={"session": "s1"})
    assert [str(w.message) for w in warned] == [str(w.message) for w in httpx_warned]
    assert sent[0].headers["Cookie"] == "session=s1"


@pytest.mark.anyio
async def test_per_request_cookies_warn_on_the_async_client_too() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    async with retrysafe.AsyncClient(transport=transport) as client:
        with pytest.warns(
            DeprecationWarning, match="per-request cookies=<...> is being deprecated"
        ):
            await client.get("http://api.test/", cookies={"session": "s1"})


def test_a_transport_that_is_not_an_httpx_transport_is_refused() -> None:
    with pytest.raises(TypeError, match=r"transport must be an httpx\.BaseTransport.*got str"):
        retrysafe.RetryTransport("http://api.test")  # type: ignore[arg-type]


def test_a_sync_transport_given_to_the_async_shell_says_which_goes_where() -> None:
    with pytest.raises(TypeError, match="an async one in AsyncRetryTransport"):
        retrysafe.AsyncRetryTransport(httpx.HTTPTransport())  # type: ignore[arg-type]


@pytest.mark.parametrize("header", [b"Request-Timeout", "", 5])
def test_a_deadline_header_that_is_not_a_header_name_is_refused(header: Any) -> None:
    with pytest.raises(TypeError, match="deadline_header must be a header name"):
        retrysafe.RetryTransport(deadline_header=header)


@pytest.mark.parametrize("flag", [None, 0, 1, "yes"])
def test_raise_errors_is_read_as_true_or_false(flag: Any) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = retrysafe.RetryTransport(
        httpx.MockTransport(refuse), policy=retrysafe.RetryPolicy(attempts=1), raise_errors=flag
    )
    expected = retrysafe.ApiError if flag else httpx.ConnectError
    with httpx.Client(transport=transport) as client, pytest.raises(expected):
        client.get("http://api.test/")


@pytest.mark.parametrize("returned", [None, 5, b"api"])
def test_a_dependency_namer_that_returns_no_name_says_so(returned: Any) -> None:
    transport = retrysafe.RetryTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        dependency=lambda request: returned,
    )
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(TypeError, match=r"must return the dependency's name \(str\)"),
    ):
        client.get("http://api.test/")
