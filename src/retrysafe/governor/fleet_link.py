"""What a governor asks of a fleet, and the fleet's state as one process sees it.

Kept apart from :mod:`retrysafe.governor.fleet_guard` so that the governor can name
:class:`FleetLink` in its signature without importing the guard (which imports the
governor). Nothing here imports redis.
"""

from __future__ import annotations

from typing import Literal, Protocol

from retrysafe.clock import Clock
from retrysafe.governor.limiter import Limiter
from retrysafe.named_tuple import NamedTuple

__all__ = ["FleetLink", "FleetView", "ProbeAnswer", "ProbeKind"]

#: The fleet's answer to "may I be the half-open probe?": ``closed`` (no fleet breaker
#: any more), ``open`` (for ``seconds`` more), ``granted`` (you are the probe, under
#: ``token``), ``busy`` (another process probes; its lease ends in ``seconds``).
ProbeKind = Literal["closed", "open", "granted", "busy"]


class ProbeAnswer(NamedTuple):
    """What the fleet said to a request for its half-open probe (a named tuple: it is
    defined by ``import retrysafe``, where a frozen dataclass costs ten times more)."""

    kind: ProbeKind
    seconds: float = 0.0
    token: str = ""


#: How much later an open period's end must be than the one known to be a new period
#: (the shortest is 0.5 s); a half-open state read again ends when it was read.
_NEW_PERIOD = 0.25


class FleetView:
    """The fleet's state of one dependency, as this process last heard it.

    Written by the fleet's background refresher (and by this process when it learns
    something first); read without a lock by every call. Times are the fleet clock's
    monotonic seconds. ``calm`` is True when neither a fleet cooldown nor a fleet
    breaker holds calls back: the one attribute the healthy path reads.
    """

    __slots__ = (
        "calm",
        "cooldown_until",
        "failing",
        "fallback",
        "open_until",
        "probing_until",
        "voted",
    )

    def __init__(self) -> None:
        self.calm = True
        #: When the fleet-wide cooldown ends (0.0: none).
        self.cooldown_until = 0.0
        #: When the fleet breaker's open period ends (None: the fleet breaker is closed);
        #: a time in the past means half-open: one probe for the whole fleet.
        self.open_until: float | None = None
        #: Failing calls in a row this process saw since it last voted (approximate
        #: under threads: a vote a little early or late changes nothing).
        self.failing = 0
        #: Whether this process's vote to open the fleet breaker stands.
        self.voted = False
        #: The local limiter paced attempts fall back to while the fleet is away.
        self.fallback: Limiter | None = None
        #: Half-open, until when another process holds the fleet's one probe, as the
        #: fleet last answered (0.0: not known to be held): calls are refused till then
        #: without asking again, one round trip each (trial94).
        self.probing_until = 0.0

    def learn(self, cooldown_until: float, open_until: float | None) -> None:
        """Take in the fleet's state (times already in this process's monotonic seconds;
        ``cooldown_until`` 0.0 for none, ``open_until`` None for a closed breaker). A new
        state of the breaker (the probe's outcome) ends a probe known to be held."""
        was = self.open_until
        if open_until is None or (was is not None and open_until > was + _NEW_PERIOD):
            # (closed, or open again; a half-open read's end is the time it was read,
            # later by a refresh each time, and is no news of the probe: review88)
            self.probing_until = 0.0
        self.cooldown_until = cooldown_until
        self.open_until = open_until
        self.calm = cooldown_until == 0.0 and open_until is None

    def unheard(self) -> None:
        """This process has not heard the fleet yet (a child just forked): not calm until
        its next read, so that a call takes the fleet's way, which joins it."""
        self.calm = False

    def forget_breaker(self) -> None:
        """The fleet breaker is unknown (the fleet is away): local protection decides."""
        self.open_until = None
        self.probing_until = 0.0
        self.calm = self.cooldown_until == 0.0

    def __repr__(self) -> str:
        return (
            f"FleetView(calm={self.calm}, cooldown_until={self.cooldown_until:.3f}, "
            f"open_until={self.open_until!r})"
        )


class FleetLink(Protocol):
    """What a governor asks of a fleet (``retrysafe.fleet.RedisFleet`` provides it).

    Every method returns at once or within the fleet's short timeout (what only tells
    the fleet something may be sent in the background); a method that returns ``None``
    (or False) means the fleet did not answer, and the caller goes on with local
    protection. None of them raises.
    """

    @property
    def clock(self) -> Clock: ...

    #: Consecutive failing calls after which a process votes to open the fleet breaker.
    @property
    def vote_after(self) -> int: ...

    #: Whether a 503's Retry-After starts a fleet-wide cooldown.
    @property
    def share_503_retry_after(self) -> bool: ...

    #: The settings that open the fleet breaker, with their values (for a refusal's message).
    @property
    def quorum_rule(self) -> str: ...

    def view(self, dependency: str) -> FleetView: ...

    def live_processes(self) -> int: ...

    def reserve(self, dependency: str, rate: float, burst: int, max_wait: float) -> float | None:
        """Reserve a paced slot in the fleet; seconds to wait for it, None if no answer,
        ``QUEUE_FULL`` (nothing reserved) if it would be more than ``max_wait`` away."""
        ...

    def reserve_slot(
        self,
        dependency: str,
        rate: float,
        burst: int,
        max_wait: float,
        *,
        beyond: float | None = None,
    ) -> tuple[float, float] | None:
        """As :meth:`reserve`, and which slot it is (for :meth:`release`). With
        ``beyond``, only a slot further than that many seconds away, looked at and
        reserved at once; ``(0.0, 0.0)``, nothing reserved, for a sooner one."""
        ...

    def release(self, dependency: str, rate: float, slot: float | None = None) -> bool:
        """Give a reserved slot back (only the last one of the schedule goes back); False
        if the fleet is away (give it back locally)."""
        ...

    def share_cooldown(self, dependency: str, seconds: float) -> None: ...

    def vote(self, dependency: str, open_for: float, max_open_for: float) -> bool:
        """This process saw the dependency fail; False if the fleet is away."""
        ...

    def retract(self, dependency: str) -> None: ...

    def acquire_probe(self, dependency: str, lease: float) -> ProbeAnswer | None: ...

    def report_probe(
        self,
        dependency: str,
        token: str,
        *,
        healthy: bool,
        open_for: float | None,
        up_to: float,
        max_open_for: float,
    ) -> bool:
        """The half-open probe's outcome. A healthy one closes the fleet breaker; a failed
        one opens it again for ``open_for`` (a Retry-After's) or, when None, for twice its
        last period up to ``up_to`` (the fleet's view learns which). False if the fleet is
        away."""
        ...

    def release_probe(self, dependency: str, token: str) -> None: ...
