"""``firmware update --wait`` and ``maintenance run --wait`` follow their rollout through one loop."""

from __future__ import annotations

from typing import Any

import pytest

from podfleet.cli import follow


def test_a_rollout_is_polled_until_it_leaves_running_and_its_last_view_is_the_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow.time, "sleep", lambda _s: None)
    views: list[dict[str, Any]] = [{"state": "running", "progress": 0.0}, {"state": "running", "progress": 0.5},
                                   {"state": "paused", "progress": 0.5, "reason": "1 failed group"}]
    calls: list[int] = []

    def describe() -> dict[str, Any]:
        calls.append(1)
        return views[len(calls) - 1]

    r = follow.follow_rollout("maintenance mt-1", describe, show=False)
    assert r == views[-1] and len(calls) == 3
