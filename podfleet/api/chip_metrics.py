"""Per-chip, per-link and per-job series of every cluster, whatever its fabric.

The same names on the twin, local worker slots, Ray clusters and Neuron hosts, taken from
whatever the fabric's ``chip_metrics`` reports (a series a device does not report is left
out for that chip, never sent as 0). Chip series carry ``cluster`` (the name, as on every
podfleet series), ``cluster_id``, ``chip``, ``chip_type``, ``host`` (the fabric's
``WorkerPlacement`` answer; this host for fabrics without one, such as the twin) and
``job_id`` (the job holding the chip, "" when free). Never ``job`` or ``instance``: those are
Prometheus' target labels, and with ``honor_labels: true`` (the shipped scrape config keeps
it false) a series' own ``job`` would replace the scrape job's, so ``{job="podfleet"}`` would miss it
(kube-state-metrics says ``job_name`` for the same reason)::

    podfleet_build_info{version,python}                         1
    podfleet_chip_info{...chip labels, coords, x, y, z}         1: where the chip sits in the torus (a
                                                                switched cluster: x = chip index)
    podfleet_chip_up                                            1 healthy/degraded/updating, 0 failed/isolated
    podfleet_chip_utilization_ratio                             NeuronCores, GPU, or the worker's CPU share
    podfleet_chip_memory_used_bytes / _memory_capacity_bytes    HBM, GPU memory, or worker RSS / host memory
    podfleet_chip_hbm_used_bytes, _temperature_celsius, _power_watts, _clock_hertz, _voltage_volts
    podfleet_chip_throttled                                     1 while thermally throttled
    podfleet_chip_hbm_ecc_corrected_total, _hbm_ecc_uncorrected_total, _sram_ecc_uncorrected_total,
    podfleet_chip_execution_errors_total
    podfleet_link_up / _utilization_ratio / _bandwidth_bytes_per_second{cluster,cluster_id,link}
    podfleet_link_transmit_bytes_total / _errors_total
    podfleet_job_step / _tokens_per_second / _recovering / _recoveries_total{cluster,cluster_id,job_id}

Read at scrape time from the fabric readouts the engine publishes for the scrape
(``control.readout``: the fabric's values, unrounded; a scrape never calls a fabric); only
live clusters and live jobs are exported, so the series of a deleted cluster or an ended
job disappear at the next scrape.
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

import podfleet
from podfleet.control.hardwareviews import pod_shape
from podfleet.control.lifecycle import TERMINAL, JobState
from podfleet.control.readout import EMPTY_READOUT, FabricReadout
from podfleet.errors import UnknownNameError
from podfleet.fabric.base import ChipState, LinkState
from podfleet.hardware.specs import get_chip
from podfleet.hardware.topology import FleetTopology, GridTopology, Topology

if TYPE_CHECKING:
    from podfleet.control.plane import ControlPlane
    from podfleet.control.runtime import ClusterRuntime

Readouts = list[tuple["ClusterRuntime", FabricReadout]]  # ControlPlane.metrics_readouts

CHIP_LABELS = ["cluster", "cluster_id", "chip", "chip_type", "host", "job_id"]
LINK_LABELS = ["cluster", "cluster_id", "link"]
JOB_LABELS = ["cluster", "cluster_id", "job_id"]
_HOST = socket.gethostname()
_UP = frozenset({ChipState.HEALTHY, ChipState.DEGRADED, ChipState.UPDATING})

# name, help, [(fabric key, scale)] in order of preference: the first key the fabric reports wins.
CHIP_GAUGES: tuple[tuple[str, str, tuple[tuple[str, float], ...]], ...] = (
    ("podfleet_chip_memory_used_bytes", "Device memory in use (HBM, GPU memory, or the worker's RSS)",
     (("hbm_used_bytes", 1.0), ("gpu_mem_bytes", 1.0), ("mem_bytes", 1.0))),
    ("podfleet_chip_memory_capacity_bytes", "Device memory capacity (HBM, GPU memory, or the worker host's)",
     (("hbm_total_bytes", 1.0), ("gpu_mem_total_bytes", 1.0), ("mem_capacity_bytes", 1.0))),
    ("podfleet_chip_hbm_used_bytes", "HBM in use", (("hbm_used_bytes", 1.0),)),
    ("podfleet_chip_temperature_celsius", "Chip temperature", (("temperature_c", 1.0), ("gpu_temp_c", 1.0))),
    ("podfleet_chip_power_watts", "Chip power draw", (("power_w", 1.0), ("gpu_power_w", 1.0))),
    ("podfleet_chip_clock_hertz", "Chip clock", (("clock_mhz", 1e6),)),
    ("podfleet_chip_voltage_volts", "Chip voltage", (("voltage_v", 1.0),)),
    ("podfleet_chip_throttled", "1 while the chip is thermally throttled", (("throttle", 1.0),)),
)
CHIP_COUNTERS = (
    ("podfleet_chip_hbm_ecc_corrected", "Corrected HBM ECC errors", "mem_ecc_corrected"),
    ("podfleet_chip_hbm_ecc_uncorrected", "Uncorrectable HBM ECC errors", "mem_ecc_uncorrected"),
    ("podfleet_chip_sram_ecc_uncorrected", "Uncorrectable SRAM ECC errors", "sram_ecc_uncorrected"),
    ("podfleet_chip_execution_errors", "Execution errors", "execution_errors"),
)
LINK_SERIES = (
    ("podfleet_link_utilization_ratio", "Link utilization (0-1)", "utilization", GaugeMetricFamily),
    ("podfleet_link_bandwidth_bytes_per_second", "Usable link bandwidth", "bandwidth_bytes_per_s",
     GaugeMetricFamily),
    ("podfleet_link_transmit_bytes", "Bytes sent over the link", "tx_bytes", CounterMetricFamily),
    ("podfleet_link_errors", "Link errors", "errors", CounterMetricFamily),
)
# Every series name this module exports (monitoring/ artefacts are checked against it).
EXPORTED = frozenset(
    ["podfleet_build_info", "podfleet_chip_info", "podfleet_chip_up", "podfleet_chip_utilization_ratio", "podfleet_link_up",
     "podfleet_job_step", "podfleet_job_tokens_per_second", "podfleet_job_recovering", "podfleet_job_recoveries"]
    + [n for n, _, _ in CHIP_GAUGES] + [n for n, _, _ in CHIP_COUNTERS] + [n for n, _, _, _ in LINK_SERIES]
)


def utilization(m: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """0-1 per chip: NeuronCores (mean over cores), else the GPU, else the worker's CPU."""
    if "neuroncore_utilization" in m:
        u = np.asarray(m["neuroncore_utilization"], np.float64)
        return (u.mean(axis=1) if u.ndim == 2 else u) / 100.0
    for key in ("gpu_util_percent", "cpu_percent"):
        if key in m:
            return np.clip(np.asarray(m[key], np.float64) / 100.0, 0.0, 1.0)
    return None


def _capacity_from_spec(chip_type: str, n: int) -> np.ndarray | None:
    try:
        return np.full(n, float(get_chip(chip_type).hbm_bytes))
    except UnknownNameError:  # a worker slot ("cpu", "cuda"): no datasheet figure
        return None


def coordinates(topology: Topology) -> list[tuple[str, str, str]]:
    """(x, y, z) label values per chip: the torus coordinate (axes beyond the third folded
    into z); a switched topology has one axis, the chip index."""
    out = []
    for c in range(topology.n_chips):
        xyz = [int(v) for v in topology.coords(c)] if isinstance(topology, GridTopology) else [c]
        if len(xyz) > 3:
            xyz = [*xyz[:2], int(np.ravel_multi_index(xyz[2:], topology.dims[2:]))]
        x, y, z = [*xyz, 0, 0][:3]
        out.append((str(x), str(y), str(z)))
    return out


ROLLUP_MIN_PODS = 16  # fleet clusters with more pods export per-pod rollups (unless per_chip)
POD_LABELS = ["cluster", "cluster_id", "pod", "block"]
POD_SERIES = (
    ("podfleet_fleet_pod_chips", "Chips in the pod"),
    ("podfleet_fleet_pod_chips_up", "Chips of the pod that are up (not failed or isolated)"),
    ("podfleet_fleet_pod_chips_busy", "Chips of the pod a job holds"),
    ("podfleet_fleet_pod_utilization_ratio", "Mean chip utilization of the pod (0-1)"),
    ("podfleet_fleet_pod_temperature_max_celsius", "Hottest chip of the pod"),
    ("podfleet_fleet_pod_power_watts", "Power draw of the pod's chips"),
)
EXPORTED_ROLLUPS = frozenset(n for n, _ in POD_SERIES) | {"podfleet_fleet_pod_health_max"}  # health/metrics.py


def pods_of(topology: Topology) -> int:
    """Pods a cluster counts for the rollup rule: a fleet's pods; a torus is one pod; a
    switched cluster (worker slots, a Ray or Neuron host) none: its series stay per chip."""
    if isinstance(topology, FleetTopology):
        return topology.count
    return 1 if isinstance(topology, GridTopology) else 0


def rolled_up(topology: Topology, per_chip: bool, server_pods: int = 0) -> bool:
    """Per-pod rollups rather than a series per chip and link: a fleet cluster of more
    than ``ROLLUP_MIN_PODS`` pods, or any pod-shaped cluster on a server whose clusters
    hold more than ``ROLLUP_MIN_PODS`` pods together (``server_pods``): 100 one-pod
    clusters are 6,400 chips, 30 MB and two seconds of the server's CPU a scrape."""
    if per_chip or not pods_of(topology):
        return False
    return max(pods_of(topology), server_pods) > ROLLUP_MIN_PODS


def rolled_up_ids(rts: list[ClusterRuntime], per_chip: bool) -> set[str]:
    """The ids of the clusters among ``rts`` (all of a server's) that ``rolled_up`` says."""
    server_pods = sum(pods_of(rt.topology) for rt in rts)
    return {rt.id for rt in rts if rolled_up(rt.topology, per_chip, server_pods)}


class FabricCollector(Collector):
    """``per_chip``: a series per chip and link for every cluster; otherwise a fleet of more
    than ``ROLLUP_MIN_PODS`` pods, and every torus or fleet cluster of a server holding more
    than ``ROLLUP_MIN_PODS`` pods in all, exports ``podfleet_fleet_pod_*`` rollups instead
    (65,536 chips x 20 series is a scrape of tens of MB; 1,024 pods x 6 is a few hundred kB)."""

    def __init__(self, plane: ControlPlane, *, per_chip: bool = False) -> None:
        self.plane = plane
        self.per_chip = per_chip
        self._coords: dict[str, list[tuple[str, str, str]]] = {}  # cluster -> chip coordinate labels

    def collect(self) -> Iterator[Metric]:
        return self.collect_from(self.plane.metrics_readouts())

    def collect_from(self, readouts: Readouts) -> Iterator[Metric]:
        """The series of ``readouts`` (one engine read, shared with ``PlaneCollector``)."""
        info = GaugeMetricFamily("podfleet_build_info", "podfleet build: version and Python",
                                 labels=["version", "python"])
        info.add_metric([podfleet.__version__, platform.python_version()], 1.0)
        yield info
        rts = [rt for rt, _ in readouts]
        for gone in set(self._coords) - {rt.id for rt in rts}:
            del self._coords[gone]
        ids = rolled_up_ids(rts, self.per_chip)
        read = [(rt, r) for rt, r in readouts if r is not EMPTY_READOUT]  # never read (engine stopped): left out
        yield from self._chips([(rt, r) for rt, r in read if rt.id not in ids])
        yield from self._links([(rt, r) for rt, r in read if rt.id not in ids])
        yield from self._pods([(rt, r) for rt, r in read if rt.id in ids])
        yield from self._jobs()

    def _pods(self, readouts: Readouts) -> Iterator[Metric]:
        fams = {name: GaugeMetricFamily(name, doc, labels=POD_LABELS) for name, doc in POD_SERIES}
        for rt, r in readouts:
            topo = rt.topology
            pods, per, _k = pod_shape(topo)  # a torus: one pod of all its chips, in block 0
            states = r.chip_states[:topo.n_chips]
            up = np.fromiter((ChipState(s) in _UP for s in states), dtype=bool, count=len(states))
            busy = np.zeros(topo.n_chips, dtype=bool)
            held = [c for c in rt.owners if c < topo.n_chips]
            busy[held] = True
            m = r.chip_metrics
            u = utilization(m)
            temp = np.asarray(m["temperature_c"], np.float64) if "temperature_c" in m else None
            power = np.asarray(m["power_w"], np.float64) if "power_w" in m else None
            rows = {
                "podfleet_fleet_pod_chips": np.full(pods, float(per)),
                "podfleet_fleet_pod_chips_up": up.reshape(pods, per).sum(axis=1).astype(float),
                "podfleet_fleet_pod_chips_busy": busy.reshape(pods, per).sum(axis=1).astype(float),
                "podfleet_fleet_pod_utilization_ratio": None if u is None else u.reshape(pods, per).mean(axis=1),
                "podfleet_fleet_pod_temperature_max_celsius": None if temp is None else temp.reshape(pods, per).max(axis=1),
                "podfleet_fleet_pod_power_watts": None if power is None else power.reshape(pods, per).sum(axis=1),
            }
            blocks = [topo.block_of(p) if isinstance(topo, FleetTopology) else 0 for p in range(pods)]
            labels = [[rt.rec.name, rt.id, str(p), str(b)] for p, b in enumerate(blocks)]
            for name, values in rows.items():
                _add(fams[name], labels, values)
        yield from fams.values()

    def _chips(self, readouts: Readouts) -> Iterator[Metric]:
        info = GaugeMetricFamily("podfleet_chip_info", "Where the chip sits: torus coordinates",
                                 labels=[*CHIP_LABELS, "coords", "x", "y", "z"])
        up = GaugeMetricFamily("podfleet_chip_up", "1 unless the chip failed or is isolated", labels=CHIP_LABELS)
        util = GaugeMetricFamily("podfleet_chip_utilization_ratio",
                                 "Chip utilization (0-1): NeuronCores, GPU, or the worker's CPU", labels=CHIP_LABELS)
        gauges = {name: GaugeMetricFamily(name, doc, labels=CHIP_LABELS) for name, doc, _ in CHIP_GAUGES}
        counters = {name: CounterMetricFamily(name, doc, labels=CHIP_LABELS) for name, doc, _ in CHIP_COUNTERS}
        for rt, r in readouts:
            n = rt.topology.n_chips
            hosts = r.hosts
            owners = rt.owners
            labels = [[rt.rec.name, rt.id, str(c), rt.topology.chip_type, hosts[c] if c < len(hosts) else _HOST,
                       owners.get(c, "")] for c in range(n)]
            coords = self._coords.get(rt.id)
            if coords is None:
                coords = self._coords[rt.id] = coordinates(rt.topology)
            for c, xyz in enumerate(coords):
                info.add_metric([*labels[c], ",".join(xyz), *xyz], 1.0)
            for c, s in enumerate(r.chip_states[:n]):
                up.add_metric(labels[c], 1.0 if ChipState(s) in _UP else 0.0)
            m = r.chip_metrics
            _add(util, labels, utilization(m))
            for name, _doc, keys in CHIP_GAUGES:
                key = next((k for k, _ in keys if k in m), None)
                values = None if key is None else np.asarray(m[key], np.float64) * dict(keys)[key]
                if values is None and name == "podfleet_chip_memory_capacity_bytes":
                    values = _capacity_from_spec(rt.topology.chip_type, n)
                _add(gauges[name], labels, values)
            for name, _doc, key in CHIP_COUNTERS:
                _add(counters[name], labels, np.asarray(m[key], np.float64) if key in m else None)
        yield info
        yield up
        yield util
        yield from gauges.values()
        yield from counters.values()

    def _links(self, readouts: Readouts) -> Iterator[Metric]:
        up = GaugeMetricFamily("podfleet_link_up", "1 unless the link is down", labels=LINK_LABELS)
        fams = {name: kind(name, doc, labels=LINK_LABELS) for name, doc, _, kind in LINK_SERIES}
        for rt, r in readouts:
            states = r.link_states
            labels = [[rt.rec.name, rt.id, str(j)] for j in range(len(states))]
            for j, s in enumerate(states):
                up.add_metric(labels[j], 0.0 if LinkState(s) is LinkState.DOWN else 1.0)
            lm = r.link_metrics
            for name, _doc, key, _kind in LINK_SERIES:
                if key in lm:
                    _add(fams[name], labels, np.asarray(lm[key], np.float64))
        yield up
        yield from fams.values()

    def _jobs(self) -> Iterator[Metric]:
        step = GaugeMetricFamily("podfleet_job_step", "Steps completed", labels=JOB_LABELS)
        tps = GaugeMetricFamily("podfleet_job_tokens_per_second", "Training throughput", labels=JOB_LABELS)
        recovering = GaugeMetricFamily("podfleet_job_recovering", "1 while the job is RECOVERING", labels=JOB_LABELS)
        recoveries = CounterMetricFamily("podfleet_job_recoveries", "Recoveries the job went through",
                                         labels=JOB_LABELS)
        names = {rt.id: rt.rec.name for rt in list(self.plane.clusters.values())}
        for jid, v in list(self.plane.jobs.views.items()):
            cid = v.get("cluster_id")
            if v.get("state") in TERMINAL or cid not in names:
                continue  # an ended job's (or a deleted cluster's) series go away
            labels = [names[cid], cid, jid]
            p = v.get("progress") or {}
            step.add_metric(labels, float(p.get("step") or 0))
            tps.add_metric(labels, float(p.get("tokens_per_s") or 0.0))
            recovering.add_metric(labels, 1.0 if v.get("state") == JobState.RECOVERING.value else 0.0)
            runtime = v.get("runtime") or {}
            journal = v.get("recovery") or {}
            n = len(runtime.get("recoveries") or ()) if runtime else int(bool(journal))
            recoveries.add_metric(labels, float(n))
        yield from (step, tps, recovering, recoveries)


def _add(fam: GaugeMetricFamily | CounterMetricFamily, labels: list[list[str]], values: np.ndarray | None) -> None:
    if values is None:
        return
    for lab, v in zip(labels, values.tolist(), strict=False):
        if v == v:  # NaN: the device does not report it for this chip
            fam.add_metric(lab, float(v))
