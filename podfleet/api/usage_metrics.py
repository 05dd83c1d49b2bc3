"""``podfleet_chip_seconds_total{queue,team,kind}`` on /metrics (``control.accounting``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from podfleet.control import accounting
from podfleet.control.plane import ControlPlane


class UsageCollector(Collector):
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily("podfleet_chip_seconds", "Chip-seconds of jobs by queue, team and kind "
                                  "(busy, reserved, lost), over closed intervals", labels=["queue", "team", "kind"])
        for (queue, team, kind), secs in sorted(accounting.counters(list(self.plane.jobs.views.values())).items()):
            fam.add_metric([queue, team, kind], secs)
        yield fam
