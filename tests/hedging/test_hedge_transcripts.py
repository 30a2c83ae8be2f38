"""The hedging engine's invariants over generated transcripts (see hedge_transcripts.py).

Every generated call (policy with ``hedge_after``, any request, copies racing with
heavy-tailed durations, hedges and retries granted or refused by the governor) is
driven through HedgedCall on the fake clock and checked: no unsafe copy, attempts
within the policy, no deadline overrun, the first usable answer wins, every copy
accounted for in the report.
"""

from __future__ import annotations

import hedge_transcripts as transcripts
import pytest

CI_SEQUENCES = 4000
CI_SEED = 15


@pytest.fixture(scope="module")
def tally() -> transcripts.Tally:
    return transcripts.run_many(CI_SEQUENCES, CI_SEED)


def test_the_hedging_invariants_hold_over_generated_transcripts(
    tally: transcripts.Tally,
) -> None:
    assert tally.sequences == CI_SEQUENCES
    if tally.violations:
        lines = [f"{name}: {problem}\n  {scenario}" for name, scenario, problem in tally.violations]
        pytest.fail("\n".join(lines[:10]))


def test_the_situations_the_invariants_are_about_all_came_up(tally: transcripts.Tally) -> None:
    for situation in (
        "hedged",
        "several hedges",
        "hedge refused",
        "loser abandoned",
        "failed copy awaited others",
        "a later copy won",
        "unsafe request (never hedged)",
        "hedge cut by the deadline",
        "call failed",
    ):
        assert tally.situations[situation] >= 20, situation
