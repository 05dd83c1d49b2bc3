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

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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
ALL_METRICS = tuple(sorted({*CHIP_METRICS, *LINK_METRICS}))  # what GetTelemetry may name, any scope


@dataclass(frozen=True, eq=False)  # array fields: compared (and hashed) by identity
class RollupRow:
    cluster_id: str
    scope: str  # "chip" | "link"
    metric: str
    resolution_s: float
    t_start: float
    # Values over targets, rounded to 6 decimals: read-only float64 arrays (rows of one
    # block per closed bucket). A fleet's minute is millions of values, which as tuples
    # of Python floats took 4x the memory and most of a rollup's time.
    avg: np.ndarray
    min: np.ndarray
    max: np.ndarray
    count: int


# Where each kept metric comes from in a fabric's ``chip_metrics()``/``link_metrics()``
# (None: the utilization ratio, which the caller derives).
_CHIP_SOURCE = tuple(None if m == "utilization_ratio" else m for m in CHIP_METRICS)
_LINK_SOURCE = tuple("utilization" if m == "utilization_ratio" else m for m in LINK_METRICS)


def chip_sample(metrics: Mapping[str, np.ndarray], util: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The kept chip metrics from a fabric's ``chip_metrics()`` (utilization as a ratio;
    ``util``: that ratio when the caller has it already)."""
    if util is None:
        util = np.asarray(metrics["neuroncore_utilization"], dtype=np.float64)
        util = util.mean(axis=1) / 100.0 if util.ndim == 2 else util / 100.0
    return {m: util if src is None else metrics[src] for m, src in zip(CHIP_METRICS, _CHIP_SOURCE, strict=True)}


def link_sample(metrics: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {m: metrics[src] for m, src in zip(LINK_METRICS, _LINK_SOURCE, strict=True)}


class RawWindow:
    """Ring buffer of the last ``window_s`` of samples, per metric, over ``n`` targets.

    One block ``[samples, metrics, targets]`` (float32: a 15-minute window of a 64-chip
    pod is 64 x 451 samples per metric); ``buf[metric]`` is a view of it. Zero-filled, so
    the memory of a large fabric is only taken as samples arrive (a row counts once its
    time is set: ``t`` is NaN until then)."""

    def __init__(self, n: int, metrics: Iterable[str], interval_s: float, window_s: float = 15 * MINUTE_S, *,
                 block: np.ndarray | None = None, t: np.ndarray | None = None,
                 cursor: list[int] | None = None) -> None:
        self.n = n
        self.metrics = tuple(metrics)
        self.size = max(2, round(window_s / interval_s) + 1)
        # ``block``/``t``: storage shared with other windows sampled at the same times (a
        # ``TelemetryHistory`` writes all of its scopes' rows in one assignment).
        self.t = np.full(self.size, np.nan) if t is None else t
        self.block = np.zeros((self.size, len(self.metrics), n), np.float32) if block is None else block
        self.buf = {m: self.block[:, j, :] for j, m in enumerate(self.metrics)}
        # The next row to write, in a list the owner of a shared block moves for every
        # window on it at once.
        self.cursor = [0] if cursor is None else cursor

    def add(self, t: float, sample: Mapping[str, np.ndarray] | np.ndarray) -> None:
        """One sample: metric -> values over targets, or the [metrics, targets] array."""
        i = self.cursor[0]
        self.t[i] = t
        if isinstance(sample, np.ndarray):
            self.block[i] = sample
        else:
            row = self.block[i]
            for j, m in enumerate(self.metrics):
                row[j] = sample[m]
        self.cursor[0] = (i + 1) % self.size

    def series(self, metric: str, since: float = -np.inf) -> tuple[np.ndarray, np.ndarray]:
        """(times [k], values [k, n]) in time order, samples at or after ``since``."""
        order = np.roll(np.arange(self.size), -self.cursor[0])
        t = self.t[order]
        keep = ~np.isnan(t) & (t >= since)
        return t[keep], self.buf[metric][order][keep]


class _Accumulator:
    """Sum/min/max per value (every metric of every target of both scopes, flattened) of
    the open bucket of each resolution, folded in place for all resolutions at once
    ([resolutions, values]).

    When each resolution is a whole multiple of the finer one (a minute bucket lies in one
    hour bucket), only the finest bucket takes each sample's min and max; a closing bucket
    hands its min and max to the coarser ones, so an hour's min is the min of its minutes
    (the same value, at a third of the per-sample work for them). Sums stay per sample:
    a sum of sums would round differently."""

    def __init__(self, size: int, resolutions: Iterable[float]) -> None:
        self.res = tuple(resolutions)
        self._nested = all(b % a == 0 for a, b in zip(self.res, self.res[1:], strict=False))
        shape = (len(self.res), size)
        self.sum = np.zeros(shape)
        self.min = np.full(shape, np.inf)
        self.max = np.full(shape, -np.inf)
        # What each sample's min and max go into: the finest bucket's rows when nested
        # (views, made once: the arrays are only ever written in place).
        self._lo = self.min[0] if self._nested else self.min
        self._hi = self.max[0] if self._nested else self.max
        self.count = [0] * len(self.res)
        self.bucket: list[float | None] = [None] * len(self.res)
        self._span = [(np.inf, -np.inf)] * len(self.res)  # [start, end) of each open bucket

    def add(self, t: float, x: np.ndarray) -> list[tuple[float, float, int, np.ndarray, np.ndarray, np.ndarray]]:
        """Fold one sample ``x`` [values] in; returns the buckets it closed: (resolution,
        start, samples, avg, min, max), the stats [values]."""
        closed = []
        for k, res in enumerate(self.res):
            lo, hi = self._span[k]
            if lo <= t < hi:  # still in the open bucket (the common case)
                self.count[k] += 1
                continue
            bucket = float(math.floor(t / res) * res)
            start = self.bucket[k]
            if start is not None and bucket != start and self.count[k]:
                closed.append((res, start, self.count[k], self.sum[k] / self.count[k],
                               self.min[k].copy(), self.max[k].copy()))
                if self._nested and k + 1 < len(self.res):  # the coarser buckets take its extremes
                    np.minimum(self.min[k + 1:], self.min[k], out=self.min[k + 1:])
                    np.maximum(self.max[k + 1:], self.max[k], out=self.max[k + 1:])
                self.sum[k] = 0.0
                self.min[k] = np.inf
                self.max[k] = -np.inf
                self.count[k] = 0
            self.bucket[k] = bucket
            self.count[k] += 1
            # The times that floor to this bucket (checked, not assumed: float division).
            self._span[k] = (bucket, bucket + res) if math.floor(bucket / res) * res == bucket and \
                math.floor(math.nextafter(bucket + res, -math.inf) / res) * res == bucket else (np.inf, -np.inf)
        np.add(self.sum, x, out=self.sum)
        np.minimum(self._lo, x, out=self._lo)
        np.maximum(self._hi, x, out=self._hi)
        return closed  # type: ignore[return-value]


def frozen(values: Iterable[float] | np.ndarray) -> np.ndarray:
    """Rollup values as a read-only float64 array (no copy when they already are one)."""
    a = np.asarray(values, np.float64)
    if a.flags.writeable:
        a = a.copy() if a is values else a
        a.flags.writeable = False
    return a


def _rows(a: np.ndarray) -> list[np.ndarray]:
    """Per metric, the values over targets rounded to 6 decimals (read-only views of one
    rounded block)."""
    r = np.round(a, 6)
    r.flags.writeable = False
    return list(r)


class TelemetryHistory:
    """Raw window + rollups for one cluster's chips and links."""

    def __init__(self, cluster_id: str, n_chips: int, n_links: int, interval_s: float, *,
                 sink: Callable[[list[RollupRow]], None] | None = None, window_s: float = 15 * MINUTE_S) -> None:
        self.cluster_id = cluster_id
        self.sink = sink
        scopes = (("chip", n_chips, CHIP_METRICS), ("link", n_links, LINK_METRICS))
        sizes = {scope: len(metrics) * n for scope, n, metrics in scopes}
        total = sum(sizes.values())
        # Both raw windows are views of one float32 block [samples, everything] and share
        # one time column: a sample is one converting assignment of the flat float64 row
        # (below), not one per scope and metric.
        size = max(2, round(window_s / interval_s) + 1)
        self._block = np.zeros((size, total), np.float32)
        self._t = np.full(size, np.nan)
        self._cursor = [0]  # the next row of the shared block, of both windows
        self.raw: dict[str, RawWindow] = {}
        off = 0
        for scope, n, metrics in scopes:
            view = self._block[:, off:off + sizes[scope]].reshape(size, len(metrics), n)
            assert n == 0 or np.shares_memory(view, self._block)  # a view, never a copy
            self.raw[scope] = RawWindow(n, metrics, interval_s, window_s, block=view, t=self._t, cursor=self._cursor)
            off += sizes[scope]
        self._size = size
        # One float64 sample of everything, flattened (chip metrics, then link metrics);
        # ``_x[scope]`` is its [metrics, targets] view.
        self._flat = np.zeros(total)
        self._x: dict[str, np.ndarray] = {}
        self._slices: dict[str, slice] = {}
        off = 0
        for scope, w in self.raw.items():
            self._slices[scope] = sl = slice(off, off + sizes[scope])
            self._x[scope] = self._flat[sl].reshape(len(w.metrics), w.n)
            off += sizes[scope]
        self._acc = _Accumulator(off, RESOLUTIONS_S)
        # Per scope: its window, its rows of the flat sample and (row, metric) pairs, made
        # once (``add`` runs at every tick).
        self._feeds = [(scope, w, self._x[scope], tuple(enumerate(w.metrics))) for scope, w in self.raw.items()]
        self.rows: dict[tuple[str, str, float], deque[RollupRow]] = {}

    def add(self, t: float, chip: Mapping[str, np.ndarray], link: Mapping[str, np.ndarray]) -> list[RollupRow]:
        """One sample of everything; returns the rollup rows closed by it (already sunk)."""
        return self.add_values(t, [chip[m] for m in CHIP_METRICS] + [link[m] for m in LINK_METRICS])

    def add_fabric(self, t: float, chip: Mapping[str, np.ndarray], util: np.ndarray,
                   link: Mapping[str, np.ndarray]) -> list[RollupRow]:
        """``add(t, chip_sample(chip, util), link_sample(link))`` without the two dicts:
        ``chip``/``link`` are a fabric's ``chip_metrics()``/``link_metrics()``."""
        return self.add_values(t, [util if src is None else chip[src] for src in _CHIP_SOURCE]
                               + [link[src] for src in _LINK_SOURCE])

    def add_values(self, t: float, values: list[np.ndarray]) -> list[RollupRow]:
        """One sample: the values over targets of ``CHIP_METRICS`` then ``LINK_METRICS``, in
        that order. Returns the rollup rows closed by it (already sunk)."""
        flat = self._flat
        try:
            # One call fills the flat sample (the same casts as one assignment per row).
            np.concatenate(values, out=flat)
        except ValueError:  # a scalar or mis-shaped metric: broadcast row by row, as before
            rows = [x[j] for _scope, _w, x, _m in self._feeds for j in range(x.shape[0])]
            for row, v in zip(rows, values, strict=True):
                row[...] = v
        cursor = self._cursor
        i = cursor[0]
        self._t[i] = t
        self._block[i] = flat
        cursor[0] = (i + 1) % self._size
        closed = self._acc.add(t, flat)
        if not closed:
            return []
        out: list[RollupRow] = []
        for scope, w in self.raw.items():
            sl, shape = self._slices[scope], (len(w.metrics), w.n)
            for res, start, count, avg, mn, mx in closed:
                stats = (_rows(avg[sl].reshape(shape)), _rows(mn[sl].reshape(shape)), _rows(mx[sl].reshape(shape)))
                for m, a, lo, hi in zip(w.metrics, *stats, strict=True):
                    out.append(RollupRow(self.cluster_id, scope, m, res, start, a, lo, hi, count))
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
        # A fabric reports NaN for what it does not measure (a worker slot has no temperature):
        # such a point is null in the answer, and a mean is over the targets that measured it.
        sel = (lambda a: a[:, target]) if target is not None else (lambda a: _finite_mean(a) if a.size else a[:, 0])
        if res is None:
            t, v = self.raw[scope].series(metric, since=now - span)
            vals = [_point(x, 6) for x in sel(v)] if t.size else []
            return {"range": range_, "resolution_s": None, "t": t.tolist(), "avg": vals, "min": vals, "max": vals}
        rows = [r for r in self.rows.get((scope, metric, res), ()) if r.t_start >= now - span]
        if target is not None:
            avg = [_point(r.avg[target]) for r in rows]
            mn = [_point(r.min[target]) for r in rows]
            mx = [_point(r.max[target]) for r in rows]
        else:
            avg = [_point(_finite_mean(np.asarray(r.avg)[None, :])[0]) for r in rows]
            mn = [_point(_finite_reduce(r.min, np.min)) for r in rows]
            mx = [_point(_finite_reduce(r.max, np.max)) for r in rows]
        return {"range": range_, "resolution_s": res, "t": [r.t_start for r in rows], "avg": avg, "min": mn, "max": mx}


def _point(x: Any, digits: int | None = None) -> float | None:
    """One point of a series as JSON takes it: None where nothing was measured."""
    v = float(x)
    if not np.isfinite(v):
        return None
    return round(v, digits) if digits is not None else v


def _finite_mean(a: np.ndarray) -> np.ndarray:
    """Row means over the finite entries; NaN for a row with none (no warning)."""
    ok = np.isfinite(a)
    n = ok.sum(axis=1)
    total = np.where(ok, a, 0.0).sum(axis=1)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def _finite_reduce(a: Any, fn: Callable[[np.ndarray], Any]) -> float:
    v = np.asarray(a, dtype=float)
    v = v[np.isfinite(v)]
    return float(fn(v)) if v.size else float("nan")
