"""Spreading independent simulation jobs over processes (each job is seeded on its own,
so the answer does not depend on how many workers ran it)."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["default_workers", "run_jobs"]

Job = TypeVar("Job")
Result = TypeVar("Result")


def default_workers() -> int:
    """One worker per CPU this process may use, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


def run_jobs(work: Callable[[Job], Result], jobs: Sequence[Job], workers: int) -> list[Result]:
    """``[work(job) for job in jobs]``, over ``workers`` processes when that is more than 1.

    Jobs that cannot be sent to another process (a policy with a rule defined
    inside a function, say) run here instead.
    """
    if workers <= 1 or len(jobs) <= 1:
        return [work(job) for job in jobs]
    try:
        pickle.dumps((work, jobs))
    except (pickle.PicklingError, AttributeError, TypeError):
        return [work(job) for job in jobs]
    context = multiprocessing.get_context(_start_method())
    # Its workers leave Ctrl-C to this process (a terminal sends it to the whole process
    # group), which stops them all at once; a worker that dies (killed, out of memory)
    # raises BrokenProcessPool here rather than leaving its job waited for.
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=_leave_interrupts_to_the_parent
    )
    # (submitted one by one, not with map(): interrupted, map() cancels what is left)
    futures = [pool.submit(work, job) for job in jobs]
    try:
        results = [future.result() for future in futures]
    except BaseException:
        # Ctrl-C (or a job's failure): the workers are stopped now, rather than waited
        # for job after job. The jobs not started are left to fail with the broken pool,
        # not cancelled first: cancelled, the pool's own thread could fail on them with
        # an InvalidStateError traceback.
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=False)
        raise
    pool.shutdown()
    return results


def _start_method() -> str:
    """How the workers start: ``fork`` where that is safe, a fresh interpreter elsewhere.

    A fork copies only the thread that calls it: a lock another thread held stays held
    in the copy, and the first worker to take it waits forever (the deadlock Python 3.12
    warns of with a DeprecationWarning). So ``fork`` (fast: nothing is imported again)
    is used only on Linux, and only while this process runs no other thread. Else, on
    Linux, ``forkserver`` (forks from a process of its own that runs one thread), and
    ``spawn`` elsewhere (macOS and Windows default to it). The jobs are known to pickle
    (see run_jobs), which both of those need.
    """
    if not sys.platform.startswith("linux"):
        return "spawn"
    return "fork" if threading.active_count() == 1 else "forkserver"


def _leave_interrupts_to_the_parent() -> None:
    """In a worker: ignore SIGINT (a terminal's Ctrl-C reaches the whole process group)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
