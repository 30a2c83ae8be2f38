"""The words every telemetry integration uses, so OpenTelemetry, Prometheus and
structlog count the same things under the same bounded labels.

Labels are a dependency (a name, or an origin ``scheme://host:port``; never a URL
path or query) and stable codes (outcomes, reasons, HTTP methods folded to the
standard ones), so a metric's label values stay few whatever the URLs called.
"""

from __future__ import annotations

from retrysafe.governor.breaker import BreakerState

__all__ = [
    "BREAKER_STATE_VALUES",
    "LOCAL_REFUSAL_REASONS",
    "breaker_state_after",
    "known_method",
]

#: Give-up reasons that are retrysafe's own load protection refusing, not the server.
LOCAL_REFUSAL_REASONS = frozenset({"circuit_open", "budget_exhausted", "cooldown", "pacing"})

#: A breaker state as a gauge value.
BREAKER_STATE_VALUES: dict[BreakerState, int] = {"closed": 0, "half_open": 1, "open": 2}

_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)


def known_method(method: str) -> str:
    """``method`` if it is a standard HTTP method, else ``"_OTHER"`` (as the
    OpenTelemetry HTTP conventions spell it): a label never takes arbitrary values."""
    return method if method in _METHODS else "_OTHER"


def breaker_state_after(transition: str) -> int | None:
    """The gauge value of the state a ``"closed->open"`` transition ends in, if known."""
    after = transition.rpartition("->")[2]
    for state, value in BREAKER_STATE_VALUES.items():
        if state == after:
            return value
    return None
