"""The copy threads of the sync hedging shell: reused while idle, never queued behind."""

from __future__ import annotations

import threading
import time

import pytest

from retrysafe import hedge_threads


def test_a_finished_thread_runs_the_next_copy_and_a_busy_one_is_never_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hedge_threads, "_IDLE_FOR", 0.3)
    threads = hedge_threads._Threads()
    ran: list[threading.Thread] = []
    done = threading.Event()
    threads.run(lambda: (ran.append(threading.current_thread()), done.set()))
    assert done.wait(5)
    time.sleep(0.02)  # let it become idle
    done.clear()
    threads.run(lambda: (ran.append(threading.current_thread()), done.set()))
    assert done.wait(5)
    assert ran[0] is ran[1]  # the idle thread was reused
    # One copy blocks its thread: the next one gets another thread at once.
    release = threading.Event()
    second = threading.Event()
    time.sleep(0.02)
    threads.run(release.wait)
    threads.run(second.set)
    assert second.wait(5)
    release.set()


def test_an_idle_thread_ends_after_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hedge_threads, "_IDLE_FOR", 0.05)
    threads = hedge_threads._Threads()
    started: list[threading.Thread] = []
    done = threading.Event()
    threads.run(lambda: (started.append(threading.current_thread()), done.set()))
    assert done.wait(5)
    started[0].join(5)
    assert not started[0].is_alive()
    assert threads._idle == 0
