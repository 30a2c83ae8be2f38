"""``@frozen_value``: a frozen dataclass that costs little to define.

``@dataclasses.dataclass(frozen=True)`` writes the source of six methods for each class
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``)
and compiles each one with ``exec`` when the class is defined: about half a millisecond a
class. ``import retrysafe`` defines eight value classes a client needs (the policy, the
load-protection settings, ``CallOptions``, ``Verdict``, ``RetryEvent``), and compiling
their methods was about a third of what the import added to httpx's. ``@frozen_value``
makes the same class out of methods written once, here:

- it is a dataclass (``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass``
  work; type checkers read it as a frozen dataclass);
- ``__init__`` takes the fields by name (and in order, unless ``kw_only=True``), fills in
  the defaults, sets the fields and calls ``__post_init__``; a wrong call is the same
  ``TypeError`` the dataclass would raise, and ``inspect.signature`` and
  ``typing.get_type_hints`` see the same parameters;
- instances are equal when their classes and fields are, hash by their fields, print as
  ``Name(field=value, ...)``, and refuse assignment with ``FrozenInstanceError``;
- a subclass behaves as a dataclass's subclass: a frozen dataclass may extend it (a
  mutable one may not), and a plain subclass may set attributes other than the fields.

It covers what those classes use: fields with plain defaults, and ``__post_init__``. A
class that needs ``field(...)``, ``InitVar`` or ordering, or that ``import retrysafe``
does not define, uses ``dataclasses.dataclass``. Constructing a frozen value costs a
little more than a dataclass (0.4 to 0.7 µs); a successful call builds one only when it
passes its own ``policy=`` or ``dependency=`` (its ``CallOptions``), or when a hook listens
(a ``RetryEvent`` per event).
The API reference learns the constructor from ``scripts/griffe_frozen_values.py``.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import reprlib
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

__all__ = ["frozen_value"]

_T = TypeVar("_T")
_MISSING: Any = dataclasses.MISSING

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
elif sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover - Python 3.10: the marker is for type checkers only

    def dataclass_transform(**_: object) -> Callable[[_T], _T]:
        return lambda decorated: decorated


@overload
def frozen_value(cls: type[_T], /) -> type[_T]: ...


@overload
def frozen_value(*, kw_only: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True)
def frozen_value(
    cls: type[_T] | None = None, /, *, kw_only: bool = False
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """Make ``cls`` a frozen dataclass (``kw_only``: its fields are passed by name only)."""

    def make(cls: type[_T]) -> type[_T]:
        return _make_frozen_value(cls, kw_only=kw_only)

    return make if cls is None else make(cls)


def _make_frozen_value(cls: type[_T], *, kw_only: bool) -> type[_T]:
    for name in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__"):
        if name in vars(cls):
            raise TypeError(f"@frozen_value writes {cls.__name__}.{name}; do not define it")
    documented = cls.__doc__ is not None
    # Only what needs no exec: the fields and __match_args__.
    dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
    _declare_frozen(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    for field in fields:
        plain = (
            field.default_factory is _MISSING
            and field.init
            and field.repr
            and field.compare
            and field.hash is None
            and not field.metadata
            and field.kw_only == kw_only
        )
        if not plain:
            raise TypeError(
                f"@frozen_value takes fields with plain defaults only, not "
                f"{cls.__name__}.{field.name}: use dataclasses.dataclass for field(...)"
            )
    names = tuple(field.name for field in fields)
    defaults = tuple(field.default for field in fields)
    module_globals = sys.modules[cls.__module__].__dict__
    init = _function_in(module_globals, _init_for(cls, names, defaults, kw_only))
    init.__annotations__ = {field.name: field.type for field in fields} | {"return": None}
    kind = inspect.Parameter.KEYWORD_ONLY if kw_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
    init.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [
            inspect.Parameter(
                field.name,
                kind,
                default=inspect.Parameter.empty if field.default is _MISSING else field.default,
                annotation=field.type,
            )
            for field in fields
        ],
        return_annotation=None,
    )
    refuse_setattr, refuse_delattr = _frozen_guards(cls, names)
    made: dict[str, Any] = {
        "__init__": init,
        "__repr__": _repr_for(names),
        "__eq__": _eq_for(names),
        "__hash__": _hash_for(names),
        "__setattr__": refuse_setattr,
        "__delattr__": refuse_delattr,
    }
    for name, method in made.items():
        method.__name__ = name
        method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)
    if not documented:  # (as the dataclass documents it: by its signature)
        cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
    return cls


def _declare_frozen(cls: type) -> None:
    """Make ``__dataclass_params__`` say what the class is (frozen, with its own
    ``__init__``, ``__repr__`` and ``__eq__``), so that a dataclass subclassing it is
    checked as a dataclass subclassing a frozen one is."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    given = {name: getattr(params, name) for name in type(params).__slots__}
    given.update(init=True, repr=True, eq=True, frozen=True)
    cls.__dataclass_params__ = type(params)(**given)  # type: ignore[attr-defined]


def _function_in(module_globals: dict[str, Any], function: Any) -> Any:
    """A copy of ``function`` whose globals are the class's module, so that
    ``typing.get_type_hints`` resolves its annotations where the class's resolve."""
    return types.FunctionType(
        function.__code__, module_globals, "__init__", None, function.__closure__
    )


def _init_for(
    cls: type, names: tuple[str, ...], defaults: tuple[object, ...], kw_only: bool
) -> Callable[..., None]:
    positional = () if kw_only else names
    known = frozenset(names)
    required = tuple(
        name for name, default in zip(names, defaults, strict=True) if default is _MISSING
    )
    set_field = object.__setattr__
    # (worded as Python words it for a function: self counts, defaults make a range)
    fewest = 1 + sum(1 for name in positional if name in required)
    most = 1 + len(positional)
    takes = (
        f"{most} positional argument{'s' if most > 1 else ''}"
        if fewest == most
        else f"from {fewest} to {most} positional arguments"
    )
    has_post_init = hasattr(cls, "__post_init__")
    owner = f"{cls.__qualname__}.__init__()"
    required_names = frozenset(required)
    fields = tuple(zip(names, defaults, strict=True))
    did_you_mean = _did_you_mean  # (a closure: init runs with the class's module globals)

    def init(self: object, *args: object, **kwargs: object) -> None:
        if args:
            if len(args) > len(positional):
                raise TypeError(f"{owner} takes {takes} but {len(args) + 1} were given")
            for name, value in zip(positional, args, strict=False):
                if name in kwargs:
                    raise TypeError(f"{owner} got multiple values for argument {name!r}")
                kwargs[name] = value
        if not known.issuperset(kwargs):
            unknown = next(name for name in kwargs if name not in known)
            hint = did_you_mean(unknown, names)
            raise TypeError(f"{owner} got an unexpected keyword argument {unknown!r}{hint}")
        if not required_names <= kwargs.keys():
            absent = [name for name in required if name not in kwargs]
            quoted = [repr(name) for name in absent]
            listed = (
                " and ".join(quoted)
                if len(quoted) < 3
                else ", ".join(quoted[:-1]) + ", and " + quoted[-1]
            )
            kind = "keyword-only argument" if kw_only else "positional argument"
            raise TypeError(
                f"{owner} missing {len(absent)} required "
                f"{kind}{'s' if len(absent) > 1 else ''}: {listed}"
            )
        # (every field without a default is in kwargs by now)
        for name, default in fields:
            set_field(self, name, kwargs.get(name, default))
        if has_post_init:
            self.__post_init__()  # type: ignore[attr-defined]  # (a subclass's, if it has one)

    return init


def _did_you_mean(unknown: str, names: tuple[str, ...]) -> str:
    """``"; did you mean 'attempt_timeout'?"`` for the field ``unknown`` looks like a slip
    for (a field that ends with it or that it holds, or one spelled nearly alike), else
    ``""``."""
    import difflib

    lowered = unknown.lower()
    near = [n for n in names if n.endswith(lowered) or n in lowered]
    near = near or difflib.get_close_matches(lowered, names, n=1, cutoff=0.6)
    return f"; did you mean {near[0]!r}?" if near else ""


def _repr_for(names: tuple[str, ...]) -> Callable[[object], str]:
    @reprlib.recursive_repr()
    def represent(self: object) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({shown})"

    return represent


def _values_of(names: tuple[str, ...]) -> Callable[[object], tuple[object, ...]]:
    """The fields' values of an instance, as a tuple (as the dataclass compares them)."""
    if len(names) < 2:  # (attrgetter takes one name or more, and returns a tuple for two)
        return lambda instance: tuple(getattr(instance, name) for name in names)
    return operator.attrgetter(*names)


def _eq_for(names: tuple[str, ...]) -> Callable[[object, object], object]:
    values = _values_of(names)

    def equal(self: object, other: object) -> object:  # (bool, or NotImplemented)
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(values(self) == values(other))

    return equal


def _hash_for(names: tuple[str, ...]) -> Callable[[object], int]:
    values = _values_of(names)

    def hash_fields(self: object) -> int:
        return hash(values(self))

    return hash_fields


def _frozen_guards(
    cls: type, names: tuple[str, ...]
) -> tuple[Callable[[object, str, object], None], Callable[[object, str], None]]:
    """``__setattr__`` and ``__delattr__``: every attribute is refused on the class itself,
    and only its fields on a subclass (as the dataclass refuses them)."""
    field_names = frozenset(names)

    def refused(self: object, name: str) -> bool:
        return type(self) is cls or name in field_names

    def refuse_setattr(self: object, name: str, value: object) -> None:
        if refused(self, name):
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)  # type: ignore[arg-type]

    def refuse_delattr(self: object, name: str) -> None:
        if refused(self, name):
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)  # type: ignore[arg-type]

    return refuse_setattr, refuse_delattr
