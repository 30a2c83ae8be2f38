"""``retrysafe.deadline(seconds)``: who sees the scope, and what it accepts.

Calls go to an ``httpx.MockTransport`` on a ``FakeClock``: no socket, no real wait.
"""

from __future__ import annotations

import contextvars
import threading

import anyio
import httpx
import pytest

import retrysafe
from retrysafe.deadline_scope import current_deadline
from retrysafe.testing import FakeClock

pytestmark = pytest.mark.anyio


def test_a_zero_second_scope_is_allowed_and_lets_no_attempt_start() -> None:
    clock = FakeClock()
    sent: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    with (
        retrysafe.Client(transport=httpx.MockTransport(upstream), clock=clock) as client,
        retrysafe.deadline(0, clock=clock) as scope,
    ):
        assert scope.remaining() == 0
        with pytest.raises(retrysafe.DeadlineExceeded) as caught:
            client.get("https://api.test/")
    assert caught.value.attempts == 0
    assert sent == []


def test_a_loose_scope_does_not_lengthen_a_calls_own_deadline() -> None:
    # The policy gives the call 2 s; a 60 s scope around it must not give it more: a
    # Retry-After of 3 s does not fit, as it would not outside the scope.
    clock = FakeClock()
    sent: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(503, headers={"Retry-After": "3"})

    policy = retrysafe.RetryPolicy(deadline=2)
    transport = httpx.MockTransport(upstream)
    with (
        retrysafe.Client(transport=transport, clock=clock, policy=policy) as client,
        retrysafe.deadline(60, clock=clock),
        pytest.raises(retrysafe.RetryAfterTooLong),
    ):
        client.get("https://api.test/")
    assert len(sent) == 1
    assert clock.sleeps == []


def test_a_scope_cannot_be_entered_twice_even_after_it_ended() -> None:
    scope = retrysafe.deadline(5, clock=FakeClock())
    with scope, pytest.raises(RuntimeError, match="cannot be entered twice"), scope:
        pass
    assert current_deadline() is None
    with pytest.raises(RuntimeError, match="cannot be entered twice"), scope:
        pass
    assert current_deadline() is None


def test_a_scope_ended_by_an_exception_is_left() -> None:
    clock = FakeClock()
    with retrysafe.deadline(5, clock=clock) as outer:
        with pytest.raises(KeyError), retrysafe.deadline(1, clock=clock):
            raise KeyError("boom")
        assert current_deadline() is outer
    assert current_deadline() is None


def test_a_thread_started_in_a_scope_does_not_see_it_unless_run_in_a_copy() -> None:
    seen: dict[str, object] = {}

    def look(name: str) -> None:
        seen[name] = current_deadline()

    with retrysafe.deadline(5, clock=FakeClock()) as scope:
        plain = threading.Thread(target=look, args=("plain",))
        copied = threading.Thread(target=contextvars.copy_context().run, args=(look, "copied"))
        for thread in (plain, copied):
            thread.start()
            thread.join()
    assert seen == {"plain": None, "copied": scope}


async def test_a_scope_one_task_enters_is_not_seen_by_its_sibling() -> None:
    clock = FakeClock()
    entered = anyio.Event()
    looked = anyio.Event()
    seen: dict[str, object] = {}

    async def in_a_scope() -> None:
        with retrysafe.deadline(5, clock=clock) as scope:
            seen["own"] = scope
            entered.set()
            await looked.wait()

    async def sibling() -> None:
        await entered.wait()
        seen["sibling"] = current_deadline()
        looked.set()

    async with anyio.create_task_group() as group:
        group.start_soon(in_a_scope)
        group.start_soon(sibling)
    assert seen["sibling"] is None
    assert seen["own"] is not None
    assert current_deadline() is None


async def test_tasks_started_in_a_scope_share_it() -> None:
    clock = FakeClock()
    seen: list[object] = []

    async def look() -> None:
        seen.append(current_deadline())

    async with retrysafe.deadline(5, clock=clock) as scope, anyio.create_task_group() as group:
        group.start_soon(look)
        group.start_soon(look)
    assert seen == [scope, scope]
