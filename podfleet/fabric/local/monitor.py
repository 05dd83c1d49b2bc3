"""The monitor thread: hang detection from heartbeats and psutil / NVML sampling.

It only reads; a detected hang is handed to the engine thread (``on_hang``), which
kills the worker so the exit path classifies it as an infrastructure failure.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from podfleet.fabric.local.jobs import TERMINAL
from podfleet.fabric.local.process import WorkerProcess

if TYPE_CHECKING:
    from podfleet.fabric.local.fabric import LocalFabric


def watch(fab: LocalFabric) -> None:
    next_sample = 0.0
    while not fab._closed.wait(0.1):
        with fab._lock:
            live = [wp for j in fab._jobs.values() if j.state not in TERMINAL for wp in j.workers.values()
                    if wp.alive]
        for wp in live:
            age = wp.heartbeat_age_s()
            limit = fab.hang_timeout_s if wp.armed else fab.startup_timeout_s
            if age > limit and wp.killed_by is None and not getattr(wp, "hang_reported", False):
                wp.hang_reported = True
                fab._deliver(on_hang, fab, wp, age)
        if time.monotonic() >= next_sample:
            next_sample = time.monotonic() + fab.sample_interval_s
            sample(fab, live)


def on_hang(fab: LocalFabric, wp: WorkerProcess, age_s: float) -> None:
    if wp.alive:
        fab._emit("hang", chip=wp.chip, job_id=wp.cfg.job_id, rank=wp.rank, heartbeat_age_s=round(age_s, 3),
                   armed=wp.armed)
        wp.kill("hang")


def sample(fab: LocalFabric, live: list[WorkerProcess]) -> None:
    rows = {wp.chip: (*fab._sampler.sample(wp.pid), wp.heartbeat_age_s()) for wp in live}
    fab._sampler.forget_except({wp.pid for wp in live})
    gpu = {c: fab._nvml.sample(c % fab.n_gpus) for c in range(fab.n_slots)} if fab._nvml else {}
    with fab._lock:
        m = fab._metrics
        for c in range(fab.n_slots):
            cpu, mem, age = rows.get(c, (0.0, 0.0, 0.0))
            m["busy"][c] = float(c in rows)
            m["cpu_percent"][c], m["mem_bytes"][c], m["heartbeat_age_s"][c] = cpu, mem, age
            if c not in rows:
                m["step_time_s"][c] = m["tokens_per_s"][c] = 0.0
            for k, v in gpu.get(c, {}).items():
                m[k][c] = v
