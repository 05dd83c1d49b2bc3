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


# --- what a worker fabric declares as its telemetry (``TelemetrySource``) -------------------

# The health scan's and the history's chip metrics (the twin's names). A worker slot
# measures some of them: utilization (its worker's CPU, or its GPU's), the memory its
# worker holds, and on GPUs temperature and power; the rest (clock, throttling, ECC and
# execution-error counters, link errors) no worker slot exposes, so they are NaN ("not
# measured", as fabric/neuron does for what neuron-monitor lacks) and not declared.
SCAN_METRICS = ("neuroncore_utilization", "hbm_used_bytes", "temperature_c", "power_w", "clock_mhz", "throttle",
                "mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_uncorrected", "execution_errors",
                "link_errors", "hbm_bw_bytes_per_s")
PROCESS_MEASURED = frozenset({"busy", "cpu_percent", "mem_bytes", "step_time_s", "tokens_per_s", "heartbeat_age_s",
                              "mem_capacity_bytes", "neuroncore_utilization", "hbm_used_bytes"})
# A data-parallel gang's per-rank speed (fabric/local/speed.py): what the balancer reads.
SPEED_MEASURED = frozenset({"own_step_s", "samples_per_s"})
GPU_MEASURED = frozenset({*GPU_METRICS, "temperature_c", "power_w"})


def measured(*, gpus: bool, speed: bool) -> frozenset[str]:
    """The ``chip_metrics`` keys a worker fabric really measures (``telemetry_metrics``)."""
    return PROCESS_MEASURED | (SPEED_MEASURED if speed else frozenset()) | (GPU_MEASURED if gpus else frozenset())


def with_scan_metrics(m: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``m`` (the fabric's own metrics over slots) plus the scan's names: utilization in
    percent (GPU utilization where a GPU was sampled, else the worker's CPU share capped
    at one core's 100%), memory held, GPU temperature and power; NaN for the rest."""
    n = len(m["busy"])
    nan = np.full(n, np.nan)
    out = dict(m)
    gpu = m.get("gpu_util_percent")
    util = np.minimum(np.asarray(m["cpu_percent"], float), 100.0)
    out["neuroncore_utilization"] = np.asarray(gpu, float) if gpu is not None else util
    out["hbm_used_bytes"] = np.asarray(m.get("gpu_mem_bytes", m["mem_bytes"]), float)
    out["temperature_c"] = np.asarray(m["gpu_temp_c"], float) if "gpu_temp_c" in m else nan.copy()
    out["power_w"] = np.asarray(m["gpu_power_w"], float) if "gpu_power_w" in m else nan.copy()
    for k in SCAN_METRICS:
        if k not in out:
            out[k] = nan.copy()
    return out


def link_view(links: int) -> dict[str, np.ndarray]:
    """Link metrics of a host's worker slots: loopback / shared memory, nothing a worker
    fabric can measure per link (NaN), always up."""
    nan = np.full(links, np.nan)
    return {"up": np.ones(links), "state": np.zeros(links, np.int64), "utilization": nan,
            "bandwidth_bytes_per_s": nan.copy(), "errors": nan.copy()}
