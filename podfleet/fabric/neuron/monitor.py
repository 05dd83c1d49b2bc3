"""One ``neuron-monitor`` report, parsed into frozen values.

Schema: neuron-docs ``tools/neuron-sys-tools/neuron-monitor-user-guide.rst``
(aws-neuron/aws-neuron-sdk), sections "The JSON output format" and "Metric Groups".
Every metric group is optional (it appears only when configured) and carries its own
``period`` and ``error``; ``instance_info`` and ``neuron_hardware_info`` are always
present on a real host but are optional here so partial documents still parse.

Units stay as neuron-monitor gives them (utilization in percent, latencies in
seconds, memory in bytes), which are also the twin's units.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from podfleet.fabric.neuron._fields import (
    arr,
    device_entry,
    document,
    index_key,
    integer,
    malformed,
    num,
    obj,
    text,
)

SRC = "neuron-monitor"

ERROR_KINDS = ("generic", "numerical", "transient", "model", "runtime", "hardware")
EXEC_OUTCOMES = (
    "completed",
    "completed_with_err",
    "completed_with_num_err",
    "timed_out",
    "incorrect_input",
    "failed_to_queue",
)
# Top-level keys this parser understands; anything else is kept in ``unknown_keys`` so
# a newer neuron-monitor is visible in logs rather than silently half-read.
KNOWN_TOP = frozenset(
    {"neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info", "neuron_k8s_info"}
)


@dataclass(frozen=True)
class CoreCounters:
    core: int  # NeuronCore index as neuron-monitor numbers it (logical cores on Trn2)
    utilization_pct: float  # percent over the period, as neuron-monitor reports it
    flops: float | None  # floating point operations per second over the period
    # The physical cores behind a logical core (Trn2 "v3d": nc_v3.0, nc_v3.1), percent.
    physical_pct: tuple[float, ...] = ()


@dataclass(frozen=True)
class RuntimeReport:
    """One Neuron application (``neuron_runtime_data[i]``)."""

    pid: int | None
    tag: str
    error: str
    cores: tuple[CoreCounters, ...] = ()
    core_memory_bytes: Mapping[int, float] = field(default_factory=dict)  # device bytes per core
    device_memory_bytes: float | None = None
    host_memory_bytes: float | None = None
    errors: Mapping[str, float] = field(default_factory=dict)  # error_summary
    executions: Mapping[str, float] = field(default_factory=dict)  # execution_summary
    device_latency_s: Mapping[str, float] = field(default_factory=dict)  # "p50" -> seconds
    total_latency_s: Mapping[str, float] = field(default_factory=dict)
    vcpu_user_pct: float | None = None
    vcpu_system_pct: float | None = None
    group_errors: Mapping[str, str] = field(default_factory=dict)  # metric group -> its "error"

    def core_indices(self) -> tuple[int, ...]:
        return tuple(sorted({c.core for c in self.cores} | set(self.core_memory_bytes)))


@dataclass(frozen=True)
class DeviceEcc:
    device: int
    mem_corrected: float
    mem_uncorrected: float
    sram_corrected: float
    sram_uncorrected: float


@dataclass(frozen=True)
class HardwareInfo:
    device_type: str = ""  # "trainium2"
    device_version: str = ""
    core_version: str = ""
    device_count: int | None = None
    device_memory_bytes: float | None = None
    cores_per_device: int | None = None
    logical_core_config: int | None = None
    error: str = ""


@dataclass(frozen=True)
class MonitorReport:
    runtimes: tuple[RuntimeReport, ...] = ()
    ecc: tuple[DeviceEcc, ...] | None = None  # None: neuron_hw_counters not in this report
    hardware: HardwareInfo = field(default_factory=HardwareInfo)
    instance: Mapping[str, str] = field(default_factory=dict)
    vcpu_avg_pct: Mapping[str, float] = field(default_factory=dict)  # user, system, idle, ...
    host_memory_total_bytes: float | None = None
    host_memory_used_bytes: float | None = None
    group_errors: Mapping[str, str] = field(default_factory=dict)  # system group -> "error"
    unknown_keys: tuple[str, ...] = ()


def parse_monitor_report(raw: str | bytes | Mapping[str, Any]) -> MonitorReport:
    """Parse one report (JSON text or an already-decoded object).

    Raises ``InvalidInputError`` naming the JSON path for a malformed document.
    """
    doc: Mapping[str, Any] = document(SRC, raw, Mapping, "a JSON object")
    runtimes = tuple(
        _runtime(r, f"neuron_runtime_data[{i}]")
        for i, r in enumerate(arr(SRC, doc, "neuron_runtime_data", ""))
    )
    system = obj(SRC, doc, "system_data", "") or {}
    group_errors: dict[str, str] = {}
    ecc = None
    if (found := _group(system, "neuron_hw_counters", "system_data", group_errors)) is not None:
        ecc = _ecc(*found)
    vcpu_avg: dict[str, float] = {}
    if (found := _group(system, "vcpu_usage", "system_data", group_errors)) is not None:
        vcpu, gpath = found
        avg = obj(SRC, vcpu, "average_usage", gpath) or {}
        vcpu_avg = _numbers(avg, list(avg), f"{gpath}.average_usage")
    mem_total = mem_used = None
    if (found := _group(system, "memory_info", "system_data", group_errors)) is not None:
        mem, gpath = found
        mem_total = num(SRC, mem, "memory_total_bytes", gpath)
        mem_used = num(SRC, mem, "memory_used_bytes", gpath)
    inst = obj(SRC, doc, "instance_info", "") or {}
    instance = {k: text(SRC, inst, k, "instance_info") for k in inst if inst[k] is not None}
    return MonitorReport(
        runtimes=runtimes,
        ecc=ecc,
        hardware=_hardware(obj(SRC, doc, "neuron_hardware_info", "") or {}),
        instance=instance,
        vcpu_avg_pct=vcpu_avg,
        host_memory_total_bytes=mem_total,
        host_memory_used_bytes=mem_used,
        group_errors=group_errors,
        unknown_keys=tuple(sorted(k for k in doc if k not in KNOWN_TOP)),
    )


def _group(parent: Mapping[str, Any], name: str, path: str,
           errors: dict[str, str]) -> tuple[Mapping[str, Any], str] | None:
    """A metric group of ``parent`` and its path, its ``error`` (a group neuron-monitor
    could not read) noted in ``errors``; None when the group is not configured."""
    group = obj(SRC, parent, name, path)
    if group is None:
        return None
    gpath = f"{path}.{name}" if path else name
    if err := text(SRC, group, "error", gpath):
        errors[name] = err
    return group, gpath


def _numbers(parent: Mapping[str, Any], keys: Iterable[str], path: str) -> dict[str, float]:
    """The fields of ``keys`` that ``parent`` has, as numbers."""
    out = {}
    for k in keys:
        v = num(SRC, parent, k, path)
        if v is not None:
            out[k] = v
    return out


def _runtime(r: object, path: str) -> RuntimeReport:
    if not isinstance(r, Mapping):
        raise malformed(SRC, path, "an object", r)
    report = obj(SRC, r, "report", path) or {}
    rpath = f"{path}.report"
    group_errors: dict[str, str] = {}
    cores: list[CoreCounters] = []
    if (found := _group(report, "neuroncore_counters", rpath, group_errors)) is not None:
        ncc, gpath = found
        in_use = obj(SRC, ncc, "neuroncores_in_use", gpath) or {}
        for key, data in in_use.items():
            cpath = f"{gpath}.neuroncores_in_use.{key}"
            core = index_key(SRC, key, f"{gpath}.neuroncores_in_use")
            if not isinstance(data, Mapping):
                raise malformed(SRC, cpath, "an object", data)
            util_pct = num(SRC, data, "neuroncore_utilization", cpath, 0.0)
            assert util_pct is not None
            # "flops" in the user guide; some releases name it "effective_flops".
            flops = num(SRC, data, "flops", cpath)
            if flops is None:
                flops = num(SRC, data, "effective_flops", cpath)
            cores.append(CoreCounters(core, _pct(util_pct), flops, _physical(data, cpath)))
    core_mem: dict[int, float] = {}
    dev_mem = host_mem = None
    if (found := _group(report, "memory_used", rpath, group_errors)) is not None:
        mu, gpath = found
        used = obj(SRC, mu, "neuron_runtime_used_bytes", gpath) or {}
        upath = f"{gpath}.neuron_runtime_used_bytes"
        dev_mem = num(SRC, used, "neuron_device", upath)
        host_mem = num(SRC, used, "host", upath)
        breakdown = obj(SRC, used, "usage_breakdown", upath) or {}
        per_core = obj(SRC, breakdown, "neuroncore_memory_usage", f"{upath}.usage_breakdown") or {}
        for key, cats in per_core.items():
            ppath = f"{upath}.usage_breakdown.neuroncore_memory_usage.{key}"
            core = index_key(SRC, key, f"{upath}.usage_breakdown.neuroncore_memory_usage")
            if not isinstance(cats, Mapping):
                raise malformed(SRC, ppath, "an object", cats)
            core_mem[core] = sum(num(SRC, cats, c, ppath, 0.0) or 0.0 for c in cats)
    errors: dict[str, float] = {}
    execs: dict[str, float] = {}
    dev_lat: dict[str, float] = {}
    tot_lat: dict[str, float] = {}
    if (found := _group(report, "execution_stats", rpath, group_errors)) is not None:
        es, gpath = found
        summary = obj(SRC, es, "error_summary", gpath) or {}
        for kind in ERROR_KINDS:
            # The guide's prose says "numeric", its JSON "numerical": accept both.
            alias = "numeric" if kind == "numerical" else kind
            v = num(SRC, summary, kind, f"{gpath}.error_summary")
            if v is None:
                v = num(SRC, summary, alias, f"{gpath}.error_summary")
            if v is not None:
                errors[kind] = v
        execs = _numbers(obj(SRC, es, "execution_summary", gpath) or {}, EXEC_OUTCOMES, f"{gpath}.execution_summary")
        lat = obj(SRC, es, "latency_stats", gpath) or {}
        for name, out in (("device_latency", dev_lat), ("total_latency", tot_lat)):
            pct = obj(SRC, lat, name, f"{gpath}.latency_stats") or {}  # null when nothing ran
            out.update(_numbers(pct, list(pct), f"{gpath}.latency_stats.{name}"))
    user = system = None
    if (found := _group(report, "neuron_runtime_vcpu_usage", rpath, group_errors)) is not None:
        vu, gpath = found
        usage = obj(SRC, vu, "vcpu_usage", gpath) or {}
        user = num(SRC, usage, "user", f"{gpath}.vcpu_usage")
        system = num(SRC, usage, "system", f"{gpath}.vcpu_usage")
    return RuntimeReport(
        pid=integer(SRC, r, "pid", path),
        tag=text(SRC, r, "neuron_runtime_tag", path),
        error=text(SRC, r, "error", path),
        cores=tuple(sorted(cores, key=lambda c: c.core)),
        core_memory_bytes=core_mem,
        device_memory_bytes=dev_mem,
        host_memory_bytes=host_mem,
        errors=errors,
        executions=execs,
        device_latency_s=dev_lat,
        total_latency_s=tot_lat,
        vcpu_user_pct=user,
        vcpu_system_pct=system,
        group_errors=group_errors,
    )


def _pct(v: float) -> float:
    return min(max(v, 0.0), 100.0)


def _physical(data: Mapping[str, Any], path: str) -> tuple[float, ...]:
    """Per-physical-core utilization under "v3d" (or a later "vNd"), in name order."""
    for key in data:
        if isinstance(key, str) and len(key) >= 3 and key[0] == "v" and key[-1] == "d" and key[1:-1].isdigit():
            phys = obj(SRC, data, key, path) or {}
            out = []
            for name in sorted(phys):
                entry = phys[name]
                if not isinstance(entry, Mapping):
                    raise malformed(SRC, f"{path}.{key}.{name}", "an object", entry)
                out.append(_pct(num(SRC, entry, "neuroncore_utilization", f"{path}.{key}.{name}", 0.0) or 0.0))
            return tuple(out)
    return ()


def _ecc(hw: Mapping[str, Any], gpath: str) -> tuple[DeviceEcc, ...]:
    out = []
    for i, d in enumerate(arr(SRC, hw, "neuron_devices", gpath)):
        dpath = f"{gpath}.neuron_devices[{i}]"
        d, dev = device_entry(SRC, d, "neuron_device_index", dpath)
        out.append(
            DeviceEcc(
                dev,
                num(SRC, d, "mem_ecc_corrected", dpath, 0.0) or 0.0,
                num(SRC, d, "mem_ecc_uncorrected", dpath, 0.0) or 0.0,
                num(SRC, d, "sram_ecc_corrected", dpath, 0.0) or 0.0,
                num(SRC, d, "sram_ecc_uncorrected", dpath, 0.0) or 0.0,
            )
        )
    return tuple(sorted(out, key=lambda e: e.device))


def _hardware(h: Mapping[str, Any]) -> HardwareInfo:
    p = "neuron_hardware_info"
    return HardwareInfo(
        device_type=text(SRC, h, "neuron_device_type", p),
        device_version=text(SRC, h, "neuron_device_version", p),
        core_version=text(SRC, h, "neuroncore_version", p),
        device_count=integer(SRC, h, "neuron_device_count", p),
        device_memory_bytes=num(SRC, h, "neuron_device_memory_size", p),
        cores_per_device=integer(SRC, h, "neuroncore_per_device_count", p),
        logical_core_config=integer(SRC, h, "logical_neuroncore_config", p),
        error=text(SRC, h, "error", p),
    )
