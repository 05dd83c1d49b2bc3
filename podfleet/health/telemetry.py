"""Telemetry history: a raw in-memory window and 1-minute / 1-hour rollups.

The raw window keeps every sample of the last ``window_s`` (15 minutes) in a numpy ring
buffer ``[samples, targets]`` per metric. Rollups accumulate sum/min/max/count per
target and close a bucket when time crosses its boundary; a closed bucket is one
``RollupRow`` holding the whole fabric's values for one metric (one row per metric per
minute, not per chip: 64 chips x 8 metrics is 8 rows a minute). Rows are kept in
memory for queries (1 day of minutes, 90 days of hours) and handed to a ``sink`` (the
store) for durability; ``load`` refills memory from the store after a restart.

Ranges served: ``realtime`` (raw window), ``hour`` and ``day`` (1-minute rollups),
``week`` and ``quarter`` (1-hour rollups).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from podfleet.errors import InvalidInputError, UnknownNameError

MINUTE_S, HOUR_S, DAY_S = 60.0, 3600.0, 86400.0
RESOLUTIONS_S = (MINUTE_S, HOUR_S)
RETENTION_S = {MINUTE_S: DAY_S, HOUR_S: 90 * DAY_S}
RANGES: dict[str, tuple[float, float | None]] = {
    # range -> (span, resolution; None = raw window)
    "realtime": (15 * MINUTE_S, None),
    "hour": (HOUR_S, MINUTE_S),
    "day": (DAY_S, MINUTE_S),
    "week": (7 * DAY_S, HOUR_S),
    "quarter": (90 * DAY_S, HOUR_S),
}
# What is kept per chip and per link (name -> how to reduce a [chips, cores] metric).
CHIP_METRICS = ("temperature_c", "power_w", "utilization_ratio", "hbm_used_bytes", "clock_mhz",
                "mem_ecc_corrected", "link_errors")
LINK_METRICS = ("utilization_ratio", "bandwidth_bytes_per_s", "errors")


@dataclass(frozen=True)
class RollupRow:
    cluster_id: str
    scope: str  # "chip" | "link"
    metric: str
    resolution_s: float
    t_start: float
    avg: tuple[float, ...]
    min: tuple[float, ...]
    max: tuple[float, ...]
    count: int


def chip_sample(metrics: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The kept chip metrics from a fabric's ``chip_metrics()`` (utilization as a ratio)."""
    util = np.asarray(metrics["neuroncore_utilization"], dtype=np.float64)
    return {
        "temperature_c": np.asarray(metrics["temperature_c"], np.float64),
        "power_w": np.asarray(metrics["power_w"], np.float64),
        "utilization_ratio": util.mean(axis=1) / 100.0 if util.ndim == 2 else util / 100.0,
        "hbm_used_bytes": np.asarray(metrics["hbm_used_bytes"], np.float64),
        "clock_mhz": np.asarray(metrics["clock_mhz"], np.float64),
        "mem_ecc_corrected": np.asarray(metrics["mem_ecc_corrected"], np.float64),
        "link_errors": np.asarray(metrics["link_errors"], np.float64),
    }


def link_sample(metrics: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        "utilization_ratio": np.asarray(metrics["utilization"], np.float64),
        "bandwidth_bytes_per_s": np.asarray(metrics["bandwidth_bytes_per_s"], np.float64),
        "errors": np.asarray(metrics["errors"], np.float64),
    }


class RawWindow:
    """Ring buffer of the last ``window_s`` of samples, per metric, over ``n`` targets."""

    def __init__(self, n: int, metrics: Iterable[str], interval_s: float, window_s: float = 15 * MINUTE_S) -> None:
        self.n = n
        self.size = max(2, round(window_s / interval_s) + 1)
        self.t = np.full(self.size, np.nan)
        # float32: a 15-minute window of a 64-chip pod is 64 x 451 samples per metric.
        self.buf = {m: np.full((self.size, n), np.nan, np.float32) for m in metrics}
        self._i = 0

    def add(self, t: float, sample: Mapping[str, np.ndarray]) -> None:
        i = self._i
        self.t[i] = t
        for m, arr in self.buf.items():
            arr[i] = sample[m]
        self._i = (i + 1) % self.size

    def series(self, metric: str, since: float = -np.inf) -> tuple[np.ndarray, np.ndarray]:
        """(times [k], values [k, n]) in time order, samples at or after ``since``."""
        order = np.roll(np.arange(self.size), -self._i)
        t = self.t[order]
        keep = ~np.isnan(t) & (t >= since)
        return t[keep], self.buf[metric][order][keep]


class _Accumulator:
    def __init__(self, n: int, metrics: Iterable[str], resolution_s: float) -> None:
        self.res = resolution_s
        self.metrics = tuple(metrics)
        self.n = n
        self.bucket: float | None = None
        self._reset()

    def _reset(self) -> None:
        n = self.n
        self.sum = {m: np.zeros(n) for m in self.metrics}
        self.min = {m: np.full(n, np.inf) for m in self.metrics}
        self.max = {m: np.full(n, -np.inf) for m in self.metrics}
        self.count = 0

    def add(self, t: float, sample: Mapping[str, np.ndarray]
            ) -> tuple[float, int, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]] | None:
        """Fold one sample in; returns the closed bucket (start, samples, per-metric
        (avg, min, max)) when ``t`` left it."""
        bucket = float(np.floor(t / self.res) * self.res)
        closed = None
        if self.bucket is not None and bucket != self.bucket and self.count:
            stats = {m: (self.sum[m] / self.count, self.min[m], self.max[m]) for m in self.metrics}
            closed = (self.bucket, self.count, stats)
            self._reset()
        self.bucket = bucket
        for m in self.metrics:
            v = sample[m]
            self.sum[m] += v
            np.minimum(self.min[m], v, out=self.min[m])
            np.maximum(self.max[m], v, out=self.max[m])
        self.count += 1
        return closed


def _r(a: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in np.round(a, 6))


class TelemetryHistory:
    """Raw window + rollups for one cluster's chips and links."""

    def __init__(self, cluster_id: str, n_chips: int, n_links: int, interval_s: float, *,
                 sink: Callable[[list[RollupRow]], None] | None = None, window_s: float = 15 * MINUTE_S) -> None:
        self.cluster_id = cluster_id
        self.sink = sink
        self.raw = {"chip": RawWindow(n_chips, CHIP_METRICS, interval_s, window_s),
                    "link": RawWindow(n_links, LINK_METRICS, interval_s, window_s)}
        self._acc = {(scope, res): _Accumulator(w.n, w.buf, res)
                     for scope, w in self.raw.items() for res in RESOLUTIONS_S}
        self.rows: dict[tuple[str, str, float], deque[RollupRow]] = {}

    def add(self, t: float, chip: Mapping[str, np.ndarray], link: Mapping[str, np.ndarray]) -> list[RollupRow]:
        """One sample of everything; returns the rollup rows closed by it (already sunk)."""
        out: list[RollupRow] = []
        for scope, sample in (("chip", chip), ("link", link)):
            self.raw[scope].add(t, sample)
            for res in RESOLUTIONS_S:
                closed = self._acc[(scope, res)].add(t, sample)
                if closed is None:
                    continue
                start, count, stats = closed
                for m, (avg, mn, mx) in stats.items():
                    out.append(RollupRow(self.cluster_id, scope, m, res, start, _r(avg), _r(mn), _r(mx), count))
        if out:
            self._keep(out, now=t)
            if self.sink is not None:
                self.sink(out)
        return out

    def load(self, rows: Iterable[RollupRow], now: float) -> None:
        self._keep(sorted(rows, key=lambda r: r.t_start), now=now)

    def _keep(self, rows: Iterable[RollupRow], now: float) -> None:
        for r in rows:
            key = (r.scope, r.metric, r.resolution_s)
            q = self.rows.setdefault(key, deque())
            q.append(r)
            horizon = now - RETENTION_S[r.resolution_s]
            while q and q[0].t_start < horizon:
                q.popleft()

    def query(self, scope: str, metric: str, range_: str, now: float, target: int | None = None) -> dict:
        """Points of one metric over a range: ``{"t": [...], "avg": [...], "min", "max"}``
        for one target, or the mean over targets when ``target`` is None."""
        if range_ not in RANGES:
            raise UnknownNameError("range", range_, list(RANGES), field="range")
        if scope not in self.raw:
            raise UnknownNameError("scope", scope, list(self.raw), field="scope")
        if metric not in self.raw[scope].buf:
            raise UnknownNameError(f"{scope} metric", metric, list(self.raw[scope].buf), field="metric")
        n = self.raw[scope].n
        if target is not None and not 0 <= target < n:
            raise InvalidInputError(f"{scope} must be 0-{n - 1}, got {target}", field=scope)
        span, res = RANGES[range_]
        sel = (lambda a: a[:, target]) if target is not None else (lambda a: np.nanmean(a, axis=1) if a.size else a[:, 0])
        if res is None:
            t, v = self.raw[scope].series(metric, since=now - span)
            vals = [round(float(x), 6) for x in sel(v)] if t.size else []
            return {"range": range_, "resolution_s": None, "t": t.tolist(), "avg": vals, "min": vals, "max": vals}
        rows = [r for r in self.rows.get((scope, metric, res), ()) if r.t_start >= now - span]
        if target is not None:
            avg = [r.avg[target] for r in rows]
            mn = [r.min[target] for r in rows]
            mx = [r.max[target] for r in rows]
        else:
            avg = [float(np.mean(r.avg)) for r in rows]
            mn = [float(np.min(r.min)) for r in rows]
            mx = [float(np.max(r.max)) for r in rows]
        return {"range": range_, "resolution_s": res, "t": [r.t_start for r in rows], "avg": avg, "min": mn, "max": mx}
