"""Plots of the scenarios' results (matplotlib, from the ``plot`` extra, imported only here)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

from retrysafe.simulate.brownout import BrownoutResult
from retrysafe.simulate.contention import ContentionResult
from retrysafe.simulate.outage import OutageResult
from retrysafe.simulate.tables import SimulationResult

__all__ = ["PlotExtraMissing", "check_plot_path", "plot", "require_plot_extra"]


class PlotExtraMissing(ImportError):
    """matplotlib is not installed: plots need the ``plot`` extra."""


def require_plot_extra() -> None:
    """Raise :class:`PlotExtraMissing` unless matplotlib can be imported (imports nothing)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotExtraMissing(
            "plots need the plot extra (matplotlib is missing): pip install 'retrysafe[plot]'"
        )


#: The file kinds matplotlib's Agg backend writes, by extension.
PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")


def check_plot_path(path: str | Path) -> None:
    """Raise ValueError, saying what to do, unless a plot can be written to ``path``:
    checked before a simulation runs, so a typo does not cost the whole run.

    The file is opened for writing to find out (the only test that holds for every file
    system and user: root passes permission checks, /proc refuses new files anyway): an
    existing file is left as it was, a new one is removed again.
    """
    target = Path(path)
    if target.suffix.lower() not in PLOT_FORMATS:
        raise ValueError(
            f"cannot write a plot to {str(path)!r}: name a file ending in one of "
            + ", ".join(PLOT_FORMATS)
        )
    folder = target.parent
    if not folder.is_dir():
        raise ValueError(f"cannot write a plot to {str(path)!r}: no folder {str(folder)!r}")
    if target.is_dir():
        raise ValueError(f"cannot write a plot to {str(path)!r}: it is a folder")
    try:
        if target.exists():
            with target.open("ab"):
                pass
        else:
            with target.open("xb"):
                pass
            target.unlink()
    except OSError as exc:
        raise ValueError(f"cannot write a plot to {str(path)!r}: {exc.strerror or exc}") from None


def _pyplot() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise PlotExtraMissing(
            "plots need the plot extra (matplotlib is missing): pip install 'retrysafe[plot]'"
        ) from None
    matplotlib.use("Agg")  # files only, never a window
    return importlib.import_module("matplotlib.pyplot")


def plot(result: SimulationResult, path: str | Path) -> Path:
    """Draw ``result`` to ``path`` (a .png); returns the path written."""
    pyplot = _pyplot()
    target = Path(path)
    if isinstance(result, ContentionResult):
        figure, (calls, times) = pyplot.subplots(1, 2, figsize=(12, 4.5))
        names = list(dict.fromkeys(row.strategy for row in result.rows))
        counts = list(result.settings.clients)
        for name in names:
            calls.plot(counts, [result.row(n, name).calls for n in counts], marker="o", label=name)
            times.plot(
                counts, [result.row(n, name).completion_ms for n in counts], marker="o", label=name
            )
        calls.set(title="work: conditional writes", xlabel="clients", ylabel="calls (mean)")
        times.set(title="time until all are done", xlabel="clients", ylabel="ms (mean)")
        times.set_yscale("log")
        calls.legend()
    elif isinstance(result, BrownoutResult):
        figure, (load, success) = pyplot.subplots(1, 2, figsize=(12, 4.5))
        rates = [rate * 100 for rate in result.failure_rates]
        for config in result.configs:
            rows = [result.row(config, rate) for rate in result.failure_rates]
            load.plot(rates, [row.load for row in rows], marker="o", label=config)
            success.plot(rates, [row.success_rate * 100 for row in rows], marker="o", label=config)
        load.set(title="load amplification", xlabel="failure rate %", ylabel="attempts per call")
        success.set(title="success", xlabel="failure rate %", ylabel="% of calls")
        load.legend()
    elif isinstance(result, OutageResult):
        figure, axis = pyplot.subplots(figsize=(10, 4.5))
        # A step per bucket, drawn to the end of the last one.
        edges = [*result.bucket_starts(), result.window.duration]
        for row in result.rows:
            axis.step(edges, [*row.load_per_s, row.load_per_s[-1]], where="post", label=row.config)
        if result.rows:
            offered = result.rows[0].offered_per_s
            axis.step(edges, [*offered, offered[-1]], where="post", label="calls", linestyle=":")
        window = result.window
        axis.axvspan(window.down_at, window.up_at, alpha=0.15, color="grey", label="down")
        axis.set(title="load on the dependency", xlabel="seconds", ylabel="attempts per second")
        axis.legend()
    else:
        figure, axis = pyplot.subplots(figsize=(8, 4.5))
        names = [row.config for row in result.rows]
        axis.barh(names, [row.calls_per_request for row in result.rows])
        axis.set(
            title=f"layers {' x '.join(map(str, result.attempts))}",
            xlabel="calls reaching the dependency per user request",
        )
    figure.tight_layout()
    figure.savefig(target)
    pyplot.close(figure)
    return target
