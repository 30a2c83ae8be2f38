"""retrysafe's clients keep httpx's types, and its public classes' hints resolve at runtime.

``tests/typing/mistakes.py`` makes each typical mistake twice, on httpx's client and
then (next line) on retrysafe's; ``mypy --strict`` must flag exactly the same pairs.
``tests/typing/correct.py`` is correct use, retrysafe's keywords included, and must
type-check cleanly. The runtime checks below cover what the signatures promise:
``stream()`` takes the per-call options and leaves the body unread, and ``send()``
tells the transport whether the caller streams.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import retrysafe
from retrysafe.client import report_of
from retrysafe.testing import FakeClock
from retrysafe.transport import OPTIONS_EXTENSION, CallOptions

ROOT = Path(__file__).resolve().parent.parent
TYPING = ROOT / "tests" / "typing"
MISTAKES = TYPING / "mistakes.py"
CORRECT = TYPING / "correct.py"

#: How a retrysafe line is written from its httpx twin.
_TWIN = [
    (re.compile(r"\bahx\b"), "ars"),
    (re.compile(r"\bhx\b"), "rs"),
    (re.compile(r"\bhttpx\.Client\("), "retrysafe.Client("),
    (re.compile(r"\bhttpx\.AsyncClient\("), "retrysafe.AsyncClient("),
]
_ERROR = re.compile(r"^(?P<path>.+?):(?P<line>\d+): error: (?P<message>.*)$")


def _twin(line: str) -> str:
    for pattern, replacement in _TWIN:
        line = pattern.sub(replacement, line)
    return line


def _is_httpx_line(line: str) -> bool:
    return _twin(line) != line


@pytest.fixture(scope="module")
def mypy_errors() -> dict[Path, dict[int, list[str]]]:
    """``mypy --strict`` (the repo's config) on the two files: errors by file, then line."""
    api = pytest.importorskip("mypy.api")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MYPYPATH", str(ROOT / "src"))  # this tree's retrysafe, not an install
        stdout, stderr, _status = api.run(
            [
                "--config-file",
                str(ROOT / "pyproject.toml"),
                "--cache-dir",
                str(ROOT / ".mypy_cache"),
                "--show-absolute-path",
                "--no-pretty",
                "--hide-error-context",
                str(MISTAKES),
                str(CORRECT),
            ]
        )
    assert not stderr, stderr
    errors: dict[Path, dict[int, list[str]]] = {MISTAKES: {}, CORRECT: {}}
    for output_line in stdout.splitlines():
        match = _ERROR.match(output_line)
        if match is None:
            continue
        path = Path(match["path"]).resolve()
        if path in errors:  # retrysafe's own modules are checked by the mypy run on src
            errors[path].setdefault(int(match["line"]), []).append(match["message"])
    return errors


def _pairs() -> list[int]:
    """Line numbers (1-based) of the httpx half of each pair; checks each twin follows."""
    lines = MISTAKES.read_text().splitlines()
    body = [
        number
        for number, line in enumerate(lines, start=1)
        if line.startswith("    ") and not line.lstrip().startswith("#")
    ]
    starts = body[0::2]
    for number in starts:
        line, twin = lines[number - 1], lines[number] if number < len(lines) else ""
        assert _is_httpx_line(line), f"line {number} should use httpx's client: {line.strip()}"
        assert twin == _twin(line), (
            f"line {number + 1} must repeat line {number} on retrysafe's client:\n"
            f"  {line.strip()}\n  {twin.strip()}"
        )
    assert body[1::2] == [number + 1 for number in starts]
    return starts


def _show(errors: dict[int, list[str]], numbers: set[int]) -> str:
    lines = MISTAKES.read_text().splitlines()
    return "\n".join(
        f"  {n}: {lines[n - 1].strip()}  ->  {errors.get(n, ['no error'])}" for n in sorted(numbers)
    )


def test_every_mistake_is_paired_and_flagged_on_httpx(
    mypy_errors: dict[Path, dict[int, list[str]]],
) -> None:
    """The file is what it says: each pair is a real mistake, as httpx's types see it."""
    pairs = _pairs()
    assert len(pairs) >= 60
    errors = mypy_errors[MISTAKES]
    not_flagged = {number for number in pairs if number not in errors}
    assert not not_flagged, "not a mistake on httpx.Client:\n" + _show(errors, not_flagged)


def test_retrysafe_mistakes_are_flagged_exactly_where_httpx_ones_are(
    mypy_errors: dict[Path, dict[int, list[str]]],
) -> None:
    errors = mypy_errors[MISTAKES]
    pairs = _pairs()
    httpx_flagged = {number for number in pairs if number in errors}
    expected = {number + 1 for number in httpx_flagged}
    flagged = set(errors) - set(pairs)
    missed = expected - flagged
    assert not missed, "flagged on httpx, not on retrysafe:\n" + _show(
        errors, {n - 1 for n in missed}
    )
    extra = flagged - expected
    assert not extra, "flagged only on retrysafe (or outside a pair):\n" + _show(errors, extra)


def test_correct_use_type_checks_cleanly(mypy_errors: dict[Path, dict[int, list[str]]]) -> None:
    assert mypy_errors[CORRECT] == {}


#: The packages a user imports from: every name in their ``__all__`` is public.
_PUBLIC_PACKAGES = (
    "retrysafe",
    "retrysafe.aiohttp",
    "retrysafe.chaos",
    "retrysafe.fleet",
    "retrysafe.governor",
    "retrysafe.idempotency",
    "retrysafe.requests",
    "retrysafe.simulate",
    "retrysafe.telemetry.otel",
    "retrysafe.telemetry.prometheus",
    "retrysafe.telemetry.structlog",
    "retrysafe.testing",
)


def _public_names() -> list[Any]:
    """Every public class and function, as test parameters (a package whose extra is not
    installed is skipped, not an error for the whole file)."""
    import importlib

    found: dict[int, Any] = {}
    for package in _PUBLIC_PACKAGES:
        try:
            module = importlib.import_module(package)
        except ImportError as missing:
            found[id(package)] = pytest.param(
                package, None, id=package, marks=pytest.mark.skip(reason=str(missing))
            )
            continue
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                full = f"{package}.{name}"
                found.setdefault(id(value), pytest.param(full, value, id=full))
    return sorted(found.values(), key=lambda param: str(param.id))


def _hinted_members(cls: type) -> list[tuple[str, object]]:
    """The class's own public functions, properties, ``__init__`` and ``__new__``: what a
    tool that reads hints (pydantic, typer, a DI container) would ask about."""
    members: list[tuple[str, object]] = []
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in ("__init__", "__new__"):
            continue
        if isinstance(value, property):
            value = value.fget
        elif isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        if inspect.isfunction(value):
            members.append((name, value))
    return members


def _own_class_hints(cls: type) -> None:
    """Resolve the annotations that retrysafe's own classes in ``cls``'s MRO declare,
    each in its own module (a foreign base's annotations are the foreign package's)."""
    for klass in cls.__mro__:
        if klass.__module__.startswith("retrysafe"):
            # (a class of the same module holding only klass's own annotations)
            alone = type(
                klass.__name__,
                (),
                {
                    "__annotations__": dict(vars(klass).get("__annotations__", {})),
                    "__module__": klass.__module__,
                },
            )
            typing.get_type_hints(alone)


#: Public classes with a base from requests that, from requests 2.34 on, names in its own
#: annotations types it imports only for type checkers: typing.get_type_hints then fails
#: on the class through no fault of retrysafe's (retrysafe's own annotations are checked).
_FOREIGN_BASES = {
    "retrysafe.requests.RetryAdapter": "requests.adapters.HTTPAdapter",
    "retrysafe.requests.TransportTimeout": "requests.exceptions.RequestException",
    "retrysafe.requests.TransportReadTimeout": "requests.exceptions.RequestException",
    "retrysafe.requests.TransportConnectTimeout": "requests.exceptions.RequestException",
}


@pytest.mark.parametrize(("name", "value"), _public_names())
def test_type_hints_of_public_names_resolve(name: str, value: object) -> None:
    """typing.get_type_hints works on every public class, its public methods and
    properties, and every public function, in every package a user imports from."""
    if inspect.isfunction(value):
        typing.get_type_hints(value)
        return
    assert isinstance(value, type)
    if name in _FOREIGN_BASES and not _hints_resolve(_FOREIGN_BASES[name], value):
        _own_class_hints(value)
    else:
        typing.get_type_hints(value)
    for member_name, member in _hinted_members(value):
        try:
            typing.get_type_hints(member)
        except NameError as error:
            raise AssertionError(f"{name}.{member_name}: {error}") from error


def _hints_resolve(base_name: str, cls: type) -> bool:
    """Whether typing.get_type_hints resolves on ``base_name``, a base of ``cls``."""
    import importlib

    module_name, _, attribute = base_name.rpartition(".")
    base = getattr(importlib.import_module(module_name), attribute)
    assert base in cls.__mro__
    try:
        typing.get_type_hints(base)
    except NameError:
        return False
    return True


def test_every_public_package_is_covered() -> None:
    """A new package with an ``__all__`` joins the hints test above."""
    packages = {
        f"retrysafe.{path.parent.name}"
        for path in (ROOT / "src" / "retrysafe").glob("*/__init__.py")
        if "__all__" in path.read_text()
    }
    # (the CLI is a command, not an import)
    assert packages - {"retrysafe.cli"} <= set(_PUBLIC_PACKAGES)
    integrations = {
        f"retrysafe.telemetry.{path.stem}"
        for path in (ROOT / "src" / "retrysafe" / "telemetry").glob("*.py")
        if not path.stem.startswith("_") and path.stem != "vocabulary"
    }
    assert integrations <= set(_PUBLIC_PACKAGES)


def test_type_hints_of_the_server_functions_resolve() -> None:
    from retrysafe.idempotency import credential_scope

    assert "return" in typing.get_type_hints(credential_scope)
    assert "request" in typing.get_type_hints(credential_scope("authorization"))


_VERBS = ("get", "head", "options", "post", "put", "patch", "delete")
_METHODS = ("__init__", "request", "stream", "send", *_VERBS)


def _client_methods() -> list[object]:
    return [
        pytest.param(getattr(cls, name), id=f"{cls.__name__}.{name}")
        for cls in (retrysafe.Client, retrysafe.AsyncClient)
        for name in _METHODS
    ]


@pytest.mark.parametrize("method", _client_methods())
def test_client_signatures_resolve_at_runtime(method: typing.Callable[..., object]) -> None:
    """Tools that read signatures (``inspect``, ``get_type_hints``) see httpx's types."""
    hints = typing.get_type_hints(method)
    if "timeout" in hints:
        assert httpx.Timeout in typing.get_args(hints["timeout"])


def test_rule_alias_resolves_in_a_users_module() -> None:
    class UsesRule:
        rule: retrysafe.Rule

    hints = typing.get_type_hints(UsesRule)
    assert typing.get_args(hints["rule"]) == ([httpx.Response], retrysafe.Verdict | None)


def test_policy_fields_take_any_collection_and_keep_frozen_values() -> None:
    policy = retrysafe.RetryPolicy(
        retry_statuses=[503, 502],
        idempotent_methods=("get",),
        quota_headers={"X-Credits"},
        rules=[lambda response: None],
    )
    assert policy.retry_statuses == frozenset({502, 503})
    assert isinstance(policy.retry_statuses, frozenset)
    assert policy.idempotent_methods == frozenset({"GET"})
    assert policy.quota_headers == ("x-credits",)
    assert isinstance(policy.rules, tuple)
    hash(policy)


# --- What the signatures promise, at runtime ----------------------------------------------


class _Body(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that notes whether anyone began reading it."""

    def __init__(self) -> None:
        self.read = False

    def __iter__(self) -> Iterator[bytes]:
        self.read = True
        yield b"body"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.read = True
        yield b"body"


def _recording_transport(
    seen: list[httpx.Request], statuses: Iterator[int], bodies: list[_Body] | None = None
) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = _Body()
        if bodies is not None:
            bodies.append(body)
        return httpx.Response(next(statuses), stream=body)

    return httpx.MockTransport(handler)


FAST = retrysafe.RetryPolicy(attempts=3, backoff_base=0.0, backoff_cap=0.0, retry_after_jitter=0.0)


def test_stream_takes_the_per_call_options_and_leaves_the_body_unread() -> None:
    seen: list[httpx.Request] = []
    bodies: list[_Body] = []
    transport = _recording_transport(seen, iter([503, 200]), bodies)
    with (
        retrysafe.Client(transport=transport, clock=FakeClock()) as client,
        client.stream(
            "POST", "https://api.test/pay", idempotency_key=True, policy=FAST, dependency="pay"
        ) as response,
    ):
        assert not bodies[-1].read
        assert response.read() == b"body"
    keys = {request.headers["idempotency-key"] for request in seen}
    assert len(seen) == 2
    assert len(keys) == 1
    options = seen[-1].extensions[OPTIONS_EXTENSION]
    assert options == CallOptions(policy=FAST, dependency="pay", stream=True)


def test_send_marks_whether_the_caller_streams() -> None:
    seen: list[httpx.Request] = []
    transport = _recording_transport(seen, iter([200, 200]))
    with retrysafe.Client(transport=transport) as client:
        client.send(client.build_request("GET", "https://api.test/a")).close()
        streamed = client.send(client.build_request("GET", "https://api.test/b"), stream=True)
        streamed.close()
    assert [request.extensions[OPTIONS_EXTENSION].stream for request in seen] == [False, True]


async def _async_stream(seen: list[httpx.Request]) -> bytes:
    bodies: list[_Body] = []
    transport = _recording_transport(seen, iter([502, 200]), bodies)
    async with (
        retrysafe.AsyncClient(transport=transport, policy=FAST) as client,
        client.stream("GET", "https://api.test/feed", dependency="feed") as response,
    ):
        assert not bodies[-1].read
        return await response.aread()


@pytest.mark.anyio
async def test_async_stream_takes_the_per_call_options() -> None:
    seen: list[httpx.Request] = []
    assert await _async_stream(seen) == b"body"
    assert len(seen) == 2
    assert seen[-1].extensions[OPTIONS_EXTENSION].dependency == "feed"


def test_report_of_reads_the_calls_report() -> None:
    seen: list[httpx.Request] = []
    transport = _recording_transport(seen, iter([503, 200]))
    with retrysafe.Client(transport=transport, policy=FAST, clock=FakeClock()) as client:
        response = client.get("https://api.test/a")
    report = report_of(response)
    assert isinstance(report, retrysafe.CallReport)
    assert report.attempts == 2
    assert report_of(httpx.Response(200)) is None


def test_report_of_takes_a_response_typed_as_an_httpx_forks() -> None:
    # openai 3.x annotates its responses as httpx2's: one that never came through
    # retrysafe (the SDK's own httpx2 client) has no report, and is no error.
    import httpx2

    assert report_of(httpx2.Response(200)) is None
    with pytest.raises(TypeError, match=r"for requests use retrysafe\.requests\.report_of"):
        report_of(object())  # type: ignore[arg-type]


_RETRYSAFE_KEYWORDS = {
    *("policy", "clock", "hooks", "dependency", "governor", "deadline_header", "idempotency"),
    *("journal", "idempotency_key", "operation"),
}


@pytest.mark.parametrize("name", _METHODS)
@pytest.mark.parametrize("ours", [retrysafe.Client, retrysafe.AsyncClient], ids=["sync", "async"])
def test_parameters_and_defaults_are_httpxs(ours: type[httpx.Client], name: str) -> None:
    """Explicit signatures keep httpx's parameters, kinds and defaults (USE_CLIENT_DEFAULT...)."""
    theirs = ours.__mro__[1]
    our_parameters = dict(inspect.signature(getattr(ours, name)).parameters)
    for parameter in inspect.signature(getattr(theirs, name)).parameters.values():
        mine = our_parameters.pop(parameter.name, None)
        assert mine is not None, f"{ours.__name__}.{name} lacks {parameter.name}"
        assert (mine.kind, mine.default) == (parameter.kind, parameter.default), parameter.name
    assert set(our_parameters) <= _RETRYSAFE_KEYWORDS
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in our_parameters.values())
