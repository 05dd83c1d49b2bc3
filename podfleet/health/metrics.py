"""Prometheus collector for chip health, alerts, recoveries and health scans (chip, link
and job telemetry of every fabric: ``podfleet.api.chip_metrics``).

Names follow the Prometheus conventions: base units (``_celsius``, ``_watts``,
``_bytes``, ``_seconds``, ``_ratio``), ``_total`` for counters. Read at scrape time
from the fabrics' latest telemetry (copies made by the fabric), never per sample.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from podfleet.control.hardwareviews import pod_shape
from podfleet.control.runtime import ClusterRuntime
from podfleet.health.service import HealthService


class Clusters(Protocol):
    @property
    def clusters(self) -> Mapping[str, ClusterRuntime]: ...


class RecoveryCounts(Protocol):
    """What ``/metrics`` reads of recovery (``RecoveryService`` is one)."""

    def finished_counts(self) -> Tally[tuple[str, str]]: ...


class HealthCollector(Collector):
    """``rolled_up``: the clusters whose chips ``/metrics`` rolls up per pod (the API's
    rule, ``api.chip_metrics``): their health is ``podfleet_fleet_pod_health_max`` per pod,
    not a series per chip (65,536 of them were 6.5 MB of a fleet's scrape)."""

    def __init__(self, plane: Clusters, health: HealthService | None = None,
                 recovery: RecoveryCounts | None = None,
                 rolled_up: Callable[[list[ClusterRuntime]], set[str]] | None = None) -> None:
        self.plane = plane
        self.health = health
        self.recovery = recovery
        self.rolled_up = rolled_up

    def collect(self) -> Iterator[Metric]:
        # Chip, link and job series of every fabric: ``podfleet.api.chip_metrics``.
        plane = self.plane
        health = GaugeMetricFamily("podfleet_chip_health", "Chip health: 0 ok, 1 warning, 2 critical",
                                   labels=["cluster", "cluster_id", "chip"])
        pods = GaugeMetricFamily("podfleet_fleet_pod_health_max",
                                 "Worst chip health of the pod: 0 ok, 1 warning, 2 critical",
                                 labels=["cluster", "cluster_id", "pod", "block"])
        rts = list(plane.clusters.values())
        big = self.rolled_up(rts) if self.rolled_up is not None else set()
        for rt in rts:
            mon = self.health.monitors.get(rt.id) if self.health is not None else None
            if mon is None:
                continue
            values = np.asarray(mon.scanner.chip_health)
            n, per, k = pod_shape(rt.topology)
            if rt.id in big and values.size == n * per:
                for p, v in enumerate(values.reshape(n, per).max(axis=1).tolist()):
                    pods.add_metric([rt.rec.name, rt.id, str(p), str(p // k)], v)
                continue
            for c, v in enumerate(values.tolist()):
                health.add_metric([rt.rec.name, rt.id, str(c)], v)
        yield health
        yield pods
        yield from self._service()

    def _service(self) -> Iterator[Metric]:
        svc = self.health
        alerts = GaugeMetricFamily("podfleet_alerts", "Alerts by state and severity", labels=["state", "severity"])
        rec = CounterMetricFamily("podfleet_recoveries", "Recovery flows finished", labels=["kind", "state"])
        scans = CounterMetricFamily("podfleet_health_scans", "Health scans run", labels=["cluster", "cluster_id"])
        if svc is not None:
            for (state, sev), n in sorted(Tally((a.state.value, a.severity) for a in svc.book.all()).items()):
                alerts.add_metric([state, sev], n)
        if self.recovery is not None:
            for (kind, state), n in sorted(self.recovery.finished_counts().items()):
                rec.add_metric([kind, state], n)
        if svc is not None:
            names = {rt.id: rt.rec.name for rt in list(self.plane.clusters.values())}
            for cid, mon in list(svc.monitors.items()):
                if cid in names:  # a deleted cluster's series go away
                    scans.add_metric([names[cid], cid], mon.scanner.scans)
        yield alerts
        yield rec
        yield scans
