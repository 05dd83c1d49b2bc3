"""Telemetry of real worker processes: psutil (CPU, memory), step timings, NVML on GPUs.

NVML (``nvidia-ml-py``) is imported lazily and only used when it loads and finds
devices, so CPU-only hosts need neither the package nor a driver.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psutil


class Nvml:
    """GPU metrics per device index, or ``None`` from ``open()`` when there are no GPUs."""

    def __init__(self, pynvml: Any) -> None:
        self._nv = pynvml
        self.count = pynvml.nvmlDeviceGetCount()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]

    @staticmethod
    def open() -> Nvml | None:
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            nv = Nvml(pynvml)
        except Exception:  # no package, no driver, no devices: a CPU host
            return None
        return nv if nv.count else None

    def sample(self, gpu: int) -> dict[str, float]:
        nv, h = self._nv, self._handles[gpu]
        util = nv.nvmlDeviceGetUtilizationRates(h)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        return {
            "gpu_util_percent": float(util.gpu),
            "gpu_mem_bytes": float(mem.used),
            "gpu_mem_total_bytes": float(mem.total),
            "gpu_temp_c": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            "gpu_power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
        }


# own_step_s / samples_per_s: a rank's own time per step and its speed (fabric/local/speed.py);
# mem_capacity_bytes: the host's memory, what a CPU slot's worker can use at most.
METRICS = ("busy", "cpu_percent", "mem_bytes", "step_time_s", "tokens_per_s", "heartbeat_age_s", "own_step_s",
           "samples_per_s", "mem_capacity_bytes")
GPU_METRICS = ("gpu_util_percent", "gpu_mem_bytes", "gpu_mem_total_bytes", "gpu_temp_c", "gpu_power_w")


class ProcessSampler:
    """Keeps one psutil.Process per pid so cpu_percent measures since the last sample."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def sample(self, pid: int) -> tuple[float, float]:
        p = self._procs.get(pid)
        try:
            if p is None:
                p = self._procs[pid] = psutil.Process(pid)
                p.cpu_percent(None)
            return p.cpu_percent(None), float(p.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            self._procs.pop(pid, None)
            return 0.0, 0.0

    def forget_except(self, pids: set[int]) -> None:
        for pid in list(self._procs):
            if pid not in pids:
                del self._procs[pid]


def empty(n_chips: int, gpus: bool) -> dict[str, np.ndarray]:
    names = METRICS + (GPU_METRICS if gpus else ())
    out = {m: np.zeros(n_chips) for m in names}
    out["mem_capacity_bytes"][:] = float(psutil.virtual_memory().total)
    return out
