"""Hooks a user may get wrong: an ``async def`` one, and one that keeps raising (trial64)."""

from __future__ import annotations

import logging

import httpx
import pytest

import retrysafe
from retrysafe import RetryPolicy
from retrysafe.observe import RetryEvent
from retrysafe.testing import FakeClock


async def async_hook(event: RetryEvent) -> None:
    pass


class AsyncCallable:
    async def __call__(self, event: RetryEvent) -> None:
        pass


@pytest.mark.parametrize("hook", [async_hook, AsyncCallable()])
def test_an_async_hook_is_refused_with_the_way_out(hook: object) -> None:
    """Called as a plain function it makes a coroutine nobody awaits: it never ran, and
    only a RuntimeWarning most filters hide said so."""
    with pytest.raises(TypeError, match=r"an async one .* would never run; give a plain"):
        retrysafe.AsyncClient(hooks=[hook])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="would never run"):
        retrysafe.RetryTransport(hooks=[hook])  # type: ignore[list-item]


def test_a_hook_that_keeps_raising_is_logged_at_error_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Four events for a call retried once: four tracebacks at ERROR a call, a storm."""

    def broken(event: RetryEvent) -> None:
        raise RuntimeError("the metrics backend is down")

    answers = iter([503, 200, 503, 200])
    transport = httpx.MockTransport(lambda request: httpx.Response(next(answers)))
    caplog.set_level(logging.DEBUG, logger="retrysafe")
    with retrysafe.Client(
        transport=transport, hooks=[broken], clock=FakeClock(), policy=RetryPolicy()
    ) as client:
        assert client.get("https://api.test/").status_code == 200
        assert client.get("https://api.test/").status_code == 200
    failures = [record for record in caplog.records if "event hook" in record.getMessage()]
    assert [record.levelno for record in failures][:1] == [logging.ERROR]
    assert [record.levelno for record in failures].count(logging.ERROR) == 1
    assert len(failures) >= 4  # (the later ones kept, at DEBUG)
    assert failures[0].exc_info is not None


def test_a_hook_that_returns_a_coroutine_is_reported_not_silently_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lambda around an async function passes for a plain hook: what it returns is
    never awaited, so it never ran (review63)."""
    ran: list[str] = []

    async def record(event: RetryEvent) -> None:
        ran.append(event.kind)

    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with retrysafe.Client(transport=transport, hooks=[lambda event: record(event)]) as client:
        assert client.get("https://api.test/").status_code == 200
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is not None
    assert "returned an awaitable" in str(errors[0].exc_info[1])
    assert ran == []


def test_a_class_whose_instances_are_async_is_a_plain_hook() -> None:
    """Calling the class makes an instance, no coroutine (review63: refused before)."""
    retrysafe.Client(hooks=[AsyncCallable]).close()  # type: ignore[list-item]
