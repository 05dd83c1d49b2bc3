"""The operator's chip modes (schedulable, cordoned, draining): their enum, legal moves and
the one writer of one cluster's modes. Pure: the commands that drive them live in
``control.chips``; ``ClusterRuntime`` holds a cluster's ``ChipModes``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum

from podfleet.control.chipmap import ChipMap
from podfleet.fabric.base import ChipState
from podfleet.states import any_to_any, check_transition


class ChipMode(StrEnum):
    SCHEDULABLE = "schedulable"
    CORDONED = "cordoned"
    DRAINING = "draining"


MODE_TRANSITIONS: dict[ChipMode, frozenset[ChipMode]] = any_to_any(ChipMode)

class ChipModes(ChipMap[ChipMode]):
    """One cluster's chips that are not schedulable (the one writer of modes)."""

    def __init__(self, stored: Mapping[str, str] | None = None) -> None:
        super().__init__({int(c): ChipMode(m) for c, m in (stored or {}).items()
                          if ChipMode(m) is not ChipMode.SCHEDULABLE})

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._by_chip))

    def mode(self, chip: int) -> ChipMode:
        return self._by_chip.get(chip, ChipMode.SCHEDULABLE)

    def set(self, chip: int, dst: ChipMode) -> ChipMode:
        """Move ``chip`` to ``dst`` (an illegal move raises with a sentence); returns the old mode."""
        src = self.mode(chip)
        if src is dst:
            return src
        check_transition(f"chip {chip}", MODE_TRANSITIONS, src, dst)
        if dst is ChipMode.SCHEDULABLE:
            del self._by_chip[chip]
        else:
            self._by_chip[chip] = dst
        self.version += 1
        return src

    def to_dict(self) -> dict[str, str]:
        return {str(c): m.value for c, m in sorted(self._by_chip.items())}

    def listed(self) -> list[int]:
        return sorted(self._by_chip)

    def chips_in(self, mode: ChipMode) -> list[int]:
        """The chips in ``mode``, sorted (any thread: reads a copy)."""
        return sorted(c for c, m in self._by_chip.copy().items() if m is mode)

    def to_modes(self) -> list[ChipMode]:
        """Every non-schedulable chip's mode (any thread: a copy)."""
        return list(self._by_chip.copy().values())


UNAVAILABLE = "unavailable"


def shown_mode(mode: ChipMode, state: str) -> str:
    """The mode a view shows: the operator's, except that a chip the operator left
    schedulable but the fabric took out of service (failed, isolated, updating, degraded:
    placement takes healthy chips only) reads ``unavailable``, never ``schedulable``."""
    if mode is ChipMode.SCHEDULABLE and state != ChipState.HEALTHY.value:
        return UNAVAILABLE
    return mode.value
