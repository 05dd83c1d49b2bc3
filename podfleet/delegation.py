"""Attributes that read (and, where said, write) through to a collaborator's attribute.

A class that owns its state in a collaborator (a context object, a board, a runner)
and shows some of it as its own writes one line per attribute instead of a property::

    class Board:
        spec = Delegated[ChipSpec]("ctx")                   # self.ctx.spec
        rates = Delegated[FaultRates]("faults", "rates")    # self.faults.rates
        spares = Settable[frozenset[int]]("ctx", convert=frozenset)

``Delegated`` is read-only like a ``property`` without a setter (assigning raises
``AttributeError``, and mypy rejects it); ``Settable`` writes through, after ``convert``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, Generic, NoReturn, Self, TypeVar, overload

T = TypeVar("T")


class Delegated(Generic[T]):
    """``obj.<name>`` reads ``obj.<via>.<attr>`` (``via`` may be dotted; ``attr`` defaults
    to the name it is bound to)."""

    def __init__(self, via: str, attr: str | None = None) -> None:
        self.via = via
        self.attr = attr
        self.name = attr or "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        if self.attr is None:
            self.attr = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Self: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> Self | T:
        if obj is None:
            return self
        value: T = getattr(attrgetter(self.via)(obj), self.attr or self.name)
        return value

    def __set__(self, obj: object, value: NoReturn) -> None:
        raise AttributeError(f"{type(obj).__name__}.{self.name} is read-only (it reads {self.via})")


class Settable(Delegated[T]):
    """A ``Delegated`` that also writes through: ``obj.<name> = v`` sets
    ``obj.<via>.<attr> = convert(v)``."""

    def __init__(self, via: str, attr: str | None = None,
                 convert: Callable[[Any], T] | None = None) -> None:
        super().__init__(via, attr)
        self.convert = convert

    def __set__(self, obj: object, value: T) -> None:  # type: ignore[override]
        setattr(attrgetter(self.via)(obj), self.attr or self.name,
                value if self.convert is None else self.convert(value))
