"""Prometheus collector for chips, links, jobs, alerts, recoveries and health scans.

Names follow the Prometheus conventions: base units (``_celsius``, ``_watts``,
``_bytes``, ``_seconds``, ``_ratio``), ``_total`` for counters. Read at scrape time
from the fabrics' latest telemetry (copies made by the fabric), never per sample.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from podfleet.control.plane import ControlPlane
    from podfleet.health.service import HealthService

CHIP_GAUGES = (
    ("temperature_c", "podfleet_chip_temperature_celsius", "Chip temperature", 1.0),
    ("power_w", "podfleet_chip_power_watts", "Chip power draw", 1.0),
    ("hbm_used_bytes", "podfleet_chip_hbm_used_bytes", "HBM in use", 1.0),
    ("clock_mhz", "podfleet_chip_clock_hertz", "Chip clock", 1e6),
    ("voltage_v", "podfleet_chip_voltage_volts", "Chip voltage", 1.0),
)
CHIP_COUNTERS = (
    ("mem_ecc_corrected", "podfleet_chip_hbm_ecc_corrected", "Corrected HBM ECC errors"),
    ("mem_ecc_uncorrected", "podfleet_chip_hbm_ecc_uncorrected", "Uncorrectable HBM ECC errors"),
    ("sram_ecc_uncorrected", "podfleet_chip_sram_ecc_uncorrected", "Uncorrectable SRAM ECC errors"),
    ("execution_errors", "podfleet_chip_execution_errors", "Execution errors"),
)


class HealthCollector(Collector):
    def __init__(self, plane: ControlPlane, health: HealthService | None = None) -> None:
        self.plane = plane
        self.health = health

    def collect(self) -> Iterator[Metric]:
        plane = self.plane
        rts = [rt for rt in list(plane.clusters.values())]
        gauges = {name: GaugeMetricFamily(name, doc, labels=["cluster", "chip"]) for _, name, doc, _ in CHIP_GAUGES}
        util = GaugeMetricFamily("podfleet_chip_utilization_ratio", "NeuronCore utilization (0-1)",
                                 labels=["cluster", "chip"])
        counters = {name: CounterMetricFamily(name, doc, labels=["cluster", "chip"]) for _, name, doc in CHIP_COUNTERS}
        health = GaugeMetricFamily("podfleet_chip_health", "Chip health: 0 ok, 1 warning, 2 critical",
                                   labels=["cluster", "chip"])
        lutil = GaugeMetricFamily("podfleet_link_utilization_ratio", "Link utilization (0-1)", labels=["cluster", "link"])
        lbw = GaugeMetricFamily("podfleet_link_bandwidth_bytes_per_second", "Usable link bandwidth",
                                labels=["cluster", "link"])
        ltx = CounterMetricFamily("podfleet_link_transmit_bytes", "Bytes sent over the link", labels=["cluster", "link"])
        lerr = CounterMetricFamily("podfleet_link_errors", "Link errors", labels=["cluster", "link"])
        for rt in rts:
            cid = rt.id
            m = rt.fabric.chip_metrics()
            chips = [str(i) for i in range(rt.topology.n_chips)]
            for key, name, _, scale in CHIP_GAUGES:
                if key in m:
                    for c, v in zip(chips, (np.asarray(m[key], np.float64) * scale).tolist(), strict=True):
                        gauges[name].add_metric([cid, c], v)
            if "neuroncore_utilization" in m:
                u = np.asarray(m["neuroncore_utilization"], np.float64)
                u = (u.mean(axis=1) if u.ndim == 2 else u) / 100.0
                for c, v in zip(chips, u.tolist(), strict=True):
                    util.add_metric([cid, c], v)
            for key, name, _ in CHIP_COUNTERS:
                if key in m:
                    for c, v in zip(chips, np.asarray(m[key], np.float64).tolist(), strict=True):
                        counters[name].add_metric([cid, c], v)
            mon = self.health.monitors.get(cid) if self.health is not None else None
            if mon is not None:
                for c, v in zip(chips, mon.scanner.chip_health.tolist(), strict=True):
                    health.add_metric([cid, c], v)
            lm = rt.fabric.link_metrics()
            links = [str(i) for i in range(len(lm.get("utilization", ())))]
            for fam, key in ((lutil, "utilization"), (lbw, "bandwidth_bytes_per_s"), (ltx, "tx_bytes"), (lerr, "errors")):
                if key in lm:
                    for j, v in zip(links, np.asarray(lm[key], np.float64).tolist(), strict=True):
                        fam.add_metric([cid, j], v)
        yield from gauges.values()
        yield util
        yield from counters.values()
        yield health
        yield from (lutil, lbw, ltx, lerr)
        yield from self._jobs()
        yield from self._service()

    def _jobs(self) -> Iterator[Metric]:
        tps = GaugeMetricFamily("podfleet_job_tokens_per_second", "Training throughput", labels=["job", "cluster"])
        step = GaugeMetricFamily("podfleet_job_step", "Steps completed", labels=["job", "cluster"])
        for jid, v in list(self.plane.jobs.views.items()):
            p = v.get("progress", {})
            tps.add_metric([jid, v["cluster_id"]], float(p.get("tokens_per_s") or 0.0))
            step.add_metric([jid, v["cluster_id"]], float(p.get("step") or 0))
        yield tps
        yield step

    def _service(self) -> Iterator[Metric]:
        svc = self.health
        alerts = GaugeMetricFamily("podfleet_alerts", "Alerts by state and severity", labels=["state", "severity"])
        rec = CounterMetricFamily("podfleet_recoveries", "Recovery flows finished", labels=["kind", "state"])
        scans = CounterMetricFamily("podfleet_health_scans", "Health scans run", labels=["cluster"])
        if svc is not None:
            for (state, sev), n in sorted(Tally((a.state.value, a.severity) for a in svc.book.all()).items()):
                alerts.add_metric([state, sev], n)
            tally: Tally[tuple[str, str]] = Tally()
            for o in list(svc.recovery.orch.values()):
                tally.update((r.kind, r.state.value) for r in o.done)
            for (kind, state), n in sorted(tally.items()):
                rec.add_metric([kind, state], n)
            for cid, mon in list(svc.monitors.items()):
                scans.add_metric([cid], mon.scanner.scans)
        yield alerts
        yield rec
        yield scans
