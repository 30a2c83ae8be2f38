"""How long to wait before the next attempt, and whether a repeat is safe at all.

Pure arithmetic over a policy, a deadline and a random number: the engine asks,
nothing here keeps state.
"""

from __future__ import annotations

from retrysafe.classify import Verdict
from retrysafe.policy import RetryPolicy
from retrysafe.timing import Deadline, backoff_delay

__all__ = ["backoff_wait", "hinted_wait", "safe_to_repeat"]


def hinted_wait(hint: float, policy: RetryPolicy, deadline: Deadline, rand: float) -> float | None:
    """The wait for a server's hint: the hint plus jitter on top, or None if too long.

    Jitter is never subtracted and never reaches into the time kept for the next
    attempt, so clients told the same time spread out without any coming back
    early or running out of time.
    """
    if policy.max_retry_after is not None and hint > policy.max_retry_after:
        return None
    room = deadline.remaining() - policy.min_attempt_time - hint
    if room < 0:
        return None
    return hint + min(policy.retry_after_jitter * rand, room)


def backoff_wait(
    retries_so_far: int, policy: RetryPolicy, deadline: Deadline, rand: float
) -> float | None:
    """Full-jitter backoff before retry number ``retries_so_far + 1``, drawn within the
    time the deadline leaves after a minimal attempt; None if even retrying at once would
    not leave one.

    The draw is capped by that room rather than checked against it: whether a call with
    time and attempts left gives up must not hang on its random number. (Checked, a 3 s
    deadline with ``backoff_base=2`` gave up after 0.6 s whenever the draw came out long,
    where a shorter draw, as likely, would have retried.)
    """
    room = deadline.remaining() - policy.min_attempt_time
    if room < 0:
        return None
    return backoff_delay(retries_so_far, policy.backoff_base, min(policy.backoff_cap, room), rand)


def safe_to_repeat(
    verdict: Verdict,
    *,
    method: str,
    keyed: bool,
    replayable: bool,
    responded: bool,
    policy: RetryPolicy,
) -> bool:
    """Repeat only what cannot do the work twice, with bytes we can send again.

    A body that cannot be replayed (a stream) is spent once written: only a request
    that never reached the server is intact. Otherwise an idempotent method, an
    idempotency key, or a server that surely did not act makes a repeat safe.
    """
    if not replayable:
        return not responded and verdict.processed == "no"
    return method in policy.idempotent_methods or keyed or verdict.processed == "no"
