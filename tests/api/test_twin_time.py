"""The twin's clock /healthz offers the console: only on a plane paced faster or slower
than the wall, and it is timeline 0's wall-clock instant plus the timeline seconds since."""

from __future__ import annotations

import time
from datetime import datetime

from podfleet.api.routes.system import twin_time
from podfleet.engine.timeline import Timeline


def _unix(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_no_twin_time_at_speed_1_or_in_virtual_time() -> None:
    assert twin_time(Timeline(seed=1, speed=1.0)) is None
    assert twin_time(Timeline(seed=1)) is None  # a rehearsal: its stamps are its own time


def test_a_sped_up_plane_starts_its_twin_time_at_the_wall_clock() -> None:
    before = time.time()
    tl = Timeline(seed=1, speed=20.0)  # timeline 0 is now: the twin starts at the wall clock
    stamp = twin_time(tl)
    assert stamp is not None and stamp.endswith("Z")
    assert before - 0.001 <= _unix(stamp) <= time.time() + 0.001
