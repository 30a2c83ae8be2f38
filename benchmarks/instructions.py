"""Instructions per successful call, counted by callgrind: a figure that load cannot move.

Wall-clock figures (``benchmarks/overhead.py``) move with the machine: its CPU, its other
load, its frequency. This counts the CPU instructions a successful GET on
``httpx.MockTransport`` executes, through bare httpx and through each contender, sync and
async, so two versions of retrysafe (or two builds) can be compared on any day.
With ``--loopback`` the GETs go over loopback to a minimal HTTP/1.1 server instead (the
one ``overhead.py`` uses, in a process of its own that is not counted): the figure
``overhead.py``'s loopback columns give only through several µs of noise. The kernel's
work for the socket is not counted either, only what the client's process runs.

Each contender runs in a child interpreter under ``valgrind --tool=callgrind``; the child
warms up, then makes its calls inside ``functools.reduce``, and callgrind counts only
inside that function (``--toggle-collect``), so neither start-up nor imports are counted.

    .venv/bin/python benchmarks/instructions.py [--calls N] [--jobs J] [--loopback] [--exact]

Counts still move a little between runs: the garbage collector's passes land on different
calls, and string hashing is randomised per process. To compare two versions or builds,
use ``--exact``: the collector is off in the counted calls and ``PYTHONHASHSEED=0``. A
count then repeats to within a few dozen instructions for one build; two builds of the same
source still differ by up to about 2k (code and objects land at other addresses), so a
change smaller than that is not measured here.

Needs valgrind. Measures the retrysafe the child imports (``PYTHONPATH`` picks a build).
Instructions are not time: the same count runs faster in C than in the interpreter's
dispatch loop, so compare builds by ``overhead.py`` as well.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys

from overhead import loopback_server

#: The child: one contender's calls, counted inside functools.reduce only.
_CHILD = r"""
import asyncio, functools, sys
import httpx

name, calls = sys.argv[1], int(sys.argv[2])
# (a loopback server's URL, or the mock's)
url = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "mock" else "http://api.test/items"


def mock():
    if len(sys.argv) > 4 and sys.argv[4] != "mock":
        return None  # each client's own default transport, over loopback
    return httpx.MockTransport(lambda request: httpx.Response(200, content=b"ok"))


def sync_client():
    if name == "httpx":
        return httpx.Client(transport=mock())
    if name == "retrysafe.Client":
        import retrysafe
        return retrysafe.Client(transport=mock())
    if name == "httpx + RetryTransport":
        import retrysafe
        return httpx.Client(transport=retrysafe.RetryTransport(mock()))
    import httpx_retries
    return httpx.Client(transport=httpx_retries.RetryTransport(mock() or httpx.HTTPTransport()))


def async_client():
    if name == "httpx":
        return httpx.AsyncClient(transport=mock())
    if name == "retrysafe.Client":
        import retrysafe
        return retrysafe.AsyncClient(transport=mock())
    if name == "httpx + RetryTransport":
        import retrysafe
        return httpx.AsyncClient(transport=retrysafe.AsyncRetryTransport(mock()))
    import httpx_retries
    return httpx.AsyncClient(
        transport=httpx_retries.RetryTransport(mock() or httpx.AsyncHTTPTransport())
    )


if len(sys.argv) > 5 and sys.argv[5] == "exact":
    import gc
    gc.disable()  # (after the imports and the client's setup)

if sys.argv[3] == "sync":
    client = sync_client()
    for _ in range(300):
        client.get(url)
    functools.reduce(lambda _, __: client.get(url), range(calls), None)
else:
    client = async_client()
    loop = asyncio.new_event_loop()

    async def many(count):
        for _ in range(count):
            await client.get(url)

    loop.run_until_complete(many(300))
    functools.reduce(lambda _, __: loop.run_until_complete(many(calls)), range(1), None)
"""

CONTENDERS = ("httpx", "retrysafe.Client", "httpx + RetryTransport", "httpx-retries")


def count(
    name: str, mode: str, calls: int, url: str | None = None, *, exact: bool = False
) -> float:
    """Instructions per call of ``name`` in ``mode`` (sync or async); over loopback to
    the server at ``url`` if given, else on MockTransport; ``exact``: see ``--exact``."""
    env = dict(os.environ, PYTHONHASHSEED="0") if exact else None
    finished = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=functools_reduce",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            _CHILD,
            name,
            str(calls),
            mode,
            url if url is not None else "mock",
            *(["exact"] if exact else []),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", finished.stderr)
    if found is None:
        raise RuntimeError(f"callgrind reported no count for {name} ({mode}):\n{finished.stderr}")
    return int(found.group(1)) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls counted per contender")
    parser.add_argument("--jobs", type=int, default=2, help="children run at once")
    parser.add_argument(
        "--loopback", action="store_true", help="over loopback to a local server, not the mock"
    )
    parser.add_argument(
        "--exact",
        action="store_true",
        help="collector off and PYTHONHASHSEED=0: to compare two versions or builds",
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (e.g. apt-get install valgrind)", file=sys.stderr)
        return 2
    names = [
        name
        for name in CONTENDERS
        if name != "httpx-retries" or importlib.util.find_spec("httpx_retries") is not None
    ]
    import retrysafe.compiled

    build = "compiled" if retrysafe.compiled.is_compiled() else "plain Python"
    where = "over loopback" if args.loopback else "on MockTransport"
    exactly = "; collector off, PYTHONHASHSEED=0" if args.exact else ""
    print(f"retrysafe build: {build}; instructions per successful call {where}{exactly}")
    pairs = [(mode, name) for mode in ("sync", "async") for name in names]
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(loopback_server()) if args.loopback else None
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            counted = dict(
                zip(
                    pairs,
                    pool.map(
                        lambda pair: count(pair[1], pair[0], args.calls, url, exact=args.exact),
                        pairs,
                    ),
                    strict=True,
                )
            )
    for mode in ("sync", "async"):
        bare = counted[(mode, "httpx")]
        print(f"\n{mode}\n  {'contender':<28}{'instructions':>14}{'added':>10}")
        for name in names:
            value = counted[(mode, name)]
            print(f"  {name:<28}{value:>14,.0f}{value - bare:>+10,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
