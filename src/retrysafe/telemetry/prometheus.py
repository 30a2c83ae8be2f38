"""Prometheus metrics for retrysafe calls, on ``prometheus-client``.

Pass one :class:`PrometheusMetrics` in a client's or transport's ``hooks``::

    metrics = PrometheusMetrics(governor=governor)           # the default registry
    client = retrysafe.Client(governor=governor, hooks=[metrics])

Metric names (labels in brackets; ``dependency`` is the name calls are grouped
under, by default the URL's origin ``scheme://host:port``, never its path or query):

- ``retrysafe_calls_total{dependency, method, result, reason}``: calls ended;
  ``result`` is ``success``, ``failure`` or ``interrupted`` (an exception not the
  call's own ended it: its task cancelled, a ``KeyboardInterrupt``), ``reason`` why a
  failed call stopped (empty for the others);
- ``retrysafe_call_duration_seconds{dependency, result}``: histogram of whole calls;
- ``retrysafe_attempts_total{dependency, outcome}``: attempts, by what each got
  (every attempt: a hedged copy that lost counts with outcome ``hedge_lost``, one that
  never left, such as a ``connect_error``, under its outcome);
- ``retrysafe_hedges_total{dependency, outcome}``: hedged copies (see
  ``RetryPolicy.hedge_after``), by what became of each: ``sent``, ``won``, ``lost``,
  ``refused``;
- ``retrysafe_retries_total{dependency, outcome}``: retries, by what the retried
  attempt got;
- ``retrysafe_retry_wait_seconds{dependency}``: histogram of waits before a retry;
- ``retrysafe_held_wait_seconds{dependency, reason}``: histogram of the waits the
  dependency's load protection added before an attempt: ``cooldown`` (another call's
  answer paused every caller) or ``pacing`` (a paced slot);
- ``retrysafe_stream_bodies_total{dependency, outcome}``: streamed calls' bodies, by
  how each ended: ``complete``, ``broken`` (a read raised) or ``abandoned`` (closed
  before its end);
- ``retrysafe_stream_duration_seconds{dependency, outcome}``: histogram of streamed
  calls from their start to their body's end (``call_duration_seconds`` ends at the
  headers);
- ``retrysafe_refusals_total{dependency, reason}``: calls retrysafe's own load
  protection stopped (``circuit_open``, ``budget_exhausted``, ``cooldown``, ``pacing``);
- ``retrysafe_circuit_state{dependency}``: gauge, 0 closed, 1 half open, 2 open (with
  ``governor=``, read from it at each scrape for every dependency; else set by the
  breaker changes the calls see);
- ``retrysafe_budget_tokens{dependency}``: gauge, the retry budget's tokens left
  (read from the governor at each scrape; only with ``governor=``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "retrysafe.telemetry.prometheus needs prometheus-client: "
        "pip install 'retrysafe[prometheus]'"
    ) from exc

from retrysafe.governor import Governor
from retrysafe.observe import FIRST_COPY, RetryEvent
from retrysafe.telemetry.vocabulary import (
    BREAKER_STATE_VALUES,
    LOCAL_REFUSAL_REASONS,
    breaker_state_after,
    known_method,
)

__all__ = ["PrometheusMetrics"]

#: Buckets (seconds) for call durations and retry waits: from a fast call to a deadline.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class PrometheusMetrics:
    """A hook that keeps retrysafe's Prometheus metrics (see the module for their names).

    Args:
        registry: where the metrics are registered; default prometheus-client's global
            ``REGISTRY``. Pass your own ``CollectorRegistry`` to keep them apart (one
            ``PrometheusMetrics`` per registry: the names are registered once).
        governor: the load protection whose retry budgets ``retrysafe_budget_tokens``
            reports (the same ``Governor`` the clients use).
        namespace: the metric names' prefix.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        governor: Governor | None = None,
        namespace: str = "retrysafe",
    ) -> None:
        if governor is not None and not isinstance(governor, Governor):
            raise TypeError(f"governor must be a retrysafe.Governor, got {type(governor).__name__}")
        self.registry = registry
        # Made apart from the registry, then registered all or none (_register_all).
        self.calls = Counter(
            "calls",
            "retrysafe calls ended, by result and the reason a failed call stopped.",
            ("dependency", "method", "result", "reason"),
            namespace=namespace,
            registry=None,
        )
        self.call_duration = Histogram(
            "call_duration_seconds",
            "Whole retrysafe calls, retries and waits included.",
            ("dependency", "result"),
            namespace=namespace,
            registry=None,
            buckets=DURATION_BUCKETS,
        )
        self.attempts = Counter(
            "attempts",
            "Attempts, by what each got (one that never left too: connect_error...).",
            ("dependency", "outcome"),
            namespace=namespace,
            registry=None,
        )
        self.retries = Counter(
            "retries",
            "Retries, by what the retried attempt got.",
            ("dependency", "outcome"),
            namespace=namespace,
            registry=None,
        )
        self.retry_wait = Histogram(
            "retry_wait_seconds",
            "Waits before a retry.",
            ("dependency",),
            namespace=namespace,
            registry=None,
            buckets=DURATION_BUCKETS,
        )
        self.held_wait = Histogram(
            "held_wait_seconds",
            "Waits load protection added before an attempt: cooldown, pacing.",
            ("dependency", "reason"),
            namespace=namespace,
            registry=None,
            buckets=DURATION_BUCKETS,
        )
        self.hedges = Counter(
            "hedges",
            "Hedged copies, by what became of each: sent, won, lost, refused.",
            ("dependency", "outcome"),
            namespace=namespace,
            registry=None,
        )
        self.refusals = Counter(
            "refusals",
            "Calls retrysafe's own load protection stopped, by reason.",
            ("dependency", "reason"),
            namespace=namespace,
            registry=None,
        )
        self.stream_bodies = Counter(
            "stream_bodies",
            "Streamed calls' bodies, by how each ended: complete, broken, abandoned.",
            ("dependency", "outcome"),
            namespace=namespace,
            registry=None,
        )
        self.stream_duration = Histogram(
            "stream_duration_seconds",
            "Streamed calls, from their start to their body's end.",
            ("dependency", "outcome"),
            namespace=namespace,
            registry=None,
            buckets=DURATION_BUCKETS,
        )
        #: The labelled children already made, by (metric, label values): as many as the
        #: label values the calls have shown, a bounded set.
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self.governor = governor
        #: Set from breaker events; with a governor, its state is read at each scrape instead
        #: (every dependency, and an open breaker whose period ran out reads half open).
        self.circuit_state: Gauge | None = None
        collectors: list[Any] = [
            self.calls,
            self.call_duration,
            self.attempts,
            self.retries,
            self.retry_wait,
            self.held_wait,
            self.hedges,
            self.refusals,
            self.stream_bodies,
            self.stream_duration,
        ]
        if governor is not None:
            collectors.append(_GovernorCollector(governor, namespace))
        else:
            self.circuit_state = Gauge(
                "circuit_state",
                _CIRCUIT_HELP,
                ("dependency",),
                namespace=namespace,
                registry=None,
            )
            collectors.append(self.circuit_state)
        if registry is not None:
            _register_all(registry, collectors)

    def __call__(self, event: RetryEvent) -> None:
        """Count ``event``."""
        kind = event.kind
        dependency = event.dependency
        if kind == "attempt":
            self._child(self.attempts, dependency, event.outcome).inc()
        elif kind == "retry":
            self._child(self.retries, dependency, event.outcome).inc()
            self._child(self.retry_wait, dependency).observe(event.wait)
        elif kind == "held":
            self._child(self.held_wait, dependency, event.reason).observe(event.wait)
        elif kind == "success" or kind == "failure" or kind == "interrupted":
            method = known_method(event.method)
            self._child(self.calls, dependency, method, kind, event.reason).inc()
            self._child(self.call_duration, dependency, kind).observe(event.elapsed)
            if kind == "failure" and event.reason in LOCAL_REFUSAL_REASONS:
                self._child(self.refusals, dependency, event.reason).inc()
        elif kind == "hedge":
            if event.reason != FIRST_COPY:  # (hedged copies: the raced attempt is none)
                self._child(self.hedges, dependency, event.outcome).inc()
        elif kind == "body":
            self._child(self.stream_bodies, dependency, event.outcome).inc()
            self._child(self.stream_duration, dependency, event.outcome).observe(event.elapsed)
        elif kind == "circuit" and self.circuit_state is not None:
            state = breaker_state_after(event.transition)
            if state is not None:
                self.circuit_state.labels(dependency).set(state)

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: prometheus-client validates the labels and
        takes a lock on every ``labels()`` call; a dict read is all a known one needs."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def __repr__(self) -> str:
        return f"PrometheusMetrics(registry={self.registry!r})"


def _register_all(registry: CollectorRegistry, collectors: list[Any]) -> None:
    """Register every one of ``collectors``, or none: a name already taken (another
    ``PrometheusMetrics``'s, or one of the application's) leaves nothing half registered,
    so the error says the same whenever it is asked again."""
    done: list[Any] = []
    try:
        for collector in collectors:
            registry.register(collector)
            done.append(collector)
    except ValueError as exc:
        for collector in done:
            registry.unregister(collector)
        message = str(exc)
        if not message.startswith("Duplicated timeseries"):
            raise
        taken = message.partition(":")[2].strip()
        raise ValueError(
            f"metrics retrysafe registers are in this registry already ({taken}): if they "
            "are another PrometheusMetrics's, make one and give it to every client "
            "(hooks=[metrics]); else give this one its own "
            "registry=prometheus_client.CollectorRegistry() or namespace="
        ) from exc


_CIRCUIT_HELP = "Circuit breaker state per dependency: 0 closed, 1 half open, 2 open."


class _GovernorCollector(Collector):
    """Reads each dependency's breaker state and retry budget from the governor at scrape time."""

    def __init__(self, governor: Governor, namespace: str) -> None:
        self._governor = governor
        self._namespace = namespace

    def collect(self) -> Iterator[GaugeMetricFamily]:
        circuits = GaugeMetricFamily(
            f"{self._namespace}_circuit_state", _CIRCUIT_HELP, labels=("dependency",)
        )
        budgets = GaugeMetricFamily(
            f"{self._namespace}_budget_tokens",
            "Retry budget tokens left per dependency (a retry spends one).",
            labels=("dependency",),
        )
        for dependency, guard in self._governor.guards():
            # (a fleet's open breaker reads as open, whatever this process's own says)
            state = guard.breaker_state()
            if state is not None:
                circuits.add_metric((dependency,), BREAKER_STATE_VALUES[state])
            if guard.budget is not None:
                budgets.add_metric((dependency,), guard.budget.tokens)
        yield circuits
        yield budgets
