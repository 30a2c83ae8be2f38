"""Check the pure engine's invariants over many generated call transcripts.

Each sequence is one call scenario (policy, request, streaming or not, and every
answer the world gives: responses, exceptions, durations, the governor's
admissions and retry answers), driven through ``retrysafe.engine.Call`` as the
shells drive it, on a fake clock, and checked against every invariant in
``tests/engine_transcripts.py``::

    .venv/bin/python scripts/engine_transcripts.py --sequences 100000 --seed 1

It prints how many conditions each invariant checked, the sequences, attempts,
waits, how calls ended, which situations came up, and every violation (first
few per invariant) with a shrunk, minimal transcript. Exit status: 0 all held,
1 a violation, 2 the time limit stopped the run before every sequence ran.
``--show I`` prints sequence I's full transcript instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import engine_transcripts as transcripts


def _table(title: str, rows: list[tuple[str, object]]) -> list[str]:
    width = max((len(name) for name, _ in rows), default=0)
    return [title, *(f"  {name:<{width}}  {value}" for name, value in rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=100_000, help="scenarios to run")
    parser.add_argument("--seed", type=int, default=1, help="seed of the scenarios")
    parser.add_argument(
        "--time-limit", type=float, default=900.0, help="stop after this many seconds"
    )
    parser.add_argument("--keep", type=int, default=3, help="violations shown per invariant")
    parser.add_argument("--no-shrink", action="store_true", help="show violations unshrunk")
    parser.add_argument("--show", type=int, metavar="I", help="print sequence I's transcript")
    args = parser.parse_args(argv)

    if args.show is not None:
        scenario = transcripts.generate(transcripts.scenario_rng(args.seed, args.show))
        run = transcripts.drive(scenario)
        print(transcripts.transcript(run))
        for name, messages in transcripts.check_run(run).items():
            print(f"VIOLATION {name}: " + "; ".join(messages))
        print(f"scenario: {scenario!r}")
        return 0

    tally = transcripts.run_many(
        args.sequences, args.seed, time_limit=args.time_limit, keep=args.keep
    )
    lines = [
        f"engine transcripts: {tally.sequences:,} sequences (seed {args.seed}) "
        f"in {tally.seconds:.1f} s"
        + (f", STOPPED by the {args.time_limit:g} s limit" if tally.stopped_early else ""),
        f"attempts: {tally.attempts:,} ({tally.attempts / max(1, tally.sequences):.2f} a call)",
        f"waits: {tally.waits:,} (of which retries granted: {tally.retry_waits:,}; "
        f"the rest cooldowns and paced slots)",
    ]
    lines += _table(
        "invariants (conditions checked, sequences violating):",
        [
            (
                name,
                f"{tally.checked[name]:>11,} checked  {tally.violation_counts[name]:>7,} violating",
            )
            for name in transcripts.INVARIANTS
        ],
    )
    lines += _table(
        "outcomes:", [(kind, f"{count:>8,}") for kind, count in tally.outcomes.most_common()]
    )
    lines += _table(
        "give-up reasons:", [(why, f"{count:>8,}") for why, count in tally.reasons.most_common()]
    )
    lines += _table(
        "situations covered:",
        [(what, f"{count:>8,}") for what, count in sorted(tally.coverage.items())],
    )
    print("\n".join(lines))
    began = time.perf_counter()
    for violation in tally.violations:
        print()
        print(transcripts.report_violation(violation, minimal=not args.no_shrink))
    if tally.violations:
        print(f"\n(shrinking and printing took {time.perf_counter() - began:.1f} s)")
    if tally.violation_counts:
        total = sum(tally.violation_counts.values())
        print(f"\nFAILED: {total:,} violations over {len(tally.violation_counts)} invariants")
        return 1
    if tally.stopped_early:
        print(f"\nINCOMPLETE: {tally.sequences:,} of {args.sequences:,} sequences ran")
        return 2
    print("\nOK: every invariant held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
