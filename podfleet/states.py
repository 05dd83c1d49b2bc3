"""Enum state machines with enforced transitions (shared helper)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import TypeVar

from podfleet.errors import InvalidTransitionError

S = TypeVar("S", bound=Enum)


def any_to_any(states: Iterable[S]) -> dict[S, frozenset[S]]:
    """The transitions of a machine whose every state may go to every other one."""
    every = frozenset(states)
    return {s: every - {s} for s in every}


def transitions(states: Iterable[S], moves: Mapping[S, Iterable[S]]) -> dict[S, frozenset[S]]:
    """The transitions of a machine from where each state may go (``moves``): a state that
    ``moves`` leaves out is final (it goes nowhere). Listed in the order of ``states``."""
    every = list(states)
    named = set(moves) | {dst for targets in moves.values() for dst in targets}
    if not named <= set(every):
        raise ValueError(f"not states of this machine: {sorted(str(s) for s in named - set(every))}")
    return {s: frozenset(moves.get(s, ())) for s in every}


def check_transition(kind: str, allowed: Mapping[S, frozenset[S]], src: S, dst: S) -> None:
    """Raise InvalidTransitionError with a sentence unless ``src -> dst`` is allowed."""
    if dst not in allowed.get(src, frozenset()):
        ok = ", ".join(sorted(s.value for s in allowed.get(src, frozenset()))) or "none"
        raise InvalidTransitionError(
            f"{kind} cannot go from {src.value} to {dst.value} (allowed from {src.value}: {ok})"
        )
