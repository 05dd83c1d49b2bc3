"""The monitor thread: hang detection from heartbeats and psutil / NVML sampling.

It only reads; a detected hang is handed to the engine thread (``deliver(on_hang)``),
which kills the worker so the exit path classifies it as an infrastructure failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from podfleet.fabric.local import telemetry
from podfleet.fabric.local.process import WorkerProcess
from podfleet.fabric.local.state import LocalState

Deliver = Callable[..., None]  # deliver(fn, *args): run fn(*args) on the engine thread
Emit = Callable[..., None]  # emit(kind, chip=, job_id=, **detail)


class Monitor:
    def __init__(self, state: LocalState, *, sampler: telemetry.ProcessSampler, nvml: telemetry.Nvml | None, n_gpus: int,
                 hang_timeout_s: float, startup_timeout_s: float, sample_interval_s: float,
                 deliver: Deliver, emit: Emit) -> None:
        self.state, self.sampler, self.nvml, self.n_gpus = state, sampler, nvml, n_gpus
        self.hang_timeout_s, self.startup_timeout_s = hang_timeout_s, startup_timeout_s
        self.sample_interval_s = sample_interval_s
        self.deliver, self.emit = deliver, emit

    def watch(self) -> None:
        next_sample = 0.0
        while not self.state.closed.wait(0.1):
            live = self.state.live_workers()
            for wp in live:
                age = wp.heartbeat_age_s()
                limit = self.hang_timeout_s if wp.armed else self.startup_timeout_s
                if age > limit and wp.killed_by is None and not wp.hang_reported:
                    wp.hang_reported = True
                    self.deliver(self.on_hang, wp, age)
            if time.monotonic() >= next_sample:
                next_sample = time.monotonic() + self.sample_interval_s
                self.sample(live)

    def on_hang(self, wp: WorkerProcess, age_s: float) -> None:
        if wp.alive:
            self.emit("hang", chip=wp.chip, job_id=wp.cfg.job_id if wp.cfg else None, rank=wp.rank,
                      heartbeat_age_s=round(age_s, 3), armed=wp.armed, attempt=wp.attempt)
            wp.kill("hang")

    def sample(self, live: list[WorkerProcess]) -> None:
        st = self.state
        rows = {wp.chip: (*self.sampler.sample(wp.pid), wp.heartbeat_age_s()) for wp in live}
        self.sampler.forget_except({wp.pid for wp in live})
        gpu = {c: self.nvml.sample(c % self.n_gpus) for c in range(st.n_slots)} if self.nvml else {}
        with st.lock:
            m = st.metrics
            for c in range(st.n_slots):
                cpu, mem, age = rows.get(c, (0.0, 0.0, 0.0))
                m["busy"][c] = float(c in rows)
                m["cpu_percent"][c], m["mem_bytes"][c], m["heartbeat_age_s"][c] = cpu, mem, age
                if c not in rows:
                    m["step_time_s"][c] = m["tokens_per_s"][c] = 0.0
                    m["own_step_s"][c] = m["samples_per_s"][c] = 0.0
                for k, v in gpu.get(c, {}).items():
                    m[k][c] = v
