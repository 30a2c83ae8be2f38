"""retrysafe's NamedTuple behaves as typing.NamedTuple does, for what retrysafe uses.

Each test builds the same class both ways and holds the two to the same behaviour.
"""

from __future__ import annotations

import copy
import inspect
import pickle
import sys
import typing

import pytest

from retrysafe.decisions import CallReport, Wait
from retrysafe.errors import AttemptRecord
from retrysafe.named_tuple import NamedTuple


class Made(NamedTuple):
    """A record made here."""

    number: int
    label: str
    ratio: float = 0.5
    note: str | None = None

    @property
    def doubled(self) -> int:
        return self.number * 2

    def describe(self) -> str:
        return f"{self.label}#{self.number}"


class Typed(typing.NamedTuple):
    """A record made by typing."""

    number: int
    label: str
    ratio: float = 0.5
    note: str | None = None


BOTH = pytest.mark.parametrize("cls", [Made, Typed], ids=["retrysafe", "typing"])


@BOTH
def test_fields_by_position_by_name_and_by_default(cls: type[Made]) -> None:
    record = cls(1, label="a")
    assert tuple(record) == (1, "a", 0.5, None)
    assert (record.number, record.label, record.ratio, record.note) == (1, "a", 0.5, None)
    assert record[1] == "a"
    assert record == (1, "a", 0.5, None)
    assert isinstance(record, tuple)
    assert cls(1, "a", 0.25, "n") == cls(number=1, label="a", ratio=0.25, note="n")


def test_it_is_a_tuple_of_its_own_class_not_of_named_tuple() -> None:
    assert Made.__mro__ == (Made, tuple, object)
    assert type(Made(1, "a")) is Made
    assert Made.__module__ == __name__
    assert Made.__qualname__ == "Made"


@BOTH
def test_the_class_descriptions_match(cls: type[Made]) -> None:
    assert cls._fields == ("number", "label", "ratio", "note")
    assert cls._field_defaults == {"ratio": 0.5, "note": None}
    assert cls.__match_args__ == cls._fields
    parameters = inspect.signature(cls).parameters.values()
    assert [(each.name, each.default) for each in parameters] == [
        ("number", inspect.Parameter.empty),
        ("label", inspect.Parameter.empty),
        ("ratio", 0.5),
        ("note", None),
    ]
    assert typing.get_type_hints(cls) == {
        "number": int,
        "label": str,
        "ratio": float,
        "note": str | None,
    }


@BOTH
def test_wrong_calls_fail_as_a_named_tuple_fails(cls: type[Made]) -> None:
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'label'"):
        cls(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        cls(1, "a", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes from 3 to 5 positional arguments but 6"):
        cls(1, "a", 0.5, None, "extra")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'number'"):
        cls(1, "a", number=2)  # type: ignore[misc]


@BOTH
def test_fields_cannot_be_set(cls: type[Made]) -> None:
    record = cls(1, "a")
    with pytest.raises(AttributeError):
        record.number = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        record.colour = "red"  # type: ignore[attr-defined]


@BOTH
def test_replace_make_asdict(cls: type[Made]) -> None:
    record = cls(1, "a")
    assert record._replace(ratio=0.75) == cls(1, "a", 0.75)
    assert type(record._replace(ratio=0.75)) is cls
    # (ValueError before Python 3.13, TypeError from then on, as collections.namedtuple)
    no_such_field = TypeError if sys.version_info >= (3, 13) else ValueError
    with pytest.raises(no_such_field, match="unexpected field names: \\['colour'\\]"):
        record._replace(colour="red")
    assert cls._make([2, "b", 0.1, "n"]) == cls(2, "b", 0.1, "n")
    with pytest.raises(TypeError, match="Expected 4 arguments, got 2"):
        cls._make([2, "b"])
    assert record._asdict() == {"number": 1, "label": "a", "ratio": 0.5, "note": None}


@BOTH
def test_repr_equality_hash_pickle_copy(cls: type[Made]) -> None:
    record = cls(1, "a", note="n")
    assert repr(record) == f"{cls.__name__}(number=1, label='a', ratio=0.5, note='n')"
    assert hash(record) == hash((1, "a", 0.5, "n"))
    assert pickle.loads(pickle.dumps(record)) == record
    assert type(pickle.loads(pickle.dumps(record))) is cls
    assert copy.copy(record) == record
    assert copy.deepcopy(record) == record


@BOTH
def test_match_by_position(cls: type[Made]) -> None:
    match cls(3, "c"):
        case cls(number, label):  # type: ignore[misc]
            assert (number, label) == (3, "c")
        case _:
            pytest.fail("the record did not match its own class")


def test_the_class_body_keeps_its_docstring_methods_and_properties() -> None:
    record = Made(2, "b")
    assert Made.__doc__ == "A record made here."
    assert record.doubled == 4
    assert record.describe() == "b#2"


def test_the_class_statement_is_checked_as_typing_checks_it() -> None:
    with pytest.raises(TypeError, match="Non-default namedtuple field late cannot follow"):

        class _Late(NamedTuple):
            early: int = 0
            late: int

    with pytest.raises(ValueError, match="cannot start with '_'"):

        class _Hidden(NamedTuple):
            _secret: int

    with pytest.raises(TypeError, match="subclasses NamedTuple alone"):

        class _Mixed(NamedTuple, Exception):  # type: ignore[misc]
            value: int


def test_one_and_many_fields() -> None:
    class One(NamedTuple):
        only: str

    class Many(NamedTuple):
        a: int
        b: int
        c: int
        d: int
        e: int
        f: int
        g: int
        h: int
        i: int
        j: int
        k: int

    assert One("x") == ("x",)
    assert One(only="x").only == "x"
    assert Many(*range(11)).k == 10
    assert Many(*range(11)).a == 0


def test_retrysafe_records_are_made_this_way() -> None:
    for cls in (CallReport, AttemptRecord, Wait):
        assert cls.__mro__ == (cls, tuple, object)
        assert cls.__module__.startswith("retrysafe.")
    assert Wait(1.5).seconds == 1.5


class Ahead(NamedTuple):
    """A record whose field's type is defined further down its module."""

    later: Later
    others: tuple[Later, ...] = ()


class Later:
    pass


def test_new_resolves_hints_on_names_its_module_defines_later() -> None:
    # (its __new__ once had globals of its own, where no name of the module was found)
    expected = {"later": Later, "others": tuple[Later, ...]}
    assert typing.get_type_hints(Ahead.__new__) == expected
    assert typing.get_type_hints(Ahead) == expected
    assert typing.get_type_hints(CallReport.__new__)["history"] == tuple[AttemptRecord, ...]
    assert Ahead(Later()).others == ()
