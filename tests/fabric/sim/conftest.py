"""Fixtures for the twin: a timeline and a 64-chip UltraServer fabric with random faults off."""

from __future__ import annotations

import pytest

from podfleet.engine import Timeline
from podfleet.fabric.base import FabricEvent
from podfleet.fabric.sim import SimFabric


@pytest.fixture
def tl() -> Timeline:
    return Timeline(42)


@pytest.fixture
def pod(tl: Timeline) -> SimFabric:
    return SimFabric("trn2-ultraserver", tl, spares=4)


@pytest.fixture
def events(pod: SimFabric) -> list[FabricEvent]:
    got: list[FabricEvent] = []
    pod.subscribe(got.append)
    return got
