"""``NamedTuple``: ``typing.NamedTuple``, made without compiling a method per class.

``typing.NamedTuple`` builds each class through ``collections.namedtuple``, which writes
the source of the class's ``__new__`` and compiles it with ``eval``, then checks every
annotation: about 0.1 ms a class. ``import retrysafe`` defines some twenty of them (the
engine's decisions, the call report, the shells' settings), and defining them was about
a tenth of what the import added to httpx's. This module's ``NamedTuple`` makes the same
class out of one ``__new__`` per number of fields, each compiled once and given the
class's field names by renaming its parameters (a code object's ``replace``):

- it is a ``tuple`` subclass with the fields in order, read by name through the same
  C accessors ``collections.namedtuple`` uses; it has ``_fields``, ``_field_defaults``,
  ``_make``, ``_replace``, ``_asdict``, ``__match_args__``, and pickles and copies;
- ``__new__`` takes the fields by position or name, with their defaults; a wrong call is
  the ``TypeError`` a named tuple's ``__new__`` raises; ``inspect.signature`` and
  ``typing.get_type_hints`` see the same fields;
- it prints as ``Name(field=value, ...)`` and keeps the class body's methods,
  properties, docstring and annotations.

Type checkers read it as ``typing.NamedTuple`` (they are told so). It covers what
retrysafe's named tuples use: fields with plain defaults and methods; not generic named
tuples, nor a named tuple subclassing another. The compiled build's own modules keep
``typing.NamedTuple``: the compiler knows that one by name.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

__all__ = ["NamedTuple"]

if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    try:  # the C accessor collections.namedtuple gives each field
        from _collections import _tuplegetter
    except ImportError:  # pragma: no cover - another Python's: a property works alike

        def _tuplegetter(index: int, doc: str) -> property:
            import operator

            return property(operator.itemgetter(index), doc=doc)

    _tuple_new = tuple.__new__
    #: ``__new__``'s code for each number of fields, its parameters named _0, _1, ...
    _NEW_CODE: dict[int, types.CodeType] = {}
    #: What typing.NamedTuple refuses as a field name, as it does.
    _RESERVED = frozenset({"_make", "_replace", "_asdict", "_fields", "_field_defaults", "_source"})

    #: The cell ``__new__`` reads ``tuple.__new__`` from: a closure, not a global, so that
    #: each ``__new__`` can have its class's module as its globals (where
    #: ``typing.get_type_hints`` looks up the names its annotations use).
    _TUPLE_NEW_CELL = (types.CellType(_tuple_new),)

    def _new_code(count: int) -> types.CodeType:
        """``__new__``'s code for ``count`` fields (compiled once per count)."""
        code = _NEW_CODE.get(count)
        if code is None:
            names = ", ".join(f"_{index}" for index in range(count))
            source = (
                "def outer(_tuple_new):\n"
                f"    def __new__(_cls, {names}):\n"
                f"        return _tuple_new(_cls, ({names}{',' if count == 1 else ''}))\n"
                "    return __new__\n"
            )
            scope: dict[str, Any] = {}
            exec(source, {}, scope)
            code = _NEW_CODE[count] = scope["outer"](_tuple_new).__code__
        return code

    def _make(cls: type[tuple[Any, ...]], iterable: Iterable[Any]) -> tuple[Any, ...]:
        """A new instance from a sequence or iterable of its fields' values."""
        made = _tuple_new(cls, iterable)
        if len(made) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(made)}")
        return made

    #: What a named tuple's _replace raises for a name it has no field for, on this Python.
    _NO_SUCH_FIELD = TypeError if sys.version_info >= (3, 13) else ValueError

    def _replace(self: Any, /, **changes: Any) -> Any:
        """A copy with the named fields replaced by new values."""
        made = self._make(map(changes.pop, self._fields, self))
        if changes:
            raise _NO_SUCH_FIELD(f"Got unexpected field names: {list(changes)!r}")
        return made

    def _repr(self: Any) -> str:
        pairs = ", ".join(
            f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True)
        )
        return f"{self.__class__.__name__}({pairs})"

    def _asdict(self: Any) -> dict[str, Any]:
        """A new dict mapping each field's name to its value."""
        return dict(zip(self._fields, self, strict=True))

    def _getnewargs(self: Any) -> tuple[Any, ...]:
        return tuple(self)

    class _NamedTupleMeta(type):
        """Builds each ``class X(NamedTuple)`` as a tuple subclass (not a subclass of
        ``NamedTuple``, which only marks the class statement)."""

        def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
            if not bases:  # NamedTuple itself
                return super().__new__(mcls, name, bases, namespace)
            if bases != (NamedTuple,):
                raise TypeError(f"{name}: a NamedTuple here subclasses NamedTuple alone")
            if "__annotations__" not in namespace and "__annotate__" in namespace:
                # (Python 3.14 evaluates annotations lazily, unless the module asks for
                # them as strings, as every module of retrysafe does)
                raise TypeError(f"{name}: its module needs `from __future__ import annotations`")
            annotations: dict[str, Any] = namespace.get("__annotations__", {})
            fields = tuple(annotations)
            defaults: dict[str, Any] = {}
            for field in fields:
                if field.startswith("_") or field in _RESERVED:
                    raise ValueError(f"{name}: a field name cannot start with '_': {field}")
                if field in namespace:
                    defaults[field] = namespace[field]
                elif defaults:
                    raise TypeError(
                        f"Non-default namedtuple field {field} cannot follow default "
                        f"field{'s' if len(defaults) > 1 else ''} {', '.join(defaults)}"
                    )
            module = sys.modules.get(namespace.get("__module__", ""))
            new = types.FunctionType(
                _new_code(len(fields)).replace(co_varnames=("_cls", *fields), co_name="__new__"),
                getattr(module, "__dict__", None) or {},
                "__new__",
                tuple(defaults.values()) or None,
                _TUPLE_NEW_CELL,
            )
            new.__qualname__ = f"{name}.__new__"
            new.__annotations__ = dict(annotations)
            new.__doc__ = f"Create new instance of {name}({', '.join(fields)})"
            made: dict[str, Any] = {
                "__slots__": (),
                "__new__": new,
                "_fields": fields,
                "_field_defaults": defaults,
                "__match_args__": fields,
                "_make": classmethod(_make),
                "_replace": _replace,
                "__repr__": _repr,
                "_asdict": _asdict,
                "__getnewargs__": _getnewargs,
            }
            for index, field in enumerate(fields):
                made[field] = _tuplegetter(index, f"Alias for field number {index}")
            for key, value in namespace.items():
                if key not in made and key not in defaults:
                    made[key] = value  # the docstring, methods, properties, annotations
            made.setdefault("__doc__", f"{name}({', '.join(fields)})")
            return type.__new__(type, name, (tuple,), made)

    class NamedTuple(metaclass=_NamedTupleMeta):
        """Subclass it, with annotated fields, for a named tuple (see the module)."""
