"""Telemetry for retrysafe calls, each integration an extra imported only when used.

- :mod:`retrysafe.telemetry.otel`: OpenTelemetry spans (a span per call, a child
  span per attempt) and metrics, on ``opentelemetry-api`` only (``retrysafe[otel]``);
- :mod:`retrysafe.telemetry.prometheus`: Prometheus counters, histograms and gauges
  (``retrysafe[prometheus]``);
- :mod:`retrysafe.telemetry.structlog`: every event as one structlog entry
  (``retrysafe[structlog]``).

Each is a hook: pass it in ``hooks=[...]`` of a client or transport. This package
imports none of them itself; ``import retrysafe`` never loads it.
"""
