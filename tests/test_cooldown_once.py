"""Each attempt waits out one cooldown at most, then goes.

A 429 pauses every caller of its dependency (see ``test_cooldown_scope.py``). When some
of the dependency's calls keep getting 429s (one path limited, or a server turning a
share of its requests away), a new cooldown starts before the last one ends. A call that
waited each one out would never be sent, and would fail at its deadline with
``CooldownActive``: trial60 saw 104 of 240 calls succeed where a plain retrier got all
240. So an attempt that waited one cooldown out is sent, and obeys its own answer;
callers arriving during the new cooldown still wait.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest
from tests.local_http import QuietHandler, serving

import retrysafe
from retrysafe import Governor, RetryPolicy
from retrysafe.governor.guard import DependencyGuard
from retrysafe.testing import FakeClock

DEPENDENCY = "http://api.test:80"


class AnotherCallerIs429d(FakeClock):
    """A clock on which other callers' 429s start new cooldowns while the call sleeps:
    ``starts[n]`` seconds of cooldown at the end of its ``n``-th sleep."""

    def __init__(self, starts: dict[int, float]) -> None:
        super().__init__(randoms=[0.0] * 10)
        self.starts = starts
        self.guard: DependencyGuard | None = None

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        cooldown = self.starts.get(len(self.sleeps))
        if cooldown is not None and self.guard is not None:
            assert self.guard.limiter is not None
            self.guard.limiter.start_cooldown(cooldown)


def cooling(clock: FakeClock, seconds: float) -> tuple[Governor, DependencyGuard]:
    """A governor on ``clock`` whose dependency cools down for ``seconds`` from now."""
    governor = Governor(clock=clock)
    guard = governor.guard(DEPENDENCY)
    assert guard.limiter is not None
    guard.limiter.start_cooldown(seconds)
    return governor, guard


def get_orders(clock: FakeClock, governor: Governor, handler: Any) -> httpx.Response:
    """One GET of /orders, answered by ``handler``, on ``clock`` under ``governor``."""
    with retrysafe.Client(
        transport=httpx.MockTransport(handler), clock=clock, governor=governor
    ) as client:
        return client.get("http://api.test/orders")


def client_on(clock: FakeClock, governor: Governor, seen: list[str]) -> retrysafe.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200)

    return retrysafe.Client(transport=httpx.MockTransport(handler), clock=clock, governor=governor)


def test_an_attempt_that_waited_a_cooldown_out_goes_though_a_new_one_started() -> None:
    clock = AnotherCallerIs429d({1: 6.0})  # (up to twice the one waited: let through)
    governor, guard = cooling(clock, 3)
    clock.guard = guard
    seen: list[str] = []
    with client_on(clock, governor, seen) as client:
        assert client.get("http://api.test/orders").status_code == 200
        assert clock.sleeps == [3.0]  # one cooldown waited out, not the new one too
        assert seen == ["/orders"]
        # A caller arriving now, during the new cooldown, still waits it out.
        assert client.get("http://api.test/orders").status_code == 200
    assert clock.sleeps == [3.0, 6.0]
    assert seen == ["/orders", "/orders"]


def test_a_retry_waits_out_one_cooldown_too() -> None:
    """The rule is per attempt: a retry that finds a cooldown waits it out, and then goes
    though another started meanwhile."""
    # (a cooldown starts as the backoff ends, and another as that one ends)
    clock = AnotherCallerIs429d({1: 3.0, 2: 5.0})
    governor = Governor(clock=clock)
    clock.guard = governor.guard(DEPENDENCY)
    answers = iter([httpx.Response(503), httpx.Response(200)])

    def handler(request: httpx.Request) -> httpx.Response:
        return next(answers)

    response = get_orders(clock, governor, handler)
    assert response.status_code == 200
    assert clock.sleeps == [0.0, 3.0]  # the backoff, then one cooldown: not the second
    assert retrysafe.report_of(response).attempts == 2


def test_a_new_cooldown_longer_than_the_one_waited_holds_the_attempt_again() -> None:
    """Waited out 1 s, the server now asks every caller for 120 s: the attempt is not sent
    two minutes early. (Its deadline is shorter: refused, nothing sent.)"""
    clock = AnotherCallerIs429d({1: 120.0})
    governor, guard = cooling(clock, 1)
    clock.guard = guard
    seen: list[str] = []
    with (
        client_on(clock, governor, seen) as client,
        pytest.raises(retrysafe.CooldownActive) as refused,
    ):
        client.get("http://api.test/orders", policy=RetryPolicy(deadline=30))
    assert refused.value.attempts == 0
    assert clock.sleeps == [1.0]
    assert seen == []


def test_what_an_attempt_waited_is_forgotten_when_the_next_attempt_starts() -> None:
    """The allowance is per attempt: the attempt that waited goes, fails with a 503, and
    its retry waits out the next cooldown like any new caller."""
    clock = AnotherCallerIs429d({1: 2.0})  # (the cooldown waited ends; a new one starts)
    governor, guard = cooling(clock, 2)
    clock.guard = guard
    answers = iter([httpx.Response(503), httpx.Response(200)])

    def handler(request: httpx.Request) -> httpx.Response:
        if len(clock.sleeps) == 1:  # the first attempt's answer starts one more, of 3 s
            guard.limiter.start_cooldown(3)  # type: ignore[union-attr]
        return next(answers)

    response = get_orders(clock, governor, handler)
    assert response.status_code == 200
    # 2 s waited by the first attempt (and a new 2 s let through); the retry then waits
    # the 3 s cooldown out in full (the backoff, 0 here, first).
    assert clock.sleeps[0] == 2.0
    assert clock.sleeps[-1] == 3.0


def test_a_cooldown_longer_than_the_deadline_still_refuses_at_once() -> None:
    clock = FakeClock()
    governor, _ = cooling(clock, 60)
    seen: list[str] = []
    with (
        client_on(clock, governor, seen) as client,
        pytest.raises(retrysafe.CooldownActive) as refused,
    ):
        client.get("http://api.test/orders", policy=RetryPolicy(deadline=5))
    assert (refused.value.attempts, refused.value.retry_after) == (0, 60)
    assert clock.sleeps == []
    assert seen == []


class SearchLimited(QuietHandler):
    """``/search`` turns every other request away with a 429 (``Retry-After: 1``);
    ``/orders`` always answers."""

    counter: ClassVar[Iterator[int]] = itertools.count()
    lock: ClassVar[threading.Lock] = threading.Lock()
    seen: ClassVar[collections.Counter[str]] = collections.Counter()

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        with self.lock:
            turned_away = path == "/search" and next(self.counter) % 2 == 0
            self.seen[f"{path} {429 if turned_away else 200}"] += 1
        if turned_away:
            self.send_response(429)
            self.send_header("Retry-After", "1")
        else:
            self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def test_over_sockets_one_limited_path_does_not_starve_its_neighbours() -> None:
    """Calls to /search and /orders, ten a second each for 2 s, where /search turns half
    its requests away with ``Retry-After: 1``: a new cooldown starts every 0.2 s. Every
    /orders call succeeds, and no call ends without being sent. (Before, callers waited
    one cooldown after another until their deadline, and most failed unsent.)"""
    SearchLimited.seen.clear()
    outcomes: collections.Counter[str] = collections.Counter()
    policy = RetryPolicy(deadline=4, attempt_timeout=2)

    async def call(client: retrysafe.AsyncClient, url: str, path: str) -> None:
        try:
            response = await client.get(url + path)
            outcomes[f"{path} {response.status_code}"] += 1
        except retrysafe.ApiError as error:
            sent = "sent" if error.attempts else "never sent"
            outcomes[f"{path} {type(error).__name__}, {sent}"] += 1

    async def traffic(url: str) -> None:
        async with retrysafe.AsyncClient(policy=policy) as client:
            calls = []
            for _ in range(20):
                for path in ("/search", "/orders"):
                    calls.append(asyncio.create_task(call(client, url, path)))
                await asyncio.sleep(0.1)
            await asyncio.gather(*calls)

    started = time.monotonic()
    with serving(SearchLimited, many_at_once=True) as url:
        asyncio.run(traffic(url))
    assert outcomes["/orders 200"] == 20, (outcomes, SearchLimited.seen)
    assert not [outcome for outcome in outcomes if outcome.endswith("never sent")], outcomes
    # /search: some calls run out of time for the server's waits (RetryAfterTooLong, as a
    # plain retrier's would); most succeed.
    assert outcomes["/search 200"] >= 10, outcomes
    # The load stays bounded: at most one attempt per call per cooldown.
    assert SearchLimited.seen["/search 429"] + SearchLimited.seen["/search 200"] <= 60
    assert time.monotonic() - started < 10


def test_a_wait_for_a_cooldown_is_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    """The call takes that much longer with no retry of its own to show for it: without a
    line, 1.9 s of latency had no cause anywhere (trial64)."""
    clock = FakeClock(randoms=[0.0] * 4)  # (no jitter on top of the 2 s)
    governor, _ = cooling(clock, 2)
    caplog.set_level(logging.INFO, logger="retrysafe")
    response = get_orders(clock, governor, lambda request: httpx.Response(200))
    assert response.status_code == 200
    lines = [record.getMessage() for record in caplog.records if "waits" in record.getMessage()]
    assert lines == [
        "GET http://api.test/orders [http://api.test:80] waits 2.00 s for the dependency's "
        "cooldown (another call's answer paused every caller: a 429, a used-up rate limit, "
        "or a shared 503's Retry-After) before attempt 1"
    ]


def test_the_wait_line_escapes_what_a_dependency_name_holds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A dependency named from the request must not forge a second log line (review63)."""
    clock = FakeClock(randoms=[0.0] * 4)
    governor = Governor(clock=clock)
    forged = "pay\nINFO forged line"
    guard = governor.guard(forged)
    assert guard.limiter is not None
    guard.limiter.start_cooldown(1)
    caplog.set_level(logging.INFO, logger="retrysafe")
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(
        transport=transport, clock=clock, governor=governor, dependency=forged
    ) as client:
        assert client.get("http://api.test/orders").status_code == 200
    (line,) = [r.getMessage() for r in caplog.records if "waits" in r.getMessage()]
    assert "\n" not in line
    assert "[pay\\x0aINFO forged line]" in line
