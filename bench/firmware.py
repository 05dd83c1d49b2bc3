"""Rolling firmware update across a 64-chip job's pod on the twin: one chip at a time,
its rank moved to a free chip first (a live copy), 60 s per update, health check after.

``max_interruption_s``: the longest pause any job saw for one chip's update.
``compute_lost_ratio``: job chip-seconds paused / job chip-seconds in the rollout window.
"""

from __future__ import annotations

from typing import Any

from podfleet.recovery.firmware import FirmwareRollouts
from podfleet.twin.harness import make_pod

NAME = "firmware"
DESCRIPTION = "rolling firmware update of 64 chips: max_interruption_s (<= 1), compute_lost_ratio (<= 0.02)"


def run(quick: bool = False) -> dict[str, Any]:
    pod = make_pod(5, jobs=(64,))
    tl = pod.tl
    fw = FirmwareRollouts(pod.fab, tl, pod.orch)
    tl.run(until=300.0)
    chips = list(range(16 if quick else 64))
    r = fw.start("2.22.0", unit="chip", chips=chips)
    while r.state.value == "running":
        tl.run(until=tl.now + 600.0)
    window = (r.t_end or tl.now) - r.t_start
    paused = sum(r.interruptions_s)
    return {
        "max_interruption_s": round(max(r.interruptions_s, default=0.0), 4),
        "compute_lost_ratio": round(paused / window, 6) if window else 0.0,
        "chips_updated": len(r.done),
        "state": r.state.value,
        "rollout_window_s": round(window, 1),
        "job_state": str(pod.fab.job("job-0").state),
    }
