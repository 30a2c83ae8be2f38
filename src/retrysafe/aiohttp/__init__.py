"""retrysafe for ``aiohttp``: :class:`RetryMiddleware`, a client middleware (aiohttp >= 3.12.1).

::

    import aiohttp
    from retrysafe import RetryPolicy
    from retrysafe.aiohttp import RetryMiddleware

    retrying = RetryMiddleware(policy=RetryPolicy(deadline=10))
    async with aiohttp.ClientSession(middlewares=(retrying,)) as session:
        async with session.get(url) as response:
            data = await response.json()

Needs the ``aiohttp`` extra (``pip install 'retrysafe[aiohttp]'``). The errors
raised are in :mod:`retrysafe.aiohttp.errors`.
"""

from __future__ import annotations

try:
    import aiohttp as _aiohttp
except ImportError as missing:  # pragma: no cover - exercised without the extra only
    raise ImportError(
        "retrysafe.aiohttp needs aiohttp 3.12.1 or later: pip install 'retrysafe[aiohttp]'"
    ) from missing

if not hasattr(_aiohttp, "ClientMiddlewareType"):  # pragma: no cover - old aiohttp only
    raise ImportError(
        f"retrysafe.aiohttp needs aiohttp 3.12.1 or later (client middlewares), found "
        f"{_aiohttp.__version__}: pip install 'retrysafe[aiohttp]'"
    )

from retrysafe.aiohttp.errors import TransportTimeout
from retrysafe.aiohttp.middleware import RetryMiddleware, report_of

__all__ = ["RetryMiddleware", "TransportTimeout", "report_of"]
