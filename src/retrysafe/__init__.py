"""retrysafe: retry-safe HTTP API calls on httpx.

Retry only what asking again can fix, wait as long as the server asks, never
run past the caller's deadline, never send a write twice by accident, and
raise errors a caller can act on.
"""

from retrysafe.classify import Verdict
from retrysafe.client import AsyncClient, Client
from retrysafe.clock import Clock, SystemClock
from retrysafe.decisions import CallReport
from retrysafe.engine import Call
from retrysafe.errors import (
    ApiError,
    AttemptRecord,
    BadResponse,
    CircuitOpen,
    ClientError,
    DeadlineExceeded,
    QuotaExhausted,
    RateLimited,
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
from retrysafe.observe import EventHook, RetryEvent
from retrysafe.policy import RetryPolicy, Rule
from retrysafe.propagation import DeadlineMiddleware
from retrysafe.scope import deadline
from retrysafe.timing import Deadline, backoff_delay, parse_retry_after
from retrysafe.transport import AsyncRetryTransport, CallOptions, RetryTransport

__version__ = "0.1.0"

__all__ = [
    "ApiError",
    "AsyncClient",
    "AsyncRetryTransport",
    "AttemptRecord",
    "BadResponse",
    "BreakerSettings",
    "BudgetSettings",
    "Call",
    "CallOptions",
    "CallReport",
    "CircuitBreaker",
    "CircuitOpen",
    "Client",
    "ClientError",
    "Clock",
    "Deadline",
    "DeadlineExceeded",
    "DeadlineMiddleware",
    "EventHook",
    "Governor",
    "GovernorSettings",
    "Limiter",
    "LimiterSettings",
    "QuotaExhausted",
    "RateLimited",
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
    "parse_retry_after",
]
