"""``@frozen_value`` makes the class ``@dataclasses.dataclass(frozen=True)`` would make.

Each test builds the same class both ways and expects the same behaviour: construction
(and the same ``TypeError`` for a wrong call), equality, hashing, repr, immutability, and
the dataclasses functions. The last tests check retrysafe's own value classes.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import typing
from collections.abc import Callable
from typing import Any

import pytest

import retrysafe
from retrysafe.classify import Verdict
from retrysafe.frozen_value import frozen_value
from retrysafe.governor.settings import (
    BreakerSettings,
    BudgetSettings,
    GovernorSettings,
    LimiterSettings,
)


@frozen_value
class Point:
    """Positional fields, one of them required."""

    x: int
    y: int = 0
    label: str | None = None

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("x must be >= 0")


@dataclasses.dataclass(frozen=True)
class DataPoint:
    x: int
    y: int = 0
    label: str | None = None

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("x must be >= 0")


@frozen_value(kw_only=True)
class Limits:
    """Keyword-only fields, all with defaults but one."""

    rate: float
    burst: int = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataLimits:
    rate: float
    burst: int = 1


PAIRS = [(Point, DataPoint), (Limits, DataLimits)]


def _error_of(make: Callable[[], object]) -> str:
    with pytest.raises(TypeError) as caught:
        make()
    return str(caught.value)


def test_positional_and_keyword_construction_fill_defaults_like_a_dataclass() -> None:
    for args, kwargs in [((1,), {}), ((1, 2), {}), ((1,), {"label": "a"}), ((), {"x": 3})]:
        ours, theirs = Point(*args, **kwargs), DataPoint(*args, **kwargs)
        assert (ours.x, ours.y, ours.label) == (theirs.x, theirs.y, theirs.label)
    assert Limits(rate=2.0).burst == DataLimits(rate=2.0).burst == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda cls: cls(),
        lambda cls: cls(1, 2, "a", 4),
        lambda cls: cls(1, x=2),
        lambda cls: cls(1, z=2),
    ],
    ids=["missing", "too many positional", "twice", "unknown keyword"],
)
def test_a_wrong_call_raises_the_dataclass_type_error(call: Callable[[type], object]) -> None:
    ours = _error_of(lambda: call(Point)).replace("Point", "CLS")
    theirs = _error_of(lambda: call(DataPoint)).replace("DataPoint", "CLS")
    assert ours == theirs


def test_keyword_only_fields_refuse_positions_and_name_the_missing_one() -> None:
    assert _error_of(lambda: Limits(1.0)).replace("Limits", "C") == _error_of(
        lambda: DataLimits(1.0)  # type: ignore[misc]
    ).replace("DataLimits", "C")
    assert _error_of(lambda: Limits()).replace("Limits", "C") == _error_of(  # type: ignore[call-arg]
        lambda: DataLimits()  # type: ignore[call-arg]
    ).replace("DataLimits", "C")


def test_post_init_runs_after_the_fields_are_set() -> None:
    with pytest.raises(ValueError, match="x must be >= 0"):
        Point(-1)


def test_a_subclass_s_post_init_is_the_one_called() -> None:
    class Checked(Point):
        def __post_init__(self) -> None:
            raise ValueError("checked")

    with pytest.raises(ValueError, match="checked"):
        Checked(1)


def test_a_field_with_options_is_refused_rather_than_ignored() -> None:
    with pytest.raises(TypeError, match=r"Odd\.x: use dataclasses\.dataclass"):

        @frozen_value
        class Odd:
            x: int = dataclasses.field(default=1, compare=False)


def test_equal_by_class_and_fields_and_hashed_by_fields() -> None:
    assert Point(1, 2) == Point(1, 2)
    assert Point(1, 2) != Point(1, 3)
    assert hash(Point(1, 2)) == hash(DataPoint(1, 2)) == hash((1, 2, None))
    assert Point(1, 2) != DataPoint(1, 2)  # another class, as between two dataclasses
    assert len({Point(1), Point(1), Point(2)}) == 2
    assert Limits(rate=0.5) == Limits(rate=0.5)


def test_repr_is_the_dataclass_repr() -> None:
    assert repr(Point(1, label="a")) == repr(DataPoint(1, label="a")).replace("DataPoint", "Point")
    assert repr(Limits(rate=0.5)) == "Limits(rate=0.5, burst=1)"


def test_fields_cannot_be_assigned_or_deleted() -> None:
    point = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'x'"):
        del point.x  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.other = 1  # type: ignore[attr-defined]
    assert point.x == 1


def test_dataclasses_functions_and_pickle_work() -> None:
    point = Point(1, 2, "a")
    assert dataclasses.is_dataclass(point)
    assert [field.name for field in dataclasses.fields(Point)] == ["x", "y", "label"]
    assert dataclasses.replace(point, y=5) == Point(1, 5, "a")
    assert dataclasses.asdict(point) == {"x": 1, "y": 2, "label": "a"}
    assert pickle.loads(pickle.dumps(point)) == point
    assert Point.__match_args__ == DataPoint.__match_args__ == ("x", "y", "label")
    assert Limits.__match_args__ == DataLimits.__match_args__ == ()
    with pytest.raises(ValueError, match="x must be >= 0"):
        dataclasses.replace(point, x=-1)


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=lambda cls: cls.__name__)
def test_signature_and_type_hints_are_the_dataclass_ones(ours: type, theirs: type) -> None:
    assert str(inspect.signature(ours)) == str(inspect.signature(theirs))
    assert typing.get_type_hints(ours.__init__) == typing.get_type_hints(theirs.__init__)
    assert ours.__init__.__qualname__ == f"{ours.__qualname__}.__init__"


def test_a_frozen_dataclass_can_subclass_it_and_a_mutable_one_cannot() -> None:
    assert Point.__dataclass_params__.frozen  # type: ignore[attr-defined]

    @dataclasses.dataclass(frozen=True)
    class Tagged(Point):
        tag: str = ""

    tagged = Tagged(1, 2, None, "t")
    assert (tagged.x, tagged.y, tagged.tag) == (1, 2, "t")
    assert repr(tagged).endswith("Tagged(x=1, y=2, label=None, tag='t')")
    with pytest.raises(ValueError, match="x must be >= 0"):
        Tagged(-1)
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):

        @dataclasses.dataclass
        class Mutable(Point):
            tag: str = ""


def test_a_plain_subclass_may_set_its_own_attributes_but_not_the_fields() -> None:
    class WithExtra(Point):
        pass

    class DataWithExtra(DataPoint):
        pass

    for cls in (WithExtra, DataWithExtra):
        value = cls(1)
        value.extra = 5  # type: ignore[attr-defined]
        del value.extra  # type: ignore[attr-defined]
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
            value.x = 2  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'y'"):
            del value.y  # type: ignore[misc]


@frozen_value
class Triple:
    a: int
    b: int
    c: int


@dataclasses.dataclass(frozen=True)
class DataTriple:
    a: int
    b: int
    c: int


def test_missing_arguments_are_listed_as_python_lists_them() -> None:
    assert _error_of(lambda: Triple()).replace("Triple", "C") == _error_of(  # type: ignore[call-arg]
        lambda: DataTriple()  # type: ignore[call-arg]
    ).replace("DataTriple", "C")

    class SubTriple(Triple):
        pass

    class DataSubTriple(DataTriple):
        pass

    # (the message names the class that defines __init__, not the subclass)
    assert _error_of(lambda: SubTriple(1)).replace("Triple", "C") == _error_of(  # type: ignore[call-arg]
        lambda: DataSubTriple(1)  # type: ignore[call-arg]
    ).replace("DataTriple", "C")


@frozen_value
class Holder:
    items: list[object]


def test_a_value_that_contains_itself_prints_as_a_dataclass_does() -> None:
    items: list[object] = []
    holder = Holder(items)
    items.append(holder)
    assert repr(holder) == "Holder(items=[...])"


def test_a_class_without_fields_or_docstring_is_made_as_a_dataclass_would_be() -> None:
    @frozen_value
    class Empty:
        pass

    @frozen_value
    class Undocumented:
        x: int

    assert Empty() == Empty()
    assert hash(Empty()) == hash(())
    assert repr(Empty()).endswith("Empty()")
    assert Undocumented.__doc__ == "Undocumented(x: 'int')"


def test_a_class_that_writes_its_own_methods_is_refused() -> None:
    with pytest.raises(TypeError, match=r"writes Bad\.__eq__"):

        @frozen_value
        class Bad:
            x: int

            def __eq__(self, other: object) -> bool:
                return True


VALUES: list[tuple[type, dict[str, Any]]] = [
    (retrysafe.RetryPolicy, {"attempts": 2}),
    (retrysafe.CallOptions, {"dependency": "search"}),
    (Verdict, {"kind": "retry", "reason": "x"}),
    (BudgetSettings, {"ratio": 0.5}),
    (BreakerSettings, {"open_for": 2.0}),
    (LimiterSettings, {"burst": 2}),
    (GovernorSettings, {"nested_attempts": 3}),
]


def _name(value: object) -> str:
    return getattr(value, "__name__", "")


@pytest.mark.parametrize(("cls", "fields"), VALUES, ids=_name)
def test_retrysafes_values_are_frozen_dataclasses(cls: type, fields: dict[str, Any]) -> None:
    value = cls(**fields)
    assert dataclasses.is_dataclass(value)
    assert value == cls(**fields)
    assert hash(value) == hash(cls(**fields))
    assert list(inspect.signature(cls).parameters) == [f.name for f in dataclasses.fields(cls)]
    name = next(iter(fields))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, fields[name])
    with pytest.raises(TypeError, match="unexpected keyword argument 'nonsense'"):
        cls(**fields, nonsense=1)


@pytest.mark.parametrize(
    ("slip", "meant"),
    [
        ("timeout", "attempt_timeout"),  # (the CLI's --timeout)
        ("max_attempts", "attempts"),
        ("backof_base", "backoff_base"),
        ("Deadline", "deadline"),
        ("max_retry_after_seconds", "max_retry_after"),
    ],
)
def test_a_slip_of_a_fields_name_is_told_the_field_meant(slip: str, meant: str) -> None:
    """trial74: ``RetryPolicy(timeout=0.3)`` named no field, where the chaos server
    suggests its near misses."""
    with pytest.raises(TypeError, match=rf"argument '{slip}'; did you mean '{meant}'\?$"):
        retrysafe.RetryPolicy(**{slip: 1})


def test_a_name_like_no_field_gets_no_suggestion() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'zzz'$"):
        retrysafe.RetryPolicy(zzz=1)  # type: ignore[call-arg]


def test_retry_event_is_a_frozen_dataclass() -> None:
    event = retrysafe.RetryEvent(
        **{
            field.name: None
            for field in dataclasses.fields(retrysafe.RetryEvent)
            if field.default is dataclasses.MISSING
        }
    )
    assert dataclasses.replace(event) == event
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.kind = "retry"  # type: ignore[misc]
