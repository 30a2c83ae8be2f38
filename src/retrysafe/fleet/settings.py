"""FleetSettings: how a RedisFleet votes, how fresh its view is, how long it waits on Redis."""

from __future__ import annotations

import dataclasses

from retrysafe.validation import check, check_number

__all__ = ["FleetSettings"]


def _seconds(field: str, value: float) -> None:
    check_number("FleetSettings", field, value, positive=True, infinite_ok=False, unit=" seconds")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FleetSettings:
    """How the processes of a fleet share the load protection of their dependencies.

    The fleet breaker opens when at least ``quorum`` processes, or ``quorum_share`` of
    the processes alive (whichever is fewer), have each voted that the dependency fails,
    and never on fewer than two votes: one process's word (its own network broken) opens
    only its own, local breaker. A process votes after ``vote_after`` failing calls in a
    row (or when its local breaker opens); a vote counts for ``vote_window`` seconds and
    is withdrawn when the process next sees a healthy call.

    Why these defaults:

    - ``timeout=0.005``: no call waits more than 5 ms on Redis (a loopback round trip is
      ~0.1 ms); a slower answer means Redis is in trouble, and the call goes on with local
      protection. ``background_timeout=0.25`` is the background refresher's, which no
      call waits on.
    - ``refresh_every=0.1``: every process reads the fleet's state at least ten times a
      second (and at once when another process publishes a change), so a change missed on
      pub/sub reaches everyone within about 0.1 s plus a round trip.
    - ``vote_after=20``: the evidence that opens a local breaker by default (its
      ``consecutive_failures``). With five, a merely flaky dependency (half its answers
      503s, to many concurrent calls) gave runs of five often enough in several processes
      at once to open the fleet breaker, while every local breaker stayed closed; the
      fleet must be no quicker to refuse than one process alone.
    - ``quorum=3``, ``quorum_share=0.5``: three processes, or half of a small fleet.
    - ``alive_for=3``: a process that has not been heard from for 3 s (30 refreshes) is
      gone and no longer counted as alive.
    - ``share_503_retry_after=False``: one 503's ``Retry-After`` does not pause the
      fleet. A single backend that is draining sends one, and local protection waits on
      it only in the retrying call (and as the breaker's open period); shared, 1 % of
      such answers refused 94 % of two members' calls. Turn it on for an API whose 503s
      speak for the whole service (a maintenance window).
    """

    quorum: int = 3
    quorum_share: float = 0.5
    vote_after: int = 20
    vote_window: float = 30.0
    refresh_every: float = 0.1
    alive_for: float = 3.0
    timeout: float = 0.005
    background_timeout: float = 0.25
    share_503_retry_after: bool = False

    def __post_init__(self) -> None:
        owner = "FleetSettings"
        check(
            isinstance(self.quorum, int) and self.quorum >= 2,
            owner,
            "quorum",
            f"must be an int >= 2 (one process's word never opens the fleet breaker), "
            f"got {self.quorum!r}",
        )
        check_number(owner, "quorum_share", self.quorum_share, positive=True, infinite_ok=False)
        check(
            self.quorum_share <= 1,
            owner,
            "quorum_share",
            f"must be <= 1, got {self.quorum_share!r}",
        )
        check(
            isinstance(self.vote_after, int) and self.vote_after >= 1,
            owner,
            "vote_after",
            f"must be an int >= 1, got {self.vote_after!r}",
        )
        for field in ("vote_window", "refresh_every", "alive_for", "timeout", "background_timeout"):
            _seconds(field, getattr(self, field))
        check(
            self.alive_for > self.refresh_every,
            owner,
            "alive_for",
            f"must be longer than refresh_every ({self.alive_for!r} <= {self.refresh_every!r}): "
            "a process heartbeats once per refresh",
        )
