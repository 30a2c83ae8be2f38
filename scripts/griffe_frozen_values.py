"""Griffe extension for the API reference: ``@frozen_value`` classes get their ``__init__``.

The reference is made by mkdocstrings, which reads the source with griffe. Griffe writes
the constructor of a class decorated with ``dataclasses.dataclass``, but not of one made
by ``retrysafe.frozen_value.frozen_value`` (a frozen dataclass defined without ``exec``).
This does the same for those: one parameter per annotated field, in order, keyword-only
under ``kw_only=True``, with the field's default. Loaded by ``mkdocs.yml``.
"""

from __future__ import annotations

from typing import Any

import griffe

_DECORATOR = "retrysafe.frozen_value.frozen_value"


class FrozenValues(griffe.Extension):
    """Adds ``__init__`` to every class decorated with ``@frozen_value``."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _visit(pkg)


def _visit(owner: griffe.Module | griffe.Class) -> None:
    for member in owner.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Class):
            _add_init(member)
            _visit(member)
        elif isinstance(member, griffe.Module):
            _visit(member)


def _add_init(cls: griffe.Class) -> None:
    decorator = next(
        (
            decorator.value
            for decorator in cls.decorators
            if isinstance(decorator.value, griffe.Expr)
            and decorator.value.canonical_path == _DECORATOR
        ),
        None,
    )
    if decorator is None or "__init__" in cls.members:
        return
    kw_only = isinstance(decorator, griffe.ExprCall) and any(
        getattr(argument, "name", None) == "kw_only" and str(argument.value) == "True"
        for argument in decorator.arguments
    )
    kinds = griffe.ParameterKind
    kind = kinds.keyword_only if kw_only else kinds.positional_or_keyword
    fields = [
        griffe.Parameter(
            member.name,
            annotation=member.annotation,
            kind=kind,
            default=member.value,
            docstring=member.docstring,
        )
        for member in cls.members.values()
        if isinstance(member, griffe.Attribute)
        and member.annotation is not None  # (a frozen value's fields: it has no ClassVar)
        and "property" not in member.labels
    ]
    cls.labels.add("dataclass")
    cls.set_member(
        "__init__",
        griffe.Function(
            "__init__",
            lineno=0,
            endlineno=0,
            parent=cls,
            parameters=griffe.Parameters(
                griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword),
                *fields,
            ),
            returns="None",
        ),
    )
