"""The values that pass between the engine and a shell.

They are small immutable tuples (``NamedTuple``): one or more of them is made
for every call, and a tuple costs a third of a frozen dataclass to build.

A shell drives a :class:`~retrysafe.engine.Call` and gets back one of these
plain values: a :class:`AttemptPlan` to send, a :class:`ReadBody` to finish
reading a response, an :class:`AskRetry` to put to the governor, a
:class:`Wait` to sleep, a :class:`Succeed` to return or a :class:`Fail` to
give up with. Facts flow the other way: an :class:`Admission` and a
:class:`RetryAnswer` are the governor's answers. What the shell must do on the
side (record health, start a cooldown, emit an event...) the engine leaves in
its outbox as effects (:data:`Effect`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

import httpx

from retrysafe.attempt_plan import AttemptPlan
from retrysafe.errors import ApiError, AttemptRecord
from retrysafe.named_tuple import NamedTuple

if TYPE_CHECKING:
    from retrysafe.governor.breaker import Health, Permit
    from retrysafe.observe import RetryEvent

__all__ = [
    "ERROR_BODY_READ_AT_MOST",
    "OPEN_ADMISSION",
    "Admission",
    "AskRetry",
    "AttemptPlan",
    "AwaitOthers",
    "CallReport",
    "Decision",
    "DeferFailure",
    "Effect",
    "EmitEvent",
    "Fail",
    "Hedge",
    "HedgeAnswer",
    "ReadBody",
    "RecordHealth",
    "RecordLatency",
    "ReleasePacing",
    "ReleaseProbe",
    "RetryAnswer",
    "RetryEnded",
    "StartCooldown",
    "Succeed",
    "Wait",
]


class CallReport(NamedTuple):
    """What a call did; :func:`retrysafe.report_of` reads it from the response.

    An immutable record (a named tuple: one is made for every call, cheaply).
    """

    attempts: int
    waits: tuple[float, ...]
    elapsed: float
    idempotency_key: str | None
    dependency: str
    history: tuple[AttemptRecord, ...]
    error: ApiError | None = None
    #: Hedged copies sent (beyond the first copy of each attempt); 0 without hedging.
    hedges: int = 0
    #: The number of the attempt whose answer the call returns, when it hedged
    #: (``history`` has every copy; cancelled losers have outcome ``"hedge_lost"``).
    winner: int | None = None


# -- actions: what the shell does next -------------------------------------------------


class ReadBody(NamedTuple):
    """Read the response body within the attempt, then report the attempt again
    (``attempt_returned``; or, if the read fails, ``attempt_raised`` with the response
    as ``answer``).

    A streamed call's body is the caller's, and a non-streamed call's error answer is
    left unread until the engine has seen its headers; the engine needs the body to
    judge a failure whose verdict the body may change, to report an error that carries
    it, or when a rule reads it.
    """

    plan: AttemptPlan
    #: Read at most this many bytes of the decoded body, closing the rest unread (None:
    #: all of it). Set for a streamed call whose error answer's body is read only for
    #: the error it raises (:data:`ERROR_BODY_READ_AT_MOST`): that caller asked not to
    #: hold a body in memory, and gets an error, not the answer.
    at_most: int | None = None


#: The most of an error answer's decoded body a streamed call that raises reads for the
#: error (bytes): well past what the error keeps (``ApiError.body``: 64 KiB, and a margin
#: to scrub a secret the cut crosses), so an error page is read whole, while a huge one
#: (a 64 MB 404 took 139 MB of memory, where bare httpx's unread stream took 8) is not
#: downloaded past it. The error's ``response`` then holds the bytes read.
ERROR_BODY_READ_AT_MOST: Final = 1024 * 1024


class AskRetry(NamedTuple):
    """Ask the governor whether a retry after ``wait`` seconds may happen.

    ``spends_budget`` is False for waits the server asked for because we were too
    fast (a 429, a key in use), and for the retry of a request the client's own queue
    held back, never sent (a pool timeout, an HTTP/2 stream limit): those add no load
    the retry budget is there to bound.
    """

    wait: float
    spends_budget: bool


class Wait(NamedTuple):
    """Sleep ``seconds``, then ask for the next attempt."""

    seconds: float


class Succeed(NamedTuple):
    """Return ``response``: the call succeeded (or reached a final, stored answer)."""

    response: httpx.Response
    report: CallReport


class Fail(NamedTuple):
    """Give up with ``error``; ``response`` is the last response, ``cause`` the last exception."""

    error: ApiError
    response: httpx.Response | None
    cause: BaseException | None
    report: CallReport
    #: This call (or one nested in it) already retried: an enclosing retrying call
    #: must not retry the same failure again.
    retried: bool = False


class Hedge(NamedTuple):
    """Start a hedged copy at monotonic time ``at``, unless an answer came first.

    The shell first asks the governor (:class:`HedgeAnswer`), then gives the answer
    to ``Call.start_hedge``, which plans the copy or declines.
    """

    at: float


class AwaitOthers(NamedTuple):
    """The copy under ``plan`` failed, but another copy is still in flight: keep waiting."""

    plan: AttemptPlan


#: What a step of the engine can ask of the shell.
Decision = AttemptPlan | ReadBody | AskRetry | Wait | Succeed | Fail | AwaitOthers


# -- facts: the governor's answers -----------------------------------------------------


class Admission(NamedTuple):
    """The governor's answer to "may an attempt start now?".

    ``cooldown``: seconds a dependency-wide cooldown still runs (nothing reserved).
    ``pacing``: seconds until the paced slot reserved for this call comes up.
    ``permit``: the breaker's answer (None when there is no breaker).
    ``queue_full``: the pacing queue already reaches ``max_cooldown`` ahead, so no slot
    was reserved and the attempt must not go; ``pacing`` is then the time until the
    queue has room for one more.
    ``slot``: which paced slot was reserved, as the governor tells them apart (handed
    back in :class:`ReleasePacing` if the call does not use it).
    """

    cooldown: float = 0.0
    pacing: float = 0.0
    permit: Permit | None = None
    #: When the answer holds the call back: the setting behind it, with its numbers.
    detail: str = ""
    queue_full: bool = False
    slot: float = 0.0


#: The answer when no governor stands in the way.
OPEN_ADMISSION = Admission()


class RetryAnswer(NamedTuple):
    """The governor's answer to :class:`AskRetry`: ``refusal`` None means granted.

    A refusal says when the governor would grant it (``retry_after``, if known) and
    ``detail``: the setting behind it, with its numbers.

    With pacing on, a grant may come with a paced slot already reserved: ``pacing``
    seconds away (more than the wait asked for), named ``slot`` as in
    :class:`Admission`, and ``detail`` saying so. The retry then waits for its slot
    rather than its own wait, holding it, and keeps its place in the queue: asked for
    only after the wait, the slot could lie past the deadline by then.
    """

    refusal: Literal["circuit_open", "budget_exhausted"] | None = None
    retry_after: float | None = None
    detail: str = ""
    pacing: float = 0.0
    slot: float = 0.0


class HedgeAnswer(NamedTuple):
    """The governor's answer to "may a hedged copy go now?": ``refusal`` None means yes
    (a budget token was spent, and a paced slot taken if pacing is on)."""

    refusal: Literal["circuit_not_closed", "cooldown", "pacing", "budget_exhausted"] | None = None


# -- effects: what the shell does on the side ------------------------------------------


class RecordHealth(NamedTuple):
    """Tell the breaker what the attempt sent under ``permit`` said about the dependency.

    ``repeat``: the attempt was a retry within one call, so its outcome is not new
    evidence of the same weight as another caller's (a call failing five times is
    one failing call, not five).

    ``seconds``: how long the attempt took, given for a success and for a timeout. The
    breaker learns from successes how long the dependency's healthy answers take, and a
    timeout shorter than those says nothing against it: the caller's own limit (a
    short ``attempt_timeout``, a deadline nearly spent) cut an answer still coming.
    """

    permit: Permit
    health: Health
    open_for: float | None
    repeat: bool = False
    seconds: float | None = None


class StartCooldown(NamedTuple):
    """Pause every caller of the dependency for ``seconds``: a 429's Retry-After, or
    (``announced``) the reset of a rate limit the server announced used up."""

    seconds: float
    announced: bool = False


class ReleasePacing(NamedTuple):
    """Give back the paced slot the call reserved but will not use: ``slot``, as the
    governor's :class:`Admission` named it (None: the last one reserved)."""

    slot: float | None = None


class RefundBudget(NamedTuple):
    """Give back the retry-budget ``tokens`` a granted retry spent and never used: the
    call was cancelled while it waited to send it, or ended before it could."""

    tokens: float = 1.0


class DeferFailure(NamedTuple):
    """The retry that was to confirm the call's first failure (``record``, held back)
    will not be sent: the retry budget refused it, or the call was cancelled in its
    backoff. Let the breaker keep the failure until another call's retry decides (see
    :meth:`~retrysafe.governor.CircuitBreaker.defer_failure`)."""

    record: RecordHealth


class RetryEnded(NamedTuple):
    """A retry of a call that had failed ended: ``failed`` again, or it succeeded. It
    decides the failures the breaker deferred (:class:`DeferFailure`)."""

    failed: bool


class ReleaseProbe(NamedTuple):
    """Give back the breaker's permit of an attempt that ended with no outcome."""

    permit: Permit


class EmitEvent(NamedTuple):
    """Log ``event`` and hand it to the hooks; ``body_excerpt`` is for the log only."""

    event: RetryEvent
    body_excerpt: str = ""


class RecordLatency(NamedTuple):
    """An attempt of a hedging call took ``seconds`` (at least: ``censored`` when it was
    cancelled because another copy won); learned for percentile hedging."""

    seconds: float
    censored: bool = False


Effect = (
    RecordLatency
    | RecordHealth
    | StartCooldown
    | ReleasePacing
    | ReleaseProbe
    | RefundBudget
    | DeferFailure
    | RetryEnded
    | EmitEvent
)
