"""``import retrysafe`` loads what a client needs, and server pieces only on first use.

Deterministic checks of which modules a fresh interpreter has loaded, not timings:
benchmarks/overhead.py measures the time.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import retrysafe
import retrysafe.idempotency

#: Packages only the server side, the chaos server or the CLI need.
SERVER_PACKAGES = ("starlette", "uvicorn", "redis", "psycopg", "psycopg_pool")
#: retrysafe's own server-side modules.
SERVER_MODULES = (
    "retrysafe.chaos",
    "retrysafe.cli",
    "retrysafe.propagation",
    "retrysafe.idempotency.middleware",
    "retrysafe.idempotency.held_claim",
    "retrysafe.idempotency.memory_store",
    "retrysafe.idempotency.sqlite_store",
    "retrysafe.idempotency.redis_store",
    "retrysafe.idempotency.postgres_store",
    "retrysafe.idempotency.postgres_pool",
)
#: What ``import httpx`` defers to the first client's transport (httpcore, and through it
#: trio, h11, h2 where installed) or to the first async call (the event loops).
DEFERRED_BY_HTTPX = ("httpcore", "h11", "h2", "trio", "asyncio")

_LOADED_AFTER = """
import json, sys
{prelude}
import httpx
by_httpx = set(sys.modules)
{code}
print(json.dumps({{"by_httpx": sorted(by_httpx), "all": sorted(sys.modules)}}))
"""


#: What keeps httpx's command line out of a fresh interpreter, as a plain ``pip install
#: retrysafe`` leaves it (this checkout installs it for retrysafe's own CLI, and it imports
#: modules, such as uuid, that retrysafe would otherwise be seen to leave unloaded).
_WITHOUT_HTTPX_CLI = 'sys.modules["click"] = None'


def loaded_after(code: str, *, without_httpx_cli: bool = False) -> tuple[set[str], set[str]]:
    """The modules a fresh interpreter has after ``import httpx``, and after ``code`` too
    (``without_httpx_cli``: as when httpx's command line is not installed)."""
    prelude = _WITHOUT_HTTPX_CLI if without_httpx_cli else ""
    result = subprocess.run(
        [sys.executable, "-c", _LOADED_AFTER.format(prelude=prelude, code=code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    modules = json.loads(result.stdout)
    return set(modules["by_httpx"]), set(modules["all"])


def server_pieces(modules: set[str]) -> list[str]:
    return sorted(
        name
        for name in modules
        if name.split(".")[0] in SERVER_PACKAGES
        or any(name == piece or name.startswith(piece + ".") for piece in SERVER_MODULES)
    )


def test_import_loads_no_server_piece_and_defers_what_httpx_defers() -> None:
    by_httpx, loaded = loaded_after("import retrysafe")
    assert server_pieces(loaded) == []
    added = {name.split(".")[0] for name in loaded - by_httpx}
    early = sorted(added & set(DEFERRED_BY_HTTPX))
    assert early == [], (
        f"import retrysafe loads {early}, which import httpx defers until a client needs "
        "them (trio alone costs tens of ms where installed): import them on first use"
    )


def test_a_successful_call_loads_no_server_piece() -> None:
    _, loaded = loaded_after(
        "import retrysafe\n"
        "mock = httpx.MockTransport(lambda request: httpx.Response(200))\n"
        "with retrysafe.Client(transport=mock) as client:\n"
        "    client.get('http://127.0.0.1/')\n"
        "with httpx.Client(transport=retrysafe.RetryTransport(mock)) as client:\n"
        "    client.get('http://127.0.0.1/')"
    )
    assert server_pieces(loaded) == []


def test_each_server_piece_loads_on_first_use() -> None:
    _, loaded = loaded_after(
        "from retrysafe.idempotency import IdempotencyMiddleware, RedisStore\n"
        "from retrysafe import DeadlineMiddleware"
    )
    assert "retrysafe.idempotency.middleware" in loaded
    assert "retrysafe.idempotency.redis_store" in loaded
    assert "retrysafe.propagation" in loaded
    # Naming one store does not load the others, nor any driver.
    assert "retrysafe.idempotency.postgres_store" not in loaded
    assert not [name for name in loaded if name.split(".")[0] in ("redis", "psycopg")]


@pytest.mark.parametrize("package", [retrysafe, retrysafe.idempotency], ids=lambda p: p.__name__)
def test_every_exported_name_resolves(package: object) -> None:
    exported: list[str] = package.__all__  # type: ignore[attr-defined]
    lazy: dict[str, str] = package._LAZY  # type: ignore[attr-defined]
    assert set(lazy) <= set(exported)
    for name in exported:
        value = getattr(package, name)
        assert value is not None
        assert name in dir(package)
    for name, module in lazy.items():
        assert getattr(package, name) is getattr(sys.modules[module], name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="IdempotencyMiddlware"):
        _ = retrysafe.idempotency.IdempotencyMiddlware  # type: ignore[attr-defined]
    with pytest.raises(ImportError):
        from retrysafe import NoSuchName  # type: ignore[attr-defined]  # noqa: F401


#: A process that makes one successful sync call, and nothing else.
ONE_SUCCESSFUL_CALL = (
    "import retrysafe\n"
    "mock = httpx.MockTransport(lambda request: httpx.Response(200))\n"
    "with retrysafe.Client(transport=mock) as client:\n"
    "    client.get('http://127.0.0.1/')"
)

#: What only a hedging call needs: loaded on its first use.
#: (retrysafe.latency is not among them: Governor.latencies names its LatencyBook, and
#: typing.get_type_hints can resolve that name only if the module is loaded: about
#: 0.2 ms from cached bytecode, 1.4 ms without; the book itself is made only by the
#: first hedging call.)
HEDGING_MODULES = ("retrysafe.hedged_call", "retrysafe.hedged_shell")


def test_hedging_is_loaded_by_the_first_hedging_call_not_by_import() -> None:
    _, plain = loaded_after(ONE_SUCCESSFUL_CALL)
    assert sorted(set(HEDGING_MODULES) & plain) == []
    _, hedging = loaded_after(
        "import retrysafe\n"
        "mock = httpx.MockTransport(lambda request: httpx.Response(200))\n"
        "policy = retrysafe.RetryPolicy(hedge_after=0.5)\n"
        "with retrysafe.Client(transport=mock, policy=policy) as client:\n"
        "    client.get('http://127.0.0.1/')"
    )
    assert set(HEDGING_MODULES) <= hedging


#: What a successful sync call never needs: the error builders, the log-level settings,
#: testing mode's settings class, and anyio (async sleeps and cancel scopes).
FAILURE_AND_ASYNC_MODULES = (
    "retrysafe.failures",
    "retrysafe.log_settings",
    "retrysafe.testing.mode",
    "anyio",
)


def test_a_successful_sync_call_leaves_the_failure_and_async_pieces_unloaded() -> None:
    _, plain = loaded_after(ONE_SUCCESSFUL_CALL)
    assert sorted(set(FAILURE_AND_ASYNC_MODULES) & plain) == []
    _, failing = loaded_after(
        "import retrysafe\n"
        "mock = httpx.MockTransport(lambda request: httpx.Response(404))\n"
        "with retrysafe.Client(transport=mock) as client:\n"
        "    try:\n"
        "        client.get('http://127.0.0.1/')\n"
        "    except retrysafe.ClientError:\n"
        "        pass"
    )
    assert "retrysafe.failures" in failing


#: A fresh interpreter that counts what ``import retrysafe`` (after httpx and the standard
#: modules retrysafe adds to it) compiles: regular expressions, and named tuples built by
#: ``collections.namedtuple`` (which compiles each one's ``__new__`` with ``eval``).
_COUNTED_IMPORT = """
import collections, contextvars, dataclasses, json, re, sys, typing
import httpx

compiled, built = [], []
compile_pattern, namedtuple = re._compile, collections.namedtuple


def counting_compile(pattern, flags):
    if isinstance(pattern, (str, bytes)):
        compiled.append(str(pattern))
    return compile_pattern(pattern, flags)


def counting_namedtuple(typename, *args, **kwargs):
    built.append(f"{sys._getframe(1).f_globals.get('__name__')}: {typename}")
    return namedtuple(typename, *args, **kwargs)


re._compile, collections.namedtuple = counting_compile, counting_namedtuple
import retrysafe

print(json.dumps({"compiled": compiled, "built": built}))
"""


def test_import_compiles_no_regular_expression_and_no_named_tuple_of_its_own() -> None:
    """Each costs about 0.1 ms: patterns compile on first use, and retrysafe's named
    tuples are made by retrysafe.named_tuple, which compiles nothing per class. (The
    compiled build's own modules keep typing.NamedTuple, which the compiler knows.)"""
    result = subprocess.run(
        [sys.executable, "-c", _COUNTED_IMPORT],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    counted = json.loads(result.stdout)
    assert counted["compiled"] == []
    typing_made = [entry for entry in counted["built"] if not entry.startswith("typing: ")]
    assert typing_made == []
    compiled_modules_own = {"Transition", "Permit"}  # (retrysafe.governor.breaker's)
    assert {entry.split(": ")[1] for entry in counted["built"]} <= compiled_modules_own


def test_import_leaves_uuid_to_the_first_key() -> None:
    """``uuid`` loads ``platform`` (about 2 ms, a tenth of what the import adds to
    httpx's): it is imported when the first idempotency key is made, not with the
    package."""

    def added_by(code: str) -> set[str]:
        by_httpx, loaded = loaded_after(code, without_httpx_cli=True)
        return loaded - by_httpx

    assert {"uuid", "platform"}.isdisjoint(added_by("import retrysafe"))
    keyed = added_by(
        "import retrysafe\n"
        "mock = httpx.MockTransport(lambda request: httpx.Response(200))\n"
        "with retrysafe.Client(transport=mock) as client:\n"
        "    sent = client.post('http://127.0.0.1/', idempotency_key=True).request\n"
        "assert len(sent.headers['Idempotency-Key']) == 36"
    )
    assert "uuid" in keyed
