"""Recovery on the real control plane in virtual time (the recovery benchmarks' path)."""

from __future__ import annotations

import pytest

from podfleet.recovery.model import Timings
from podfleet.twin.recovery_rehearsal import CLUSTER, rehearse

JOB = {"model": "llama3-70b", "chips": 64, "steps": 10**7, "checkpoint_interval": 10,
       "parallelism": {"tp": 8, "pp": 4, "dp": 2}}


def test_recovery_durations_come_from_detection_and_the_copy_path() -> None:
    r = rehearse(3)
    job = r.submit(dict(JOB))
    chip = r.chips(job)[7]
    t0 = r.tl.now
    r.plane.inject_fault(CLUSTER, "chip-failure", chip=chip, actor="t")
    r.tl.run(t0 + 30.0)
    rec = [x for x in r.recoveries() if x["job_id"] == job][-1]
    tm = Timings()
    assert rec["state"] == "done" and rec["restored_from"] == "replica"
    assert [s["name"] for s in rec["steps"]][:2] == ["detect", "isolate"]
    detect = rec["detected_t"] - rec["t_start"]
    assert tm.hang_timeout_s - tm.heartbeat_interval_s <= detect <= tm.hang_timeout_s + tm.monitor_poll_s
    restore = next(s for s in rec["steps"] if s["name"] == "restore")
    # The job fills one pod; the free chips are in the other: the copy crosses the network tier.
    assert restore["detail"]["bw_bytes_per_s"] == r.fabric.topology.net_bw_per_chip_bytes_per_s
    took = restore["t_end"] - restore["t_start"]
    assert took == pytest.approx(restore["detail"]["nbytes"] / restore["detail"]["bw_bytes_per_s"])
    view = r.plane.jobs.describe(job)
    assert view["state"] == "RUNNING" and chip not in view["allocation"]["chips"]


def test_firmware_rollout_moves_ranks_at_step_boundaries() -> None:
    r = rehearse(4)
    job = r.submit(dict(JOB))
    r.tl.run(r.tl.now + 300.0)
    fw = r.parts.health.start_firmware(CLUSTER, "2.22.0", unit="chip", chips=r.chips(job)[:2], actor="t")
    r.tl.run(r.tl.now + 600.0)
    view = r.parts.health.firmware_rollout(CLUSTER, fw["id"])
    # Two ranks moved (the second to the chip updated first, in the job's pod) and the one
    # that had to leave the pod back home at the end: three pauses.
    assert view["state"] == "succeeded" and len(view["interruptions_s"]) == 3
    recs = [x for x in r.recoveries() if x["job_id"] == job]
    assert [x["kind"] for x in recs] == ["firmware", "firmware", "rehome"]
    pods = {c // 64 for c in r.chips(job)}
    assert len(pods) == 1
    assert recs and all(x["steps"][0]["name"] == "step-boundary" for x in recs)
    for x in recs:  # the pause began when the step the flow waited for had finished
        waited = x["steps"][0]["detail"]["at_step"]
        paused = next(e for e in r.tl.log.filter("job-paused") if e["t"] >= x["t_start"])
        assert paused["step"] == waited + 1
    assert r.plane.jobs.describe(job)["state"] == "RUNNING"
