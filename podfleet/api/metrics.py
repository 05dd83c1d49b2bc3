"""Prometheus exposition for the control plane: its own ``CollectorRegistry`` per app.

    podfleet_api_requests_total{operation,status}
    podfleet_api_request_duration_seconds{operation}   (histogram)
    podfleet_clusters{state} / podfleet_jobs{state} / podfleet_chips{state}  (gauges, read at scrape)
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from podfleet.control.plane import ControlPlane

BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class PlaneCollector(Collector):
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def collect(self) -> Iterator[GaugeMetricFamily]:
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
        for rt in list(self.plane.clusters.values()):
            tally.update(str(s) for s in rt.fabric.chip_states())
        for state, n in sorted(tally.items()):
            chips.add_metric([state], n)
        yield chips


class ApiMetrics:
    def __init__(self, plane: ControlPlane) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("podfleet_api_requests", "API requests", ["operation", "status"],
                                registry=self.registry)
        self.latency = Histogram("podfleet_api_request_duration_seconds", "API request latency",
                                 ["operation"], buckets=BUCKETS_S, registry=self.registry)
        self.registry.register(PlaneCollector(plane))


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware overhead); labels by operationId after routing."""

    def __init__(self, app: Any, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            op = getattr(route, "operation_id", None) or ("other" if route else "unmatched")
            self.metrics.requests.labels(op, str(status["code"])).inc()
            self.metrics.latency.labels(op).observe(time.perf_counter() - t0)
