"""See what a retry policy does to a server before production.

A discrete-event simulator: simulated clients and dependencies on a virtual
clock, seeded and reproducible, where every client is a retrysafe call driven
through the real engine (:class:`retrysafe.engine.Call`, via the shells' shared
:class:`retrysafe.drive.Drive`), with the real :class:`retrysafe.RetryPolicy`
backoff and the real :class:`retrysafe.Governor` (retry budget, circuit breaker,
limiter). Nothing sleeps.

Scenarios (each also ``retrysafe simulate SCENARIO``):

- :func:`run_contention`: AWS's "Exponential Backoff and Jitter" set-up, five strategies;
- :func:`run_brownout`: a dependency failing at rate p, from 0 to 100 %;
- :func:`run_outage`: a dependency down for a while, then up;
- :func:`run_layers`: retrying layers stacked, with and without the nesting guard and
  deadline propagation.

Every function takes ``policy=`` and ``governor=`` (a :class:`~retrysafe.RetryPolicy`,
:class:`~retrysafe.GovernorSettings`) to add your own settings as the ``yours``
configuration, and returns a frozen result with ``to_json()``;
:func:`render` makes its table and :func:`plot` (the ``plot`` extra) its chart.
"""

from __future__ import annotations

from retrysafe.simulate.brownout import BrownoutResult, BrownoutRow, run_brownout
from retrysafe.simulate.contention import (
    ContentionResult,
    ContentionRow,
    ContentionSettings,
    run_contention,
)
from retrysafe.simulate.formulas import STRATEGIES, Strategy
from retrysafe.simulate.layers import LayersResult, LayersRow, run_layers
from retrysafe.simulate.loading import SettingsNotFound, load_governor, load_policy
from retrysafe.simulate.outage import OutageResult, OutageRow, run_outage
from retrysafe.simulate.plot import PlotExtraMissing, check_plot_path, plot, require_plot_extra
from retrysafe.simulate.tables import SimulationResult, render

__all__ = [
    "STRATEGIES",
    "BrownoutResult",
    "BrownoutRow",
    "ContentionResult",
    "ContentionRow",
    "ContentionSettings",
    "LayersResult",
    "LayersRow",
    "OutageResult",
    "OutageRow",
    "PlotExtraMissing",
    "SettingsNotFound",
    "SimulationResult",
    "Strategy",
    "check_plot_path",
    "load_governor",
    "load_policy",
    "plot",
    "render",
    "require_plot_extra",
    "run_brownout",
    "run_contention",
    "run_layers",
    "run_outage",
]
