"""Enum state machines (``podfleet.states``): built from where each state may go."""

from __future__ import annotations

from enum import StrEnum

import pytest

from podfleet.errors import InvalidTransitionError
from podfleet.health.alerts import AlertState
from podfleet.states import any_to_any, check_transition, transitions


class Light(StrEnum):
    RED = "red"
    GREEN = "green"
    BROKEN = "broken"


def test_a_state_the_moves_leave_out_is_final_and_the_table_follows_the_enum() -> None:
    t = transitions(Light, {Light.GREEN: {Light.RED, Light.BROKEN}, Light.RED: {Light.GREEN}})
    assert list(t) == [Light.RED, Light.GREEN, Light.BROKEN]
    assert t[Light.BROKEN] == frozenset() and t[Light.GREEN] == {Light.RED, Light.BROKEN}
    check_transition("light", t, Light.RED, Light.GREEN)
    with pytest.raises(InvalidTransitionError, match=r"light cannot go from broken to red \(allowed from broken: none\)"):
        check_transition("light", t, Light.BROKEN, Light.RED)


def test_a_move_to_or_from_another_machine_s_state_is_refused() -> None:
    with pytest.raises(ValueError, match="not states of this machine"):
        transitions(Light, {Light.RED: {AlertState.FIRING}})  # type: ignore[misc]


def test_any_to_any_goes_everywhere_but_to_itself() -> None:
    assert any_to_any(Light)[Light.RED] == {Light.GREEN, Light.BROKEN}
