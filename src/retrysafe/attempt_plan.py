"""AttemptPlan: the engine's word to a shell to send one attempt, within its time.

Apart from the other decisions (decisions.py re-exports it) because every call
makes one and reads it several times: the compiled build (``docs/cost.md``)
compiles this module, so building one and reading its fields costs no Python
frame and no attribute lookup by name. (The other decisions are named tuples
whose annotations name types only imported for type checking, which a compiled
module would have to import at run time.)
"""

from __future__ import annotations

__all__ = ["AttemptPlan"]


class AttemptPlan:
    """Send attempt ``number`` (1-based) with at most ``timeout`` seconds for it.

    ``read_body``: read the whole body inside the attempt (a call that does not
    stream); otherwise only the headers are the attempt's, and the engine asks for
    the body (:class:`ReadBody`) when it needs it. ``cut_by_deadline``: the
    timeout is the deadline's remainder, not the policy's per-attempt limit.
    """

    __slots__ = ("cut_by_deadline", "number", "read_body", "timeout")

    def __init__(self, number: int, timeout: float, cut_by_deadline: bool, read_body: bool) -> None:
        self.number = number
        self.timeout = timeout
        self.cut_by_deadline = cut_by_deadline
        self.read_body = read_body

    def __repr__(self) -> str:
        return f"AttemptPlan(number={self.number}, timeout={self.timeout!r})"
