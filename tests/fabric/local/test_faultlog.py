"""The local fabric's fault log classifies worker exits from what was observed: a hang, an
outside signal, an OOM kill (the cgroup's oom_kill counter rose), a crash; its own stops
and the kill of a worker already logged as hung are not faults."""

from __future__ import annotations

import signal
from pathlib import Path

from podfleet.fabric.base import FabricEvent
from podfleet.fabric.local.faultlog import WORKER_FAULT, FaultLog, _cgroup_files


def exited(code: int, killed_by: str | None = None, cause: str = "infra") -> FabricEvent:
    return FabricEvent("worker-exited", 1.0, chip=2, job_id="job-1",
                       detail={"rank": 1, "attempt": 1, "exit_code": code, "cause": cause, "killed_by": killed_by})


def test_outside_kill_hang_oom_and_crash_are_told_apart() -> None:
    count = [0]
    log = FaultLog(oom_counter=lambda: count[0])
    ev = log.observe(exited(-signal.SIGKILL), rss_bytes=1e9)
    assert ev is not None and ev.kind == WORKER_FAULT and ev.chip == 2
    assert ev.detail["observed"] == "signal" and ev.detail["signal"] == "SIGKILL" and ev.detail["rss_bytes"] == 1e9
    count[0] += 1  # the kernel's OOM killer struck with this death
    oom = log.observe(exited(-signal.SIGKILL))
    assert oom is not None and oom.detail["observed"] == "oom-kill"
    hang = log.observe(FabricEvent("hang", 2.0, chip=3, job_id="job-1",
                                   detail={"rank": 0, "heartbeat_age_s": 3.2, "attempt": 1}))
    assert hang is not None and hang.detail["observed"] == "hang" and hang.detail["heartbeat_age_s"] == 3.2
    crash = log.observe(exited(1, cause="user-code"))
    assert crash is not None and crash.detail == {**crash.detail, "observed": "exit", "exit_code": 1}
    assert [e.detail["observed"] for e in log.all()] == ["signal", "oom-kill", "hang", "exit"]


def test_its_own_kills_and_clean_exits_are_not_faults() -> None:
    log = FaultLog(oom_counter=lambda: None)
    for ev in (exited(-signal.SIGKILL, "hang"), exited(-signal.SIGTERM, "stop"), exited(-signal.SIGKILL, "recovery"),
               exited(0, cause="ok"), exited(75, cause="peer-lost"), FabricEvent("progress", 1.0, chip=0)):
        assert log.observe(ev) is None
    assert log.all() == []


def test_the_oom_counter_is_read_from_v1_and_v2_cgroup_files(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/a/b\n0::/c\n")
    files = _cgroup_files(str(proc), str(tmp_path / "fs"))
    assert tmp_path / "fs" / "memory" / "a" / "b" / "memory.oom_control" in files
    assert tmp_path / "fs" / "c" / "memory.events" in files
