"""retrysafe for ``requests``: :class:`RetryAdapter`, mounted on a ``requests.Session``.

::

    import requests
    from retrysafe import RetryPolicy
    from retrysafe.requests import RetryAdapter

    session = requests.Session()
    adapter = RetryAdapter(policy=RetryPolicy(deadline=10))
    session.mount("http://", adapter)
    session.mount("https://", adapter)

Needs the ``requests`` extra (``pip install 'retrysafe[requests]'``).
:func:`policy_from_retry` converts urllib3's ``Retry``; the errors raised are in
:mod:`retrysafe.requests.errors`.
"""

from __future__ import annotations

try:
    import requests as _requests  # noqa: F401 - checked here to name the extra
except ImportError as missing:  # pragma: no cover - exercised without the extra only
    raise ImportError(
        "retrysafe.requests needs the requests package: pip install 'retrysafe[requests]'"
    ) from missing

from retrysafe.requests.adapter import RetryAdapter, report_of
from retrysafe.requests.errors import (
    TransportConnectTimeout,
    TransportReadTimeout,
    TransportTimeout,
)
from retrysafe.requests.urllib3_retry import UnsupportedRetrySetting, policy_from_retry

__all__ = [
    "RetryAdapter",
    "TransportConnectTimeout",
    "TransportReadTimeout",
    "TransportTimeout",
    "UnsupportedRetrySetting",
    "policy_from_retry",
    "report_of",
]
