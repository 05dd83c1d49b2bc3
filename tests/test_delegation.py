"""Attributes read (and written) through to a collaborator (``podfleet.delegation``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pytest

from podfleet.delegation import Delegated, Settable


@dataclass
class Inner:
    n: int = 1
    chips: frozenset[int] = frozenset()


@dataclass
class Middle:
    inner: Inner = field(default_factory=Inner)


@dataclass
class Outer:
    mid: Middle = field(default_factory=Middle)
    n = Delegated[int]("mid.inner")
    count = Delegated[int]("mid.inner", "n")
    chips = Settable[frozenset[int]]("mid.inner", convert=frozenset)


def test_reads_through_a_dotted_path_under_its_own_or_another_name() -> None:
    o = Outer()
    o.mid.inner.n = 7
    assert (o.n, o.count) == (7, 7)
    assert isinstance(Outer.n, Delegated)  # on the class: the descriptor itself
    assert [f.name for f in fields(Outer)] == ["mid"]  # not a dataclass field


def test_a_delegated_attribute_is_read_only_like_a_property() -> None:
    o = Outer()
    with pytest.raises(AttributeError, match=r"Outer\.n is read-only \(it reads mid\.inner\)"):
        o.n = 3  # type: ignore[assignment]
    assert o.mid.inner.n == 1 and "n" not in vars(o)


def test_a_settable_attribute_writes_through_after_convert() -> None:
    o = Outer()
    o.chips = {1, 2}  # type: ignore[assignment]
    assert o.mid.inner.chips == frozenset({1, 2}) and isinstance(o.mid.inner.chips, frozenset)
    assert o.chips == frozenset({1, 2})
