"""AttemptPlan: the engine's word to a shell to send one attempt, within its time.

Apart from the other decisions (decisions.py re-exports it) because every call
makes one and reads it several times: the compiled build (``docs/cost.md``)
compiles this module, so building one and reading its fields costs no Python
frame and no attribute lookup by name. (The other decisions are named tuples
whose annotations name types only imported for type checking, which a compiled
module would have to import at run time.)
"""

from __future__ import annotations

from typing import Final

__all__ = ["HARD_END_GRACE", "AttemptPlan", "hard_end_after", "phase_limit", "plan_attempt"]

#: How long after its phases' time limit (:func:`phase_limit`) the shells end an attempt.
HARD_END_GRACE: Final = 0.05


class AttemptPlan:
    """Send attempt ``number`` (1-based) with at most ``timeout`` seconds for it.

    ``read_body``: read a success's whole body inside the attempt (a call that does
    not stream: see :meth:`reads_at_once`); otherwise only the headers are the
    attempt's, and the engine asks for the body (:class:`ReadBody`) when it needs it.
    ``cut_by_deadline``: the deadline, not the policy's per-attempt limit, bounds the
    attempt (see :func:`plan_attempt`).
    """

    __slots__ = ("cut_by_deadline", "number", "read_body", "timeout")

    def __init__(self, number: int, timeout: float, cut_by_deadline: bool, read_body: bool) -> None:
        self.number = number
        self.timeout = timeout
        self.cut_by_deadline = cut_by_deadline
        self.read_body = read_body

    def reads_at_once(self, status: int) -> bool:
        """Whether the shell reads the body of an answer with ``status`` as soon as its
        headers come: a success (below 400) of a call that does not stream. An error
        answer's body is read only when the engine asks (:class:`ReadBody`), after it
        has seen the headers: a final answer is then not lost to a body that never
        arrives (see ``Call.attempt_raised``)."""
        return self.read_body and status < 400

    def __repr__(self) -> str:
        return f"AttemptPlan(number={self.number}, timeout={self.timeout!r})"


def plan_attempt(
    number: int, attempt_timeout: float, remaining: float, read_body: bool
) -> AttemptPlan:
    """The plan of attempt ``number``, ``remaining`` seconds (> 0) before the deadline,
    under a policy's ``attempt_timeout``: its time is the shorter of the two.

    The deadline cuts it when the attempt's own hard end (its limit and
    :data:`HARD_END_GRACE`) would fall past the deadline: then its phases are
    shortened (:func:`phase_limit`) and it ends on the deadline. (Judged by the limit
    alone, an attempt given 1.0 s with 1.03 s left ended 22 ms past the deadline.)"""
    cut = remaining < attempt_timeout + HARD_END_GRACE
    timeout = remaining if remaining < attempt_timeout else attempt_timeout
    return AttemptPlan(number, timeout, cut, read_body)


def phase_limit(plan: AttemptPlan) -> float:
    """How long each phase of ``plan``'s attempt may take: connecting, each read and
    write, the wait for a pooled connection.

    The shells end the whole attempt :data:`HARD_END_GRACE` later, so that the client
    library's own timeouts, which know how far the request got (a connect timeout: it
    was never sent), fire first; that hard end only bounds an attempt whose every single
    read kept within time, such as a server trickling its headers or body. An attempt
    the deadline cuts gets its phases that much sooner instead (half its time, if that
    is less), so that its hard end falls on the deadline, not past it (a trickled body
    ran 50 ms past a 0.8 s deadline).
    """
    timeout = plan.timeout
    if plan.cut_by_deadline:
        return timeout - (HARD_END_GRACE if timeout > 2 * HARD_END_GRACE else timeout / 2)
    return timeout


def hard_end_after(plan: AttemptPlan) -> float:
    """Seconds after ``plan``'s attempt starts that the shells end it, whatever its
    phases do: :data:`HARD_END_GRACE` after its time (for an attempt the deadline cuts,
    its time itself: see :func:`phase_limit`)."""
    if plan.cut_by_deadline:
        return plan.timeout
    return plan.timeout + HARD_END_GRACE
