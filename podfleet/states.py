"""Enum state machines with enforced transitions (shared helper)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

from podfleet.errors import InvalidTransitionError

S = TypeVar("S", bound=Enum)


def check_transition(kind: str, allowed: Mapping[S, frozenset[S]], src: S, dst: S) -> None:
    """Raise InvalidTransitionError with a sentence unless ``src -> dst`` is allowed."""
    if dst not in allowed.get(src, frozenset()):
        ok = ", ".join(sorted(s.value for s in allowed.get(src, frozenset()))) or "none"
        raise InvalidTransitionError(
            f"{kind} cannot go from {src.value} to {dst.value} (allowed from {src.value}: {ok})"
        )
