"""Neuron telemetry -> podfleet's chip and link metrics (the one mapping table).

The names are the twin's (``podfleet/fabric/sim/telemetry.py`` ``METRIC_NAMES`` and
``SimFabric.link_metrics``), which in turn follow neuron-monitor where one exists, so a
consumer reads the same arrays whichever fabric produced them. ``CHIP_METRICS`` /
``LINK_METRICS`` give each metric's unit and the neuron-monitor / neuron-ls field it
comes from; a twin metric that Neuron tools do not expose (temperature, power,
voltage, clock, per-chip link traffic) is present as NaN ("not measured"), except
``throttle``, which is False (no throttle reported) so boolean consumers stay correct.
Metrics only a real host has (achieved TFLOP/s, latencies, per-kind error counts) are
extra names after the twin's.

Shapes: ``neuroncore_utilization`` is [chips, physical cores]: on Trn2 at LNC=2
neuron-monitor reports 4 logical cores per chip, each made of 2 physical cores
("v3d": nc_v3.0, nc_v3.1); the physical values are used when present, else the
logical value is repeated over its physical cores, giving the twin's 8 cores per chip.

Counters: ECC counts are cumulative (the device's counters); ``execution_errors`` and
the ``execution_*`` counts here are per captured period, summed over every runtime that
uses a chip's cores (``NeuronTelemetry`` accumulates ``execution_errors`` into the
twin's cumulative count).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from podfleet.fabric.base import LinkState
from podfleet.fabric.neuron.ls import NeuronInventory
from podfleet.fabric.neuron.monitor import ERROR_KINDS, MonitorReport
from podfleet.hardware.topology import Topology


@dataclass(frozen=True)
class MetricDef:
    name: str
    unit: str
    source: str  # where it comes from on a real host ("" = not exposed)


_NC = "neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use[c]"
_HW = "system_data.neuron_hw_counters.neuron_devices[d]"
_ES = "neuron_runtime_data[].report.execution_stats"

CHIP_METRICS: tuple[MetricDef, ...] = (
    # --- the twin's metrics ------------------------------------------------------------
    MetricDef("neuroncore_utilization", "percent [chips, cores]", f"{_NC}.v3d.*.neuroncore_utilization, else {_NC}.neuroncore_utilization; idle cores 0"),
    MetricDef("hbm_used_bytes", "bytes", "sum of memory_used.neuron_runtime_used_bytes.usage_breakdown.neuroncore_memory_usage[c].* over the chip's cores and all runtimes"),
    MetricDef("hbm_bw_bytes_per_s", "bytes/s", ""),
    MetricDef("mem_ecc_corrected", "count (cumulative)", f"{_HW}.mem_ecc_corrected"),
    MetricDef("mem_ecc_uncorrected", "count (cumulative)", f"{_HW}.mem_ecc_uncorrected"),
    MetricDef("sram_ecc_corrected", "count (cumulative)", f"{_HW}.sram_ecc_corrected"),
    MetricDef("sram_ecc_uncorrected", "count (cumulative)", f"{_HW}.sram_ecc_uncorrected"),
    MetricDef("temperature_c", "degC", ""),
    MetricDef("power_w", "W", ""),
    MetricDef("voltage_v", "V", ""),
    MetricDef("clock_mhz", "MHz", ""),
    MetricDef("throttle", "bool", ""),
    MetricDef("link_tx_bytes", "bytes", ""),
    MetricDef("link_rx_bytes", "bytes", ""),
    MetricDef("link_errors", "count", ""),
    MetricDef("execution_errors", "count per period", f"sum of {_ES}.error_summary.* of runtimes on the chip"),
    MetricDef("firmware_version", "string", "neuron-ls neuron_processes[0].neuron_runtime_version (runtime, not firmware; 'unknown' if none)"),
    # --- only on real hosts ----------------------------------------------------------
    MetricDef("hbm_total_bytes", "bytes", "neuron-ls memory_size, else neuron_hardware_info.neuron_device_memory_size"),
    MetricDef("achieved_tflops", "TFLOP/s", f"sum of {_NC}.flops over the chip's cores / 1e12"),
    *(
        MetricDef(f"execution_errors_{k}", "count per period", f"{_ES}.error_summary.{k}")
        for k in ERROR_KINDS
    ),
    MetricDef("executions_completed", "count per period", f"{_ES}.execution_summary.completed"),
    MetricDef("executions_timed_out", "count per period", f"{_ES}.execution_summary.timed_out"),
    MetricDef("device_latency_p50_s", "s", f"{_ES}.latency_stats.device_latency.p50 (max over runtimes)"),
    MetricDef("device_latency_p99_s", "s", f"{_ES}.latency_stats.device_latency.p99 (max over runtimes)"),
)

LINK_METRICS: tuple[MetricDef, ...] = (
    MetricDef("src", "chip", "topology"),
    MetricDef("dst", "chip", "topology"),
    MetricDef("bandwidth_bytes_per_s", "bytes/s", "nominal figure of the matched topology if neuron-ls connected_to lists the link, else 0"),
    MetricDef("nominal_bandwidth_bytes_per_s", "bytes/s", "matched topology"),
    MetricDef("latency_s", "s", "matched topology"),
    MetricDef("utilization", "fraction", ""),
    MetricDef("tx_bytes", "bytes", ""),
    MetricDef("errors", "count", ""),
    MetricDef("state", "LinkState index (0 up, 1 degraded, 2 down)", "neuron-ls connected_to"),
)

_LINK_CODE = {s: i for i, s in enumerate(LinkState)}


def cores_per_chip(report: MonitorReport | None, inventory: NeuronInventory | None) -> tuple[int, int]:
    """(logical cores per chip, physical cores per logical core)."""
    logical, lnc = 0, 1
    if inventory is not None and inventory.devices:
        logical = max(len(d.core_ids) or (d.nc_count or 0) for d in inventory.devices)
        lnc = max(d.logical_core_config or 1 for d in inventory.devices)
    if report is not None:
        hw = report.hardware
        logical = logical or (hw.cores_per_device or 0)
        lnc = max(lnc, hw.logical_core_config or 1)
    return logical, lnc


def chip_metrics(
    report: MonitorReport | None,
    inventory: NeuronInventory | None = None,
    n_chips: int | None = None,
) -> dict[str, np.ndarray]:
    """Arrays over chips (device index = chip index) from one report and the inventory.

    ``report=None`` (nothing received yet) gives NaN except what neuron-ls alone knows.
    """
    hw = report.hardware if report is not None else None
    n = n_chips or (inventory.n_devices if inventory else None) or (hw.device_count if hw else None) or 0
    logical, lnc = cores_per_chip(report, inventory)
    nan = np.full(n, np.nan)
    out: dict[str, np.ndarray] = {m.name: nan.copy() for m in CHIP_METRICS}
    out["neuroncore_utilization"] = np.full((n, logical * lnc), np.nan)
    out["throttle"] = np.zeros(n, bool)
    firmware = np.full(n, "unknown", dtype="<U32")
    total = nan.copy()
    if inventory is not None:
        for d in inventory.devices:
            if d.index < n:
                if d.memory_bytes is not None:
                    total[d.index] = d.memory_bytes
                if d.processes and d.processes[0].runtime_version:
                    firmware[d.index] = d.processes[0].runtime_version
    if hw is not None and hw.device_memory_bytes is not None:
        total = np.where(np.isnan(total), hw.device_memory_bytes, total)
    out["hbm_total_bytes"] = total
    out["firmware_version"] = firmware
    if report is None:
        return out

    core_dev = (inventory or NeuronInventory(())).core_to_device(logical)
    if not core_dev and logical:
        core_dev = {c: c // logical for c in range(n * logical)}
    slot = _core_slots(core_dev)

    util = np.zeros((n, logical * lnc))
    flops = np.zeros(n)
    hbm = np.zeros(n)
    have_mem = False
    errors = {k: np.zeros(n) for k in ERROR_KINDS}
    completed = np.zeros(n)
    timed_out = np.zeros(n)
    p50 = nan.copy()
    p99 = nan.copy()
    for rt in report.runtimes:
        chips_used: set[int] = set()
        for c in rt.cores:
            dev = core_dev.get(c.core)
            if dev is None or dev >= n:
                continue  # a core outside the inventory: nothing to attribute it to
            chips_used.add(dev)
            if slot.get(c.core, logical) < logical:
                base = slot[c.core] * lnc
                phys = c.physical_pct if len(c.physical_pct) == lnc else (c.utilization_pct,) * lnc
                util[dev, base : base + lnc] = phys
            flops[dev] += c.flops or 0.0
        for core, used in rt.core_memory_bytes.items():
            dev = core_dev.get(core)
            if dev is None or dev >= n:
                continue
            chips_used.add(dev)
            hbm[dev] += used
            have_mem = True
        idx = np.fromiter(sorted(chips_used), dtype=np.int64)
        if idx.size == 0:
            continue
        for k in ERROR_KINDS:
            errors[k][idx] += rt.errors.get(k, 0.0)
        completed[idx] += rt.executions.get("completed", 0.0)
        timed_out[idx] += rt.executions.get("timed_out", 0.0)
        for key, arr_ in (("p50", p50), ("p99", p99)):
            v = rt.device_latency_s.get(key)
            if v is not None:
                arr_[idx] = np.fmax(arr_[idx], v)
    out["neuroncore_utilization"] = util
    out["achieved_tflops"] = flops / 1e12
    if have_mem:
        out["hbm_used_bytes"] = hbm
    for k in ERROR_KINDS:
        out[f"execution_errors_{k}"] = errors[k]
    out["execution_errors"] = sum(errors.values(), np.zeros(n))
    out["executions_completed"] = completed
    out["executions_timed_out"] = timed_out
    out["device_latency_p50_s"] = p50
    out["device_latency_p99_s"] = p99
    if report.ecc is not None:
        names = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
        for name in names:
            out[name] = np.zeros(n)
        for e in report.ecc:
            if e.device < n:
                for name, v in zip(names, (e.mem_corrected, e.mem_uncorrected, e.sram_corrected, e.sram_uncorrected), strict=True):
                    out[name][e.device] = v
    return out


def link_metrics(topology: Topology, missing: frozenset[tuple[int, int]] = frozenset()) -> dict[str, np.ndarray]:
    """Arrays over ``topology.links``: what neuron-ls's wiring says about each link."""
    links = topology.links
    up = np.array([(min(lk.src, lk.dst), max(lk.src, lk.dst)) not in missing for lk in links], dtype=bool)
    nominal = np.array([lk.bw_bytes_per_s for lk in links], dtype=float)
    nan = np.full(len(links), np.nan)
    return {
        "src": np.array([lk.src for lk in links], dtype=np.int64),
        "dst": np.array([lk.dst for lk in links], dtype=np.int64),
        "bandwidth_bytes_per_s": np.where(up, nominal, 0.0),
        "nominal_bandwidth_bytes_per_s": nominal,
        "latency_s": np.array([lk.latency_s for lk in links], dtype=float),
        "utilization": nan,
        "tx_bytes": nan.copy(),
        "errors": nan.copy(),
        "state": np.where(up, _LINK_CODE[LinkState.UP], _LINK_CODE[LinkState.DOWN]).astype(np.int8),
    }


def host_metrics(report: MonitorReport) -> dict[str, float]:
    """Host-level figures (not per chip): vCPU usage percent and host memory."""
    out = {f"vcpu_{k}_pct": v for k, v in report.vcpu_avg_pct.items()}
    if report.host_memory_total_bytes is not None:
        out["host_memory_total_bytes"] = report.host_memory_total_bytes
    if report.host_memory_used_bytes is not None:
        out["host_memory_used_bytes"] = report.host_memory_used_bytes
    return out


def _core_slots(core_dev: Mapping[int, int]) -> dict[int, int]:
    """Core index -> its position within its chip (0..cores-1), in index order."""
    slots: dict[int, int] = {}
    counts: dict[int, int] = {}
    for core in sorted(core_dev):
        dev = core_dev[core]
        slots[core] = counts.get(dev, 0)
        counts[dev] = slots[core] + 1
    return slots
