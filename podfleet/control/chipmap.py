"""``ChipMap``: a cluster's per-chip table with one writer (chip modes, chip owners) read
as a ``Mapping`` of chip -> value, and its ``version``, bumped on every change so readers
that derive a copy skip when it did not move."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeVar

V = TypeVar("V")


class ChipMap(Mapping[int, V]):
    def __init__(self, by_chip: dict[int, V] | None = None) -> None:
        self._by_chip: dict[int, V] = by_chip if by_chip is not None else {}
        self.version = 0

    def __getitem__(self, chip: int) -> V:
        return self._by_chip[chip]

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._by_chip))  # a copy: the writer may change the table meanwhile

    def __len__(self) -> int:
        return len(self._by_chip)
