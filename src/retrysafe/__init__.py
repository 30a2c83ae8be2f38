"""retrysafe: retry-safe HTTP API calls on httpx.

Retry only what asking again can fix, wait as long as the server asks, never
run past the caller's deadline, never send a write twice by accident, and
raise errors a caller can act on.

``import retrysafe`` loads what a client needs. Server pieces load on first use: the
idempotency middleware and stores live in :mod:`retrysafe.idempotency`, itself lazy, and
:class:`DeadlineMiddleware` is imported when first named here (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retrysafe.classify import Verdict
from retrysafe.client import AsyncClient, Client, report_of
from retrysafe.clock import Clock, SystemClock
from retrysafe.deadline_scope import deadline
from retrysafe.decisions import CallReport
from retrysafe.dependency_namers import dependency_by_path
from retrysafe.engine import Call
from retrysafe.errors import (
    ApiError,
    AttemptRecord,
    BadResponse,
    BudgetExhausted,
    CircuitOpen,
    ClientError,
    CooldownActive,
    DeadlineExceeded,
    PacingDelayed,
    QuotaExhausted,
    RateLimited,
    Refused,
    RetryAfterTooLong,
    ServerError,
    TransportError,
)
from retrysafe.governor import (
    BreakerSettings,
    BudgetSettings,
    CircuitBreaker,
    Governor,
    GovernorSettings,
    Limiter,
    LimiterSettings,
    RetryBudget,
)
from retrysafe.lazy_names import lazy_module_functions
from retrysafe.observe import EventHook, RetryEvent
from retrysafe.policy import RetryPolicy, Rule
from retrysafe.timing import Deadline, backoff_delay, parse_retry_after
from retrysafe.transport import AsyncRetryTransport, CallOptions, RetryTransport

if TYPE_CHECKING:
    from retrysafe.propagation import DeadlineMiddleware

#: Public names imported on first use (server-side pieces), and the module defining each.
_LAZY: dict[str, str] = {"DeadlineMiddleware": "retrysafe.propagation"}

__version__ = "0.1.0"

__all__ = [
    "ApiError",
    "AsyncClient",
    "AsyncRetryTransport",
    "AttemptRecord",
    "BadResponse",
    "BreakerSettings",
    "BudgetExhausted",
    "BudgetSettings",
    "Call",
    "CallOptions",
    "CallReport",
    "CircuitBreaker",
    "CircuitOpen",
    "Client",
    "ClientError",
    "CooldownActive",
    "Clock",
    "Deadline",
    "DeadlineExceeded",
    "DeadlineMiddleware",
    "EventHook",
    "Governor",
    "GovernorSettings",
    "Limiter",
    "LimiterSettings",
    "PacingDelayed",
    "QuotaExhausted",
    "RateLimited",
    "Refused",
    "RetryAfterTooLong",
    "RetryBudget",
    "RetryEvent",
    "RetryPolicy",
    "RetryTransport",
    "Rule",
    "ServerError",
    "SystemClock",
    "TransportError",
    "Verdict",
    "__version__",
    "backoff_delay",
    "deadline",
    "dependency_by_path",
    "parse_retry_after",
    "report_of",
]


# Hidden from type checkers, which see the names through the TYPE_CHECKING imports above:
# a visible module __getattr__ would make them accept any misspelt name here.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_module_functions(__name__, _LAZY, globals(), __all__)
