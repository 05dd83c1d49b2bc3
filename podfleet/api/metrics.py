"""Prometheus exposition for the control plane: its own ``CollectorRegistry`` per app.

    podfleet_api_requests_total{operation,status}
    podfleet_api_request_duration_seconds{operation}   (histogram)
    podfleet_clusters{state} / podfleet_jobs{state} / podfleet_chips{state}  (gauges, read at scrape)
    podfleet_chips_mode{cluster,mode} / podfleet_spare_chips{cluster}  cordoned/draining chips; spares held
    podfleet_pod_utilization_ratio{cluster,pod}      chips held by jobs / non-spare chips
    podfleet_fragmentation_ratio{cluster,pod}        1 - largest free block / free chips
    podfleet_free_chips{cluster,pod} / podfleet_largest_free_block_chips{cluster,pod}
    podfleet_scheduler_jobs{cluster,phase}           pending / running in the scheduler
    podfleet_job_balance_degree_ratio{cluster,job_id} mean / max chip utilization over a job's chips
    podfleet_queue_wait_seconds{cluster}             (histogram) total time each job spent queued

The scheduler figures are the ones DescribeCluster shows (``ClusterRuntime.sched_metrics``,
re-computed on the engine thread): a scrape never touches the scheduler itself. Chip
states and every per-chip series come from the fabric readouts the engine reads for the
scrape (``ControlPlane.metrics_readouts``, once per scrape for both collectors): a scrape
never calls a fabric either.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterator

from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from podfleet.api.chip_metrics import FabricCollector, Readouts
from podfleet.control.plane import ControlPlane

BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
QUEUE_WAIT_BUCKETS_S = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


class PlaneCollector(Collector):
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def collect(self) -> Iterator[Metric]:
        return self.collect_from(self.plane.metrics_readouts())

    def collect_from(self, readouts: Readouts) -> Iterator[Metric]:
        clusters = GaugeMetricFamily("podfleet_clusters", "Live clusters by state", labels=["state"])
        for state, n in sorted(Tally(rt.rec.state for rt in list(self.plane.clusters.values())).items()):
            clusters.add_metric([state], n)
        yield clusters
        jobs = GaugeMetricFamily("podfleet_jobs", "Training jobs by state", labels=["state"])
        for state, n in sorted(Tally(v["state"] for v in list(self.plane.jobs.views.values())).items()):
            jobs.add_metric([state], n)
        yield jobs
        chips = GaugeMetricFamily("podfleet_chips", "Chips of live clusters by state", labels=["state"])
        tally: Tally[str] = Tally()
        for _rt, r in readouts:
            tally.update(str(s) for s in r.chip_states)
        for state, n in sorted(tally.items()):
            chips.add_metric([state], n)
        yield chips
        # The operator's chip modes (control.chips) and the spares each cluster holds now.
        modes = GaugeMetricFamily("podfleet_chips_mode", "Chips an operator cordoned or is draining",
                                  labels=["cluster", "mode"])
        spares = GaugeMetricFamily("podfleet_spare_chips", "Spare chips held now (used spares leave)",
                                   labels=["cluster"])
        for rt in list(self.plane.clusters.values()):
            by_mode = Tally(m.value for m in rt.modes.to_modes())
            for mode in ("cordoned", "draining"):
                modes.add_metric([rt.rec.name, mode], by_mode.get(mode, 0))
            spares.add_metric([rt.rec.name], len(rt.spares))
        yield modes
        yield spares
        yield from self._scheduler()

    def _scheduler(self) -> Iterator[Metric]:
        util = GaugeMetricFamily("podfleet_pod_utilization_ratio", "Chips held by jobs / non-spare chips",
                                 labels=["cluster", "pod"])
        frag = GaugeMetricFamily("podfleet_fragmentation_ratio", "1 - largest free block / free chips",
                                 labels=["cluster", "pod"])
        free = GaugeMetricFamily("podfleet_free_chips", "Free non-spare healthy chips", labels=["cluster", "pod"])
        largest = GaugeMetricFamily("podfleet_largest_free_block_chips", "Chips in the largest free block",
                                    labels=["cluster", "pod"])
        phases = GaugeMetricFamily("podfleet_scheduler_jobs", "Jobs in the scheduler by phase",
                                   labels=["cluster", "phase"])
        balance = GaugeMetricFamily("podfleet_job_balance_degree_ratio",
                                    "Mean / max chip utilization over a running job's chips", labels=["cluster", "job_id"])
        waits = HistogramMetricFamily("podfleet_queue_wait_seconds", "Total time each job spent queued",
                                      labels=["cluster"])
        for rt in list(self.plane.clusters.values()):
            m, name = rt.sched_metrics, rt.rec.name
            for p in m.get("pods", []):
                pod = str(p["pod"])
                util.add_metric([name, pod], p["utilization"])
                frag.add_metric([name, pod], p["fragmentation"])
                free.add_metric([name, pod], p["free_chips"])
                n = 1
                for d in p.get("largest_free_block") or [0]:
                    n *= d
                largest.add_metric([name, pod], n)
            if m:
                phases.add_metric([name, "pending"], m.get("pending_jobs", 0))
                phases.add_metric([name, "running"], m.get("running_jobs", 0))
            for job, degree in sorted((m.get("balance_degree") or {}).items()):
                balance.add_metric([name, job], degree)
            values = list(rt.queue_waits.values())
            counts = [sum(v <= b for v in values) for b in QUEUE_WAIT_BUCKETS_S]
            buckets = [(floatToGoString(b), c) for b, c in zip(QUEUE_WAIT_BUCKETS_S, counts, strict=True)]
            waits.add_metric([name], [*buckets, ("+Inf", len(values))], sum(values))
        yield from (util, frag, free, largest, phases, balance, waits)


class ApiMetrics:
    def __init__(self, plane: ControlPlane, *, per_chip: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("podfleet_api_requests", "API requests", ["operation", "status"],
                                registry=self.registry)
        self.latency = Histogram("podfleet_api_request_duration_seconds", "API request latency",
                                 ["operation"], buckets=BUCKETS_S, registry=self.registry)
        self.registry.register(ScrapeCollector(plane, per_chip=per_chip))


class ScrapeCollector(Collector):
    """The plane's series, then every fabric's (chips, links, jobs; build info), from one
    engine read of the fabrics per scrape."""

    def __init__(self, plane: ControlPlane, *, per_chip: bool = False) -> None:
        self.plane = plane
        self.planes = PlaneCollector(plane)
        self.fabrics = FabricCollector(plane, per_chip=per_chip)

    def collect(self) -> Iterator[Metric]:
        readouts = self.plane.metrics_readouts()
        yield from self.planes.collect_from(readouts)
        yield from self.fabrics.collect_from(readouts)


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware overhead); labels by operationId after routing."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            op = (route.operation_id if isinstance(route, APIRoute) else None) or ("other" if route else "unmatched")
            self.metrics.requests.labels(op, str(status["code"])).inc()
            self.metrics.latency.labels(op).observe(time.perf_counter() - t0)
