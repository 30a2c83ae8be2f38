"""Public names a package imports only when first used (PEP 562).

``import retrysafe`` must stay as light as a client needs, so server pieces
(the middleware, the stores) load on first use. A package declares a table of
its lazy names and installs the two module functions this builds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

__all__ = ["lazy_module_functions"]


def lazy_module_functions(
    package: str,
    table: Mapping[str, str],
    namespace: MutableMapping[str, Any],
    public: Sequence[str],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: each name in ``table`` is
    imported from its module when first read, then kept in ``namespace``."""

    def get_lazy(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def names() -> list[str]:
        return sorted(set(namespace) | set(public))

    return get_lazy, names
