"""A shell built with an argument of the wrong kind says so at once, and what to pass
instead, rather than failing on the first call with an AttributeError."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe import Governor, GovernorSettings, RetryPolicy
from retrysafe.idempotency import Journal
from retrysafe.testing import FakeClock

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


@pytest.mark.parametrize("make", SHELLS)
def test_one_hook_given_alone_is_refused_with_the_list_it_goes_in(make: Any) -> None:
    with pytest.raises(TypeError, match=r"one hook goes in a list: hooks=\[print\]"):
        make(hooks=print)


def test_hooks_may_come_from_a_generator_read_once() -> None:
    seen: list[retrysafe.RetryEvent] = []
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(transport=transport, hooks=(hook for hook in [seen.append])) as client:
        client.get("http://api.test/")
        client.get("http://api.test/")
    assert [event.kind for event in seen].count("success") == 2


@pytest.mark.parametrize(
    ("settings", "fix"),
    [
        ({"breaker": 5}, r"GovernorSettings\.breaker must be a retrysafe\.BreakerSettings or None"),
        ({"budget": "x"}, r"GovernorSettings\.budget must be a retrysafe\.BudgetSettings or None"),
        (
            {"limiter": retrysafe.BudgetSettings()},
            r"GovernorSettings\.limiter must be a retrysafe\.LimiterSettings or None .*got Budget",
        ),
    ],
)
def test_a_load_protection_piece_of_another_kind_is_refused_as_the_settings_are_made(
    settings: dict[str, Any], fix: str
) -> None:
    """Refused at once: accepted, it failed only at the first call, with an AttributeError."""
    with pytest.raises(TypeError, match=fix):
        GovernorSettings(**settings)


@pytest.mark.parametrize("nested", ["2", True, 0])
def test_nested_attempts_must_be_a_whole_number_of_at_least_one(nested: Any) -> None:
    with pytest.raises(ValueError, match=r"nested_attempts must be a whole number >= 1 or None"):
        GovernorSettings(nested_attempts=nested)


def test_a_governor_made_from_something_other_than_its_settings_is_refused() -> None:
    with pytest.raises(TypeError, match=r"settings must be a retrysafe\.GovernorSettings, got str"):
        Governor("off")  # type: ignore[arg-type]


@pytest.mark.parametrize("client", [retrysafe.Client, retrysafe.AsyncClient])
@pytest.mark.parametrize(
    ("journal", "fix"),
    [
        ("ops.sqlite3", r"got str; open it first: journal=Journal\('ops\.sqlite3'\)"),
        (5, r"got int; e\.g\. journal=Journal\("),
    ],
)
def test_a_journal_that_is_not_one_is_refused_as_the_client_is_made(
    client: Any, journal: Any, fix: str
) -> None:
    """Refused at once: accepted, a path failed only at the first operation."""
    with pytest.raises(
        TypeError, match=r"journal must be a retrysafe\.idempotency\.Journal, " + fix
    ):
        client(journal=journal)


@pytest.mark.parametrize(
    ("client", "shell"),
    [
        (retrysafe.Client, retrysafe.RetryTransport),
        (retrysafe.AsyncClient, retrysafe.AsyncRetryTransport),
    ],
)
def test_a_client_given_a_retrying_transport_refuses_it(client: Any, shell: Any) -> None:
    """Two retrying layers would nest: the inner one's retries counted as one attempt of
    the outer's, which then retries less. Refused as the client is made, for the
    transport and for a mounted one alike."""
    with pytest.raises(TypeError, match=rf"^transport is a retrysafe {shell.__name__}, and"):
        client(transport=shell())
    with pytest.raises(TypeError, match=r"^the transport mounted at 'https://' is a retrysafe"):
        client(mounts={"https://": shell()})


@pytest.mark.parametrize("make", SHELLS)
@pytest.mark.parametrize("name", ["", "  "])
def test_a_blank_dependency_name_is_refused_not_read_as_none(make: Any, name: str) -> None:
    """A blank name fell back to each URL's origin, silently: it names nothing."""
    with pytest.raises(ValueError, match=r"^dependency must be a name, .*leave it out"):
        make(dependency=name)


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


@pytest.mark.parametrize(
    ("dependency", "error", "message"),
    [
        (3, TypeError, r"^dependency for one call must be a name \(str\)"),
        (["search"], TypeError, r"^dependency for one call must be a name \(str\)"),
        # (a blank name once fell back to the URL's origin, silently)
        ("", ValueError, r"^dependency for one call must be a name, e\.g\."),
        (" ", ValueError, r"^dependency for one call must be a name, e\.g\."),
    ],
)
def test_a_per_call_dependency_must_be_a_name(
    dependency: Any, error: type[Exception], message: str
) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with (
        retrysafe.Client(transport=transport) as client,
        pytest.raises(error, match=message),
    ):
        client.get("http://api.test/", dependency=dependency)


@pytest.mark.parametrize("make", SHELLS)
@pytest.mark.parametrize(
    ("clock", "named"),
    [(time.monotonic, "builtin_function_or_method"), (5, "int"), (time, "module")],
)
def test_a_clock_that_is_not_one_is_refused_saying_what_a_clock_is(
    make: Any, clock: Any, named: str
) -> None:
    # (a function such as time.monotonic failed later, as an AttributeError about monotonic)
    with pytest.raises(TypeError, match=rf"^clock must be a retrysafe\.Clock: .*got {named}"):
        make(clock=clock)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda clock, folder: Governor(clock=clock), id="Governor"),
        pytest.param(lambda clock, folder: retrysafe.deadline(5, clock=clock), id="deadline"),
        pytest.param(
            lambda clock, folder: Journal(folder / "journal.db", clock=clock), id="Journal"
        ),
    ],
)
def test_every_other_place_that_takes_a_clock_refuses_one_that_is_not(
    make: Any, tmp_path: Path
) -> None:
    with pytest.raises(TypeError, match=r"a function: a clock is an object with those methods"):
        make(time.monotonic, tmp_path)
    assert make(FakeClock(), tmp_path) is not None


def test_the_testing_clock_and_none_are_clocks() -> None:
    assert isinstance(retrysafe.Client(clock=FakeClock()), retrysafe.Client)
    assert isinstance(retrysafe.Client(clock=None), retrysafe.Client)


def _answers_503() -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(503))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("options", "hint"),
    [
        # (a policy put there directly was ignored: the call ran 4 attempts, not 1)
        (RetryPolicy(attempts=1), r"got RetryPolicy; wrap it: .*CallOptions\(policy=\.\.\.\)"),
        ("fast", r"got str, e\.g\. extensions="),
        ({"policy": RetryPolicy(attempts=1)}, r"got dict, e\.g\. extensions="),
    ],
)
def test_per_call_options_of_another_kind_in_the_extensions_are_refused_before_sending(
    options: object, hint: str, stream: bool
) -> None:
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(503))
    with retrysafe.Client(transport=transport, clock=FakeClock()) as client:
        request = client.build_request("GET", "http://api.test/", extensions={"retrysafe": options})
        with pytest.raises(
            TypeError,
            match=r'^request\.extensions\["retrysafe"\] must be a retrysafe\.CallOptions, ' + hint,
        ):
            client.send(request, stream=stream)
    # Through a plain httpx client over the transport alike.
    shell = retrysafe.RetryTransport(transport, clock=FakeClock())
    with (
        httpx.Client(transport=shell) as plain,
        pytest.raises(TypeError, match=r"must be a retrysafe\.CallOptions"),
    ):
        plain.get("http://api.test/", extensions={"retrysafe": options})
    assert sent == []


def test_a_responses_report_copied_into_a_request_is_refused_saying_what_it_is() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(transport=transport) as client:
        first = client.get("http://api.test/")
        request = client.build_request("GET", "http://api.test/", extensions=first.extensions)
        with pytest.raises(TypeError, match=r"got CallReport \(a response's report"):
            client.send(request)


def test_call_options_in_the_extensions_still_set_the_calls_policy() -> None:
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(503))
    options = retrysafe.CallOptions(policy=RetryPolicy(attempts=1))
    with retrysafe.Client(transport=transport, clock=FakeClock()) as client:
        request = client.build_request("GET", "http://api.test/", extensions={"retrysafe": options})
        with pytest.raises(retrysafe.ServerError):
            client.send(request)
    assert len(sent) == 1


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


def test_a_transport_that_cannot_send_is_refused() -> None:
    with pytest.raises(TypeError, match=r"transport must be an httpx transport.*got str"):
        retrysafe.RetryTransport("http://api.test")  # type: ignore[arg-type]


def test_a_sync_transport_given_to_the_async_shell_says_what_it_is() -> None:
    with pytest.raises(TypeError, match=r"a sync transport: it has handle_request\(\) instead"):
        retrysafe.AsyncRetryTransport(httpx.HTTPTransport())  # type: ignore[arg-type]


def test_an_httpx2_client_is_told_retrysafe_runs_on_httpx_before_anything_is_sent() -> None:
    # The openai SDK 3.x is built on httpx2, a fork of httpx: its client hands a transport
    # httpx2's requests, which httpx's own transport failed on with a bare AssertionError.
    httpx2 = pytest.importorskip("httpx2")
    sent: list[object] = []
    inner = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200))
    with (
        httpx2.Client(transport=retrysafe.RetryTransport(inner)) as client,
        pytest.raises(TypeError, match=r"retrysafe runs on httpx, not httpx2.*http_client="),
    ):
        client.get("http://api.test/")
    assert sent == []


@pytest.mark.anyio
async def test_an_httpx2_async_client_is_told_the_same() -> None:
    httpx2 = pytest.importorskip("httpx2")
    inner = httpx.MockTransport(lambda request: httpx.Response(200))
    async with httpx2.AsyncClient(transport=retrysafe.AsyncRetryTransport(inner)) as client:
        # (the async advice: an async user needs the async client and transport)
        with pytest.raises(TypeError, match=r"not httpx2.*AsyncOpenAI.*AsyncRetryTransport"):
            await client.get("http://api.test/")  # (an async with and a with: two statements)


def test_an_httpx2_transport_is_refused_when_the_shell_is_made() -> None:
    httpx2 = pytest.importorskip("httpx2")
    with pytest.raises(TypeError, match=r"not httpx2's HTTPTransport: retrysafe runs on httpx"):
        retrysafe.RetryTransport(httpx2.HTTPTransport())
    with pytest.raises(TypeError, match=r"not httpx2's AsyncHTTPTransport.*AsyncClient"):
        retrysafe.AsyncRetryTransport(httpx2.AsyncHTTPTransport())


def test_a_transport_derived_from_httpx2s_is_refused_too() -> None:
    # (the openai SDK's own transports derive from httpx2's; so may a user's)
    httpx2 = pytest.importorskip("httpx2")

    class Logged(httpx2.HTTPTransport):  # type: ignore[misc,name-defined]
        pass

    with pytest.raises(TypeError, match=r"not httpx2's Logged: retrysafe runs on httpx"):
        retrysafe.RetryTransport(Logged())


def test_a_transport_that_sends_as_httpx_asks_is_taken_without_subclassing() -> None:
    # httpx itself asks a transport only to send (and close), so retrysafe does too.
    class Sends:
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, text="duck")

        def close(self) -> None:
            pass

    with httpx.Client(transport=retrysafe.RetryTransport(Sends())) as client:  # type: ignore[arg-type]
        assert client.get("http://api.test/").text == "duck"


def test_setting_a_transports_inner_transport_or_settings_takes_effect() -> None:
    shell = retrysafe.RetryTransport(
        httpx.MockTransport(lambda request: httpx.Response(500)),
        policy=retrysafe.RetryPolicy(attempts=1),
    )
    shell.transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with httpx.Client(transport=shell) as client:
        assert client.get("http://api.test/").status_code == 200
    sent: list[httpx.Request] = []

    def fail(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(503)

    shell.transport = httpx.MockTransport(fail)
    shell.settings = shell.settings._replace(policy=retrysafe.RetryPolicy(attempts=2))
    with httpx.Client(transport=shell) as client:
        client.get("http://api.test/")
    assert (shell.policy.attempts, len(sent)) == (2, 2)


def test_the_async_transport_sends_through_a_coroutine_function() -> None:
    # Mocks (create_autospec) and frameworks tell async methods by this: on the class,
    # and on an instance (whose method is its send loop's own, one coroutine fewer).
    import inspect

    assert inspect.iscoroutinefunction(retrysafe.AsyncRetryTransport.handle_async_request)
    shell = retrysafe.AsyncRetryTransport(httpx.MockTransport(lambda r: httpx.Response(200)))
    assert inspect.iscoroutinefunction(shell.handle_async_request)


@pytest.mark.anyio
async def test_setting_the_async_transports_inner_transport_takes_effect() -> None:
    shell = retrysafe.AsyncRetryTransport(
        httpx.MockTransport(lambda request: httpx.Response(500)),
        policy=retrysafe.RetryPolicy(attempts=1),
    )
    shell.transport = httpx.MockTransport(lambda request: httpx.Response(200, text="new"))
    async with httpx.AsyncClient(transport=shell) as client:
        assert (await client.get("http://api.test/")).text == "new"


@pytest.mark.anyio
async def test_an_async_transport_subclass_that_sends_its_own_way_is_called() -> None:
    seen: list[str] = []

    class Counting(retrysafe.AsyncRetryTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request.url.path)
            return await super().handle_async_request(request)

    shell = Counting(httpx.MockTransport(lambda request: httpx.Response(200)))
    async with httpx.AsyncClient(transport=shell) as client:
        await client.get("http://api.test/a")
    shell.transport = httpx.MockTransport(lambda request: httpx.Response(200))
    async with httpx.AsyncClient(transport=shell) as client:
        await client.get("http://api.test/b")
    assert seen == ["/a", "/b"]


def test_a_client_subclass_whose_send_is_its_own_gets_every_request_through_it() -> None:
    # request() sends without calling retrysafe's own send() (one call fewer), but only
    # when send() is retrysafe's: a subclass's send() sees every request, as on httpx.
    seen: list[str] = []

    class Sending(retrysafe.Client):
        def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            seen.append(request.url.path)
            return super().send(request, **kwargs)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200 if request.url.path != "/gone" else 404)

    with Sending(transport=httpx.MockTransport(answer)) as client:
        client.get("http://api.test/a")
        client.post("http://api.test/b", json={})
        with pytest.raises(retrysafe.ApiError):
            client.get("http://api.test/gone")
    assert seen == ["/a", "/b", "/gone"]


@pytest.mark.anyio
async def test_an_async_client_subclass_whose_send_is_its_own_gets_every_request() -> None:
    seen: list[str] = []

    class Sending(retrysafe.AsyncClient):
        async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            seen.append(request.url.path)
            return await super().send(request, **kwargs)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200 if request.url.path != "/gone" else 404)

    async with Sending(transport=httpx.MockTransport(answer)) as client:
        await client.get("http://api.test/a")
        await client.post("http://api.test/b", json={})
        with pytest.raises(retrysafe.ApiError):
            await client.get("http://api.test/gone")
    assert seen == ["/a", "/b", "/gone"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"policy": {"attempts": 2}}, r"policy must be a retrysafe\.RetryPolicy, got dict"),
        ({"dependency": retrysafe.dependency_by_path(1)}, r"must be a name \(str\)"),
        ({"dependency": b"api"}, r"must be a name \(str\)"),
    ],
)
def test_call_options_of_the_wrong_kind_are_refused_when_made(options: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        retrysafe.CallOptions(**options)


def test_call_options_read_stream_as_true_or_false() -> None:
    assert retrysafe.CallOptions(stream=1).stream is True  # type: ignore[arg-type]
    assert retrysafe.CallOptions(stream=None).stream is False  # type: ignore[arg-type]


def test_timeouts_given_as_any_mapping_are_read() -> None:
    import types

    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.extensions["timeout"]))
        return httpx.Response(200)

    timeouts = types.MappingProxyType({"connect": 1.0, "read": 2.0, "write": 3.0, "pool": 4.0})
    request = httpx.Request("GET", "http://api.test/", extensions={"timeout": timeouts})
    with httpx.Client(transport=retrysafe.RetryTransport(httpx.MockTransport(answer))) as c:
        assert c.send(request).status_code == 200
    assert seen == [{"connect": 1.0, "read": 2.0, "write": 3.0, "pool": 4.0}]


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        # within the attempt's 10 s: the caller's own stand
        ({"connect": 5, "read": 7.5, "write": 1, "pool": True}, {"connect": 5, "read": 7.5}),
        # one phase longer than the attempt: every phase is bounded by it
        ({"connect": 20, "read": 5.0, "write": 5.0, "pool": 5.0}, {"connect": 10.0}),
        # a NaN beside it hides nothing: the long phase is still bounded
        ({"connect": 20, "read": math.nan, "write": 5.0, "pool": 5.0}, {"connect": 10.0}),
        # an int too large for a float is longer than any attempt
        ({"connect": 10**400, "read": 1.0, "write": 5.0, "pool": 5.0}, {"connect": 10.0}),
        # "no timeout" (None) and a missing phase take the attempt's time
        ({"connect": None, "read": 1.0, "write": 5.0, "pool": 5.0}, {"connect": 10.0}),
        ({"read": 1.0, "write": 5.0, "pool": 5.0}, {"connect": 10.0, "read": 1.0}),
    ],
)
def test_each_phase_timeout_is_cut_to_the_attempts_time(
    given: dict[str, Any], sent: dict[str, Any]
) -> None:
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.extensions["timeout"]))
        return httpx.Response(200)

    policy = retrysafe.RetryPolicy(attempt_timeout=10.0, deadline=30.0)
    transport = retrysafe.RetryTransport(httpx.MockTransport(answer), policy=policy)
    request = httpx.Request("GET", "http://api.test/", extensions={"timeout": given})
    with httpx.Client(transport=transport) as client:
        assert client.send(request).status_code == 200
    assert {phase: seen[0][phase] for phase in sent} == sent
    assert all(value is None or value <= 10.0 or value != value for value in seen[0].values())


@pytest.mark.parametrize("header", [b"Request-Timeout", "", 5, "Request Timeout", "X:Y", "é"])
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


# -- what a user's test or library may put in place of the shells' methods ------------------


@pytest.mark.anyio
async def test_a_patch_on_the_async_transports_class_is_what_sends() -> None:
    from unittest import mock

    shell = retrysafe.AsyncRetryTransport(httpx.MockTransport(lambda r: httpx.Response(200)))
    with mock.patch.object(
        retrysafe.AsyncRetryTransport,
        "handle_async_request",
        new_callable=mock.AsyncMock,
        return_value=httpx.Response(418),
    ) as patched:
        async with httpx.AsyncClient(transport=shell) as client:
            assert (await client.get("http://api.test/")).status_code == 418
    assert patched.await_count == 1


def test_a_send_of_a_class_after_client_in_the_mro_is_called() -> None:
    seen: list[str] = []

    class Signing(httpx.Client):
        def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            seen.append(request.url.path)
            return super().send(request, **kwargs)

    class Signed(retrysafe.Client, Signing):  # type: ignore[misc]  # (send: **kwargs)
        pass

    with Signed(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as client:
        client.get("http://api.test/a")
    assert seen == ["/a"]


@pytest.mark.anyio
async def test_an_async_send_of_a_class_after_async_client_in_the_mro_is_called() -> None:
    seen: list[str] = []

    class Signing(httpx.AsyncClient):
        async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            seen.append(request.url.path)
            return await super().send(request, **kwargs)

    class Signed(retrysafe.AsyncClient, Signing):  # type: ignore[misc]  # (send: **kwargs)
        pass

    async with Signed(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as client:
        await client.get("http://api.test/a")
    assert seen == ["/a"]


def test_a_send_patched_on_the_client_or_its_class_sees_every_request() -> None:
    from unittest import mock

    with retrysafe.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as client:
        with mock.patch.object(client, "send", wraps=client.send) as on_instance:
            client.get("http://api.test/a")
        with mock.patch.object(
            retrysafe.Client, "send", autospec=True, return_value=httpx.Response(418)
        ) as on_class:
            assert client.get("http://api.test/b").status_code == 418
    assert (on_instance.call_count, on_class.call_count) == (1, 1)


@pytest.mark.anyio
async def test_an_async_send_patched_on_the_client_or_its_class_sees_every_request() -> None:
    from unittest import mock

    mock_transport = httpx.MockTransport(lambda r: httpx.Response(200))
    async with retrysafe.AsyncClient(transport=mock_transport) as client:
        with mock.patch.object(client, "send", wraps=client.send) as on_instance:
            await client.get("http://api.test/a")
        with mock.patch.object(
            retrysafe.AsyncClient,
            "send",
            new_callable=mock.AsyncMock,
            return_value=httpx.Response(418),
        ) as on_class:
            assert (await client.get("http://api.test/b")).status_code == 418
    assert (on_instance.call_count, on_class.await_count) == (1, 1)


def test_a_sync_transport_in_an_async_client_names_the_async_one() -> None:
    """trial76: httpx-retries' one transport serves both clients; retrysafe's sync one in
    an ``httpx.AsyncClient`` failed with an AttributeError naming neither."""
    import asyncio

    async def main() -> None:
        client = httpx.AsyncClient(transport=retrysafe.RetryTransport())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"give an httpx.AsyncClient retrysafe.AsyncRetry"):
            await client.get("http://api.test/items")

    asyncio.run(main())


def test_an_async_transport_in_a_sync_client_names_the_sync_one() -> None:
    client = httpx.Client(transport=retrysafe.AsyncRetryTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"give an httpx.Client retrysafe.RetryTransport"):
        client.get("http://api.test/items")
