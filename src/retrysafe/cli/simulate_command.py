"""``retrysafe simulate SCENARIO``: the policy simulator from the command line.

Prints the scenario's table (or ``--json``), and with ``--plot FILE.png`` draws it
(the ``plot`` extra). ``--policy module:NAME`` and ``--governor module:NAME`` add
your own ``RetryPolicy`` / ``GovernorSettings`` as the ``yours`` configuration.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any

from retrysafe.cli.exit_codes import EXIT_FAILED, EXIT_OK, UsageError
from retrysafe.cli.terminal import safe_line

__all__ = ["add_simulate_command", "run_simulate"]

_SCENARIOS = {
    "contention": "N clients race to write one row: five backoff strategies (AWS's set-up)",
    "brownout": "a dependency failing at rate p: load and success per configuration",
    "outage": "a dependency down for a while, then up: load over time, fail fast, recovery",
    "layers": "retrying layers stacked: calls reaching the bottom per user request",
}


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _clients(text: str) -> tuple[int, ...]:
    """``10:190:20`` (first:last:step, last included) or ``10,50,100``."""
    try:
        if ":" in text:
            first, last, step = (int(part) for part in text.split(":"))
        else:
            return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected FIRST:LAST:STEP (e.g. 10:190:20) or a list (e.g. 10,50,100), got {text!r}"
        ) from None
    if step < 1 or last < first:
        wrong = (
            f"STEP is {step}, under 1" if step < 1 else f"LAST ({last}) is under FIRST ({first})"
        )
        raise argparse.ArgumentTypeError(
            f"in FIRST:LAST:STEP {text!r}, {wrong} (e.g. 10:190:20: 10 to 190 by 20)"
        )
    return tuple(range(first, last + 1, step))


def _percent(text: str) -> float:
    """A percentage from 0 to 100, as the fraction the simulator takes (``50`` -> 0.5);
    refused in the unit it was typed in."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 100:  # (nan too)
        raise argparse.ArgumentTypeError(
            f"expected a percentage from 0 to 100 (e.g. 50 for half), got {text.strip()!r}"
        )
    return value / 100


def _rates(text: str) -> tuple[float, ...]:
    """Failure rates as percentages: ``0,10,50,100``, each once (the table has a column
    per rate, and finds a column's figures by its rate)."""
    parts = text.split(",")
    if not all(part.strip() for part in parts):
        raise argparse.ArgumentTypeError(
            f"expected percentages separated by commas (e.g. 0,10,50,100), got {text!r}"
        )
    rates = tuple(_percent(part) for part in parts)
    for index, rate in enumerate(rates):
        if rate in rates[:index]:
            raise argparse.ArgumentTypeError(
                f"expected each percentage once, got {rate * 100:g} twice in {text!r} "
                "(for another draw at the same rate, run again with another --seed)"
            )
    return rates


def _stack(text: str) -> tuple[int, ...]:
    """``3x3x4``: attempts per layer, top first."""
    try:
        return tuple(int(part) for part in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected attempts per layer, top first, e.g. 3x3x4; got {text!r}"
        ) from None


def _strategies(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected at least one strategy name; got {text!r}")
    return names


def add_simulate_command(commands: Any) -> None:
    """Add ``simulate`` and its scenarios to the ``retrysafe`` parser's subcommands."""
    simulate = commands.add_parser(
        "simulate",
        help="see what retry settings do to a server: simulated clients on a virtual clock",
        description="Run retrysafe's real engine and governor against a simulated dependency "
        "on a virtual clock (seeded, reproducible, nothing sleeps) and print what it does.",
    )
    scenarios = simulate.add_subparsers(
        dest="scenario", metavar="SCENARIO", parser_class=type(simulate)
    )
    simulate.set_defaults(run=run_simulate, scenario=None)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--seed", type=_whole, default=0, help="random seed (0)")
    shared.add_argument("--json", action="store_true", help="print the results as JSON")
    shared.add_argument("--plot", metavar="FILE.png", help="also draw the results (plot extra)")
    shared.add_argument("--policy", metavar="module:NAME", help="your RetryPolicy, run as 'yours'")
    shared.add_argument(
        "--governor", metavar="module:NAME", help="your GovernorSettings, run as 'yours'"
    )
    shared.add_argument("--workers", type=_whole, help="processes to use (default: one per CPU)")
    parsers = {
        name: scenarios.add_parser(name, parents=[shared], help=summary, description=summary)
        for name, summary in _SCENARIOS.items()
    }
    contention = parsers["contention"]
    contention.add_argument(
        "--clients", type=_clients, default=tuple(range(10, 200, 20)), help="10:190:20"
    )
    contention.add_argument("--runs", type=_whole, default=100, help="runs per cell (100)")
    contention.add_argument(
        "--strategies",
        type=_strategies,
        default=("none", "exponential", "full", "equal", "decorrelated"),
        help="none,exponential,full,equal,decorrelated",
    )
    brownout = parsers["brownout"]
    brownout.add_argument(
        "--failure-rates",
        type=_rates,
        default=tuple(step / 10 for step in range(11)),
        help="percentages: 0,10,...,100",
    )
    brownout.add_argument("--calls", type=_whole, default=2000, help="calls per rate (2000)")
    brownout.add_argument("--rate", type=_number, default=100.0, help="calls per second (100)")
    outage = parsers["outage"]
    outage.add_argument("--duration", type=_number, default=60.0, help="seconds (60)")
    outage.add_argument("--down-at", type=_number, default=10.0, help="seconds (10)")
    outage.add_argument("--down-for", type=_number, default=20.0, help="seconds (20)")
    outage.add_argument("--bucket", type=_number, default=5.0, help="seconds per column (5)")
    outage.add_argument("--rate", type=_number, default=50.0, help="calls per second (50)")
    layers = parsers["layers"]
    layers.add_argument("--layers", type=_stack, default=(3, 3, 4), help="attempts, 3x3x4")
    layers.add_argument(
        "--failure-rate", type=_percent, default=1.0, help="percent of bottom attempts (100)"
    )
    layers.add_argument("--deadline", type=_number, default=5.0, help="user deadline, seconds (5)")
    layers.add_argument("--requests", type=_whole, default=200, help="user requests (200)")
    layers.add_argument("--rate", type=_number, default=5.0, help="requests per second (5)")
    for name in ("brownout", "outage"):
        parsers[name].add_argument(
            "--processes",
            type=_whole,
            default=1,
            help="client processes the calls are dealt to in turn, each with a governor of "
            "its own, as a fleet that does not share them (1)",
        )
        parsers[name].add_argument(
            "--latency",
            type=_number,
            default=0.02,
            help="seconds the dependency takes to answer, on average (0.02)",
        )
    for name in ("brownout", "outage", "layers"):
        parsers[name].add_argument(
            "--fault",
            choices=("503", "timeout"),
            default="503",
            help="how an attempt fails: a 503, or no answer until its timeout (503)",
        )


#: The scenarios' arguments whose flag is not their own name.
_FLAG_OF = {"attempts": "--layers", "user_deadline": "--deadline"}


#: The scenarios' arguments named bare in their rules' text (``duration`` in outage's
#: ``down_at + down_for (65.0) > duration (60.0)``).
_BARE_ARGUMENTS = (
    "down_at",
    "down_for",
    "duration",
    "failure_rates",
    "failure_rate",
    "user_deadline",
)


def _in_flags(message: str) -> str:
    """A scenario's refusal in the command's words: ``brownout.calls`` is ``--calls``, and
    ``down_at + down_for`` is ``--down-at + --down-for``."""
    message = re.sub(
        r"\b(?:contention|brownout|outage|layers|ContentionSettings)\.([a-z_]+)",
        lambda found: _FLAG_OF.get(found[1], "--" + found[1].replace("_", "-")),
        message,
    )
    return re.sub(
        rf"(?<![-\w])({'|'.join(_BARE_ARGUMENTS)})\b",
        lambda found: _FLAG_OF.get(found[1], "--" + found[1].replace("_", "-")),
        message,
    )


def _note_tiny_percentages(flag: str, rates: tuple[float, ...]) -> None:
    """Say so on stderr when no rate typed is above 1 % and one is a fraction of it:
    ``0.2,0.6`` or ``0,0.5,1`` is most likely meant as fractions (the Python functions
    take fractions), and would run as 0.2 % and 0.6 % without a word. Run all the same:
    0.5 % is a rate one may mean."""
    if all(rate <= 0.01 for rate in rates) and any(0 < rate < 0.01 for rate in rates):
        shown = [f"{rate * 100:g} %" for rate in rates]
        typed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
        meant = ",".join(f"{rate * 10_000:g}" for rate in rates)
        sys.stderr.write(
            f"retrysafe simulate: note: {flag} takes percentages, so this runs {typed}; "
            f"if you meant fractions of 1 (0.2 for 20 %), type {flag} {meant}\n"
        )


def run_simulate(args: argparse.Namespace) -> int:
    """Run the scenario; print its table or JSON; draw it if asked."""
    if args.scenario is None:
        raise UsageError(f"name a scenario: {', '.join(_SCENARIOS)} (see --help)")
    from retrysafe import simulate

    try:
        policy = simulate.load_policy(args.policy) if args.policy else None
        governor = simulate.load_governor(args.governor) if args.governor else None
    except simulate.SettingsNotFound as exc:
        raise UsageError(str(exc)) from None
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.plot:
        try:
            simulate.require_plot_extra()
            simulate.check_plot_path(args.plot)
        except (simulate.PlotExtraMissing, ValueError) as exc:
            raise UsageError(f"--plot: {exc}") from None
    common: dict[str, Any] = {
        "seed": args.seed,
        "policy": policy,
        "governor": governor,
        "workers": args.workers,
    }
    result: simulate.SimulationResult
    try:
        if args.scenario == "contention":
            result = simulate.run_contention(
                clients=args.clients, runs=args.runs, strategies=args.strategies, **common
            )
        elif args.scenario == "brownout":
            _note_tiny_percentages("--failure-rates", args.failure_rates)
            result = simulate.run_brownout(
                failure_rates=args.failure_rates,
                calls=args.calls,
                rate=args.rate,
                fault=args.fault,
                latency=args.latency,
                processes=args.processes,
                **common,
            )
        elif args.scenario == "outage":
            result = simulate.run_outage(
                duration=args.duration,
                down_at=args.down_at,
                down_for=args.down_for,
                bucket=args.bucket,
                rate=args.rate,
                fault=args.fault,
                latency=args.latency,
                processes=args.processes,
                **common,
            )
        else:
            _note_tiny_percentages("--failure-rate", (args.failure_rate,))
            result = simulate.run_layers(
                attempts=args.layers,
                failure_rate=args.failure_rate,
                fault=args.fault,
                user_deadline=args.deadline,
                requests=args.requests,
                rate=args.rate,
                **common,
            )
    except ValueError as exc:
        raise UsageError(_in_flags(str(exc))) from None
    if args.json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(simulate.render(result)) + "\n")
        sys.stdout.write(f"\n{args.scenario} ran in {result.elapsed:.1f} s\n")
    sys.stdout.flush()  # the results are out, whatever becomes of the plot
    if args.plot:
        try:
            written = simulate.plot(result, args.plot)
        except OSError as exc:
            # Checked before the run, but a disk can fill or a folder go in the meantime.
            problem = exc.strerror or str(exc)
            sys.stderr.write(
                safe_line(f"retrysafe simulate: --plot: cannot write {args.plot!r}: {problem}")
                + "\n"
            )
            return EXIT_FAILED
        sys.stderr.write(f"plot written to {written}\n")
    return EXIT_OK
