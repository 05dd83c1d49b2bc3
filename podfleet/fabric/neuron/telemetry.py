"""A real Trainium host's telemetry as podfleet sees a fabric's: metrics, link states, faults.

``NeuronTelemetry`` holds the inventory (neuron-ls), the topology its wiring describes,
and the latest neuron-monitor report; ``update`` turns each report into chip metrics
and fault events. It is the telemetry half of a fabric: the Ray fabric runs the work on
``neuron_cores`` and can take its metrics from here.

Fault rules (neuron-docs ``neuron-runtime/nrt-troubleshoot.rst``, summarised in
reference/trn2.md): an uncorrectable SRAM error means replace the chip; an uncorrectable
HBM error means reload the driver or reboot, and replace if it repeats; neither
neuron-monitor nor the runtime says which HBM case it was, so both are reported as
``chip-failed`` with the documented action, and the control plane decides.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from podfleet.fabric.base import FabricEvent, LinkState
from podfleet.fabric.neuron.ls import NeuronInventory, Wiring, build_topology
from podfleet.fabric.neuron.metrics import chip_metrics, host_metrics, link_metrics
from podfleet.fabric.neuron.monitor import MonitorReport
from podfleet.fabric.neuron.reader import NeuronMonitorReader
from podfleet.hardware.topology import Topology

# Corrected HBM ECC events in one report above this count are a burst worth a warning
# (a parameter: Neuron publishes no threshold).
CORRECTED_BURST = 100

_UNCORRECTED = (
    ("sram_ecc_uncorrected", "sram-uncorrectable", "replace"),
    ("mem_ecc_uncorrected", "hbm-uncorrectable", "reload driver or reboot; replace if it repeats"),
)


def link_down_events(topology: Topology, missing: frozenset[tuple[int, int]], t: float = 0.0) -> list[FabricEvent]:
    """A ``link-down`` for each link of ``topology`` whose (low, high) chip pair is ``missing``."""
    return [FabricEvent("link-down", t, link=lk.index, detail={"src": lk.src, "dst": lk.dst, "source": "neuron-ls"})
            for lk in topology.links if (min(lk.src, lk.dst), max(lk.src, lk.dst)) in missing]


class NeuronTelemetry:
    def __init__(self, inventory: NeuronInventory, *, chip_type: str = "trn2") -> None:
        self.inventory = inventory
        self.wiring: Wiring = build_topology(inventory, chip_type)
        self.topology = self.wiring.topology
        self.report: MonitorReport | None = None
        self._metrics = chip_metrics(None, inventory, self.topology.n_chips)
        # The twin's execution_errors is cumulative; neuron-monitor's error_summary is
        # per period, so sum the periods here.
        self._exec_errors = np.zeros(self.topology.n_chips)
        self._prev: dict[str, np.ndarray] = {}
        self._subscribers: list[Callable[[FabricEvent], None]] = []

    @property
    def n_chips(self) -> int:
        return self.topology.n_chips

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> None:
        self._subscribers.append(callback)

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        return self._metrics

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        return link_metrics(self.topology, self.wiring.missing)

    def link_states(self) -> list[LinkState]:
        codes = link_metrics(self.topology, self.wiring.missing)["state"]
        states = tuple(LinkState)
        return [states[int(c)] for c in codes]

    def host_metrics(self) -> dict[str, float]:
        return host_metrics(self.report) if self.report is not None else {}

    def initial_events(self, t: float = 0.0) -> list[FabricEvent]:
        """Links the topology has but neuron-ls does not report, as ``link-down``."""
        return link_down_events(self.topology, self.wiring.missing, t)

    def update(self, report: MonitorReport, t: float = 0.0) -> list[FabricEvent]:
        """Apply one report; returns (and publishes) the fault events it implies."""
        self.report = report
        m = chip_metrics(report, self.inventory, self.n_chips)
        self._exec_errors += np.nan_to_num(m["execution_errors"])
        m["execution_errors"] = self._exec_errors.copy()
        self._metrics = m
        events: list[FabricEvent] = []
        for name, fault, action in _UNCORRECTED:
            now = m[name]
            before = self._prev.get(name)
            # Counters are cumulative: a first sight of a non-zero count is news too.
            delta = now - (np.nan_to_num(before) if before is not None else 0.0)
            for chip in np.flatnonzero(np.nan_to_num(delta) > 0):
                events.append(FabricEvent("chip-failed", t, chip=int(chip), detail={
                    "fault": fault, "count": float(delta[chip]), "action": action, "source": "neuron-monitor"}))
        corrected = m["mem_ecc_corrected"]
        before = self._prev.get("mem_ecc_corrected")
        if before is not None:
            delta = np.nan_to_num(corrected - before)
            for chip in np.flatnonzero(delta >= CORRECTED_BURST):
                events.append(FabricEvent("chip-degraded", t, chip=int(chip), detail={
                    "fault": "hbm-corrected-burst", "count": float(delta[chip]), "source": "neuron-monitor"}))
        hw_errors = m["execution_errors_hardware"]
        for chip in np.flatnonzero(np.nan_to_num(hw_errors) > 0):
            events.append(FabricEvent("chip-degraded", t, chip=int(chip), detail={
                "fault": "runtime-hardware-error", "count": float(hw_errors[chip]), "source": "neuron-monitor"}))
        for name in ("sram_ecc_uncorrected", "mem_ecc_uncorrected", "mem_ecc_corrected"):
            if not np.all(np.isnan(m[name])):
                self._prev[name] = m[name].copy()
        for ev in events:
            for cb in self._subscribers:
                cb(ev)
        return events

    def attach(self, timeline: Any, reader: NeuronMonitorReader) -> threading.Thread:
        """Feed ``reader``'s reports into this object on the timeline's engine thread.

        Returns the reader thread (it ends when the stream does)."""
        for ev in self.initial_events(timeline.now):
            for cb in self._subscribers:
                cb(ev)
        return reader.follow(lambda r: timeline.submit(lambda: self.update(r, timeline.now)))
