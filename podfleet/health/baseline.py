"""Robust rolling baselines per (chip, metric), and the deviation rule.

Baseline = rolling median over the last ``window`` samples; scale = median absolute
deviation. Medians ignore the short spikes a mean would chase, so a baseline is not
dragged by the anomaly it should detect. A value deviates when
``|x - baseline| > rel * max(|baseline|, floor)`` (default rel = 10%, the issue's rule)
and an alert fires only after the deviation persisted for ``hold_s`` seconds.
Everything is vectorized: one call handles all chips of every metric of a bank
(``DeviationBank``: the scanner's metrics stacked as rows, one pass of numpy per scan
whatever the number of metrics; ``DeviationTracker`` is a bank of one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DeviationRule:
    metric: str
    rel: float = 0.10
    floor: float = 1.0  # below this magnitude, absolute noise dominates; compare to floor
    hold_s: float = 30.0
    # A shift that lasts this long is accepted as the new normal (a job started, the
    # room warmed up): the baseline adapts and the alert resolves.
    adapt_s: float = 600.0
    direction: str = "both"  # "up" | "down" | "both"


def _nanmedian(buf: np.ndarray, axis: int = 0) -> np.ndarray:
    """Median over ``axis`` ignoring NaN; NaN where a column has no value. A sort (NaN
    sorts last) instead of ``np.nanmedian``: that one goes through masked arrays (10x
    slower at fleet scale) and warns on empty columns (warning filters are not
    thread-safe)."""
    srt = np.sort(buf, axis=axis)
    k = np.expand_dims((~np.isnan(buf)).sum(axis=axis), axis)
    lo = np.maximum((k - 1) // 2, 0)
    hi = np.maximum(k // 2, 0)
    med = 0.5 * (np.take_along_axis(srt, lo, axis) + np.take_along_axis(srt, hi, axis))
    return np.where(k > 0, med, np.nan).squeeze(axis)


def _nanmedian0(buf: np.ndarray) -> np.ndarray:
    return _nanmedian(buf, 0)


def _median1(buf: np.ndarray) -> np.ndarray:
    """Median over axis 1 (NaN ignored). Without NaN, one sort: the same values as
    ``np.median`` (the mean of the two middle values is their halved sum either way)
    and, for rows as short as a baseline window, faster than its partition."""
    k = buf.shape[1]
    if k == 0 or np.isnan(buf).any():
        return _nanmedian(buf, 1)
    srt = np.sort(buf, axis=1)
    return 0.5 * (srt[:, (k - 1) // 2] + srt[:, k // 2])


class RollingBaseline:
    """Ring buffer of the last ``window`` samples of ``rows`` metrics over ``n`` chips
    (stored [rows * n, window]: each chip's window is contiguous); median baseline
    ([rows, n]) once ``min_samples`` exist.

    With ``refresh_every = r > 1`` each call recomputes the median of one r-th of the
    chips of each row (round robin; row j starts at chunk ``offsets[j]``), so every
    chip's baseline is at most r samples old and every scan costs the same (no scan pays
    for all medians at once: at 65,536 chips a full median over the window takes
    ~150 ms). Between refreshes the medians are kept, never recomputed."""

    def __init__(self, n: int, window: int = 60, min_samples: int = 10, refresh_every: int = 1,
                 offset: int = 0, rows: int = 1, offsets: Sequence[int] | None = None) -> None:
        self.rows = rows
        # Zeros, not NaN: a slot is only read once written (``buf[:, :count]`` until the
        # window is full), and zeros cost no memory until then (a fleet's is 125 MB).
        self.buf = np.zeros((rows * n, window), dtype=np.float64)
        self.n = n
        self.window = window
        self.min_samples = min_samples
        self.refresh_every = r = max(1, min(refresh_every, n))
        self._i = 0
        self._count = 0
        offs = [offset + j for j in range(rows)] if offsets is None else list(offsets)
        bounds = np.linspace(0, n, r + 1).astype(int)
        # The rows of ``buf`` refreshed at each phase of the round robin: one gather of
        # all of them for a pod, contiguous slices (no gather) for a large fabric.
        spans = [[(j * n + bounds[(o + p) % r], j * n + bounds[(o + p) % r + 1]) for j, o in enumerate(offs)]
                 for p in range(r)]
        self._spans: list[list[tuple[int, int]]] | None = spans if n >= 4096 else None
        self._cols = [np.concatenate([np.arange(lo, hi) for lo, hi in sp]) for sp in spans]
        # 0.5 per gathered row (the gathering path only, a pod's).
        self._halves = [np.full(len(c), 0.5) for c in self._cols] if self._spans is None else []
        self._phase = 0
        self._cached: np.ndarray | None = None  # flat [rows * n]
        # NaN can be in the buffer (a reset, or a NaN reading) until ``_clean_at`` updates
        # have been made: until then medians take the NaN-aware path (same values).
        self._updates = 0
        self._clean_at = 0
        self.clean = False  # the last ``baseline()`` has no NaN (nothing reset or unknown)

    def update(self, values: np.ndarray) -> None:
        """One sample: [rows, n] (or [n] for one row)."""
        flat = values.reshape(-1) if isinstance(values, np.ndarray) else np.reshape(values, -1)
        self.buf[:, self._i] = flat
        self._updates += 1
        # A NaN reading (the dot product with itself is NaN then: one BLAS call, cheaper
        # than a reduction); over the sample, not the buffer's column (strided: a fleet's
        # column touches a cache line per chip and metric).
        if math.isnan(flat.dot(flat)):
            self._clean_at = self._updates + self.window + 1
        self._i = (self._i + 1) % self.window
        self._count = min(self._count + 1, self.window)

    @property
    def ready(self) -> bool:
        return self._count >= self.min_samples

    def reset(self, mask: np.ndarray) -> None:
        """Forget the history of the chips in ``mask`` (their operating point changed),
        in every row."""
        if mask.any():
            rows = np.tile(np.asarray(mask, bool), self.rows)
            self.buf[rows] = np.nan
            self._clean_at = self._updates + self.window + 1
            if self._cached is not None:
                self._cached[rows] = np.nan

    def baseline(self) -> np.ndarray:
        """The medians, [rows, n] (the cache itself: do not modify)."""
        buf = self.buf[:, : self._count] if self._count < self.window else self.buf
        self.clean = self._updates >= self._clean_at  # no NaN in the buffer, none in the cache
        if self._cached is None or self.refresh_every == 1:
            self._cached = _median1(buf)
            return self._cached.reshape(self.rows, self.n)
        phase = self._phase
        self._phase = (phase + 1) % self.refresh_every
        cached = self._cached
        if self.clean:
            k = buf.shape[1]
            lo, hi = (k - 1) // 2, k // 2
            if self._spans is None:
                cols = self._cols[phase]
                # The gather is a copy already: sorted in place, no second copy.
                srt = buf.take(cols, axis=0)
                srt.sort(axis=1)
                mid = srt[:, lo] + srt[:, hi]
                mid *= self._halves[phase]  # 0.5 as an array operand (cheaper than a scalar)
                cached[cols] = mid
            else:
                for a, b in self._spans[phase]:
                    srt = np.sort(buf[a:b], axis=1)
                    cached[a:b] = 0.5 * (srt[:, lo] + srt[:, hi])
            return cached.reshape(self.rows, self.n)
        cols = self._cols[phase]
        cached[cols] = _median1(buf[cols])
        # A reset chip (NaN) cannot wait for its turn: it is cheap to do now.
        stale = np.isnan(cached)
        if stale.any():
            cached[stale] = _median1(buf[stale])
        return cached.reshape(self.rows, self.n)


class DeviationBank:
    """Per-chip deviation state for several rules (one row each) over the same chips,
    sharing one baseline buffer and one refresh schedule."""

    def __init__(self, rules: Sequence[DeviationRule], n: int, window: int = 60, refresh_every: int = 1,
                 offsets: Sequence[int] | None = None) -> None:
        self.rules = tuple(rules)
        k = len(self.rules)
        self.n = n
        self.base = RollingBaseline(n, window=window, refresh_every=refresh_every, rows=k,
                                    offsets=range(k) if offsets is None else offsets)
        self.since = np.full((k, n), np.nan)
        col = lambda xs: np.asarray(xs, np.float64)[:, None]  # noqa: E731
        self._floor = col([r.floor for r in self.rules])
        self._rel = col([r.rel for r in self.rules])
        self._hold = col([r.hold_s for r in self.rules])
        self._adapt = col([r.adapt_s for r in self.rules])
        self._sign = col([-1.0 if r.direction == "down" else 1.0 for r in self.rules])
        both = [r.direction not in ("up", "down") for r in self.rules]
        self._both_rows = [j for j, b in enumerate(both) if b]
        self._all_both = all(both)
        self._since_clear = True  # ``since`` is all NaN
        # The alerting mask when nothing deviates (shared, read-only).
        self.quiet = np.zeros((k, n), dtype=bool)
        self.quiet.flags.writeable = False
        self._quiet_bytes = self.quiet.tobytes()
        # Per-observe scratch: reference, deviation, its signed size, the deviating mask.
        self._ref, self._delta, self._signed = np.zeros((k, n)), np.zeros((k, n)), np.zeros((k, n))
        self._dev = np.zeros((k, n), dtype=bool)

    def reset(self, mask: np.ndarray) -> None:
        """Start the baselines of the chips in ``mask`` afresh (a job started or stopped)."""
        self.base.reset(mask)
        self.since[:, mask] = np.nan
        self._since_clear = False

    def observe(self, values: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Feed one sample [rules, n]. Returns (alerting mask, baseline), both [rules, n]
        and valid until the next call (the mask may be the shared ``quiet``). Deviating
        samples are not folded into the baseline (until ``adapt_s``), so an anomaly
        cannot quickly become the new normal."""
        values = np.asarray(values, dtype=np.float64)
        rb = self.base
        if not rb.ready:
            rb.update(values)
            return self.quiet, values
        base = rb.baseline()
        if not rb.clean:
            fresh = np.isnan(base)  # a chip whose history was reset: it learns first
            if fresh.any():
                base = np.where(fresh, values, base)
        # The same operations as ``ref = rel * max(|base|, floor)``, ``delta = values - base``
        # and ``dev = |delta| (or signed) > ref``, into the bank's own buffers: none of them
        # outlives this call (the deviating path below makes new arrays from them).
        ref, delta, signed, dev = self._ref, self._delta, self._signed, self._dev
        np.abs(base, out=ref)
        np.maximum(ref, self._floor, out=ref)
        ref *= self._rel
        np.subtract(values, base, out=delta)
        if self._all_both:
            np.abs(delta, out=signed)
        else:
            np.multiply(delta, self._sign, out=signed)
            for j in self._both_rows:
                np.abs(delta[j], out=signed[j])
        np.greater(signed, ref, out=dev)
        if dev.tobytes() != self._quiet_bytes:  # ``dev.any()`` without a reduction
            since = self.since
            since = self.since = np.where(dev, np.where(np.isnan(since), now, since), np.nan)
            self._since_clear = False
            age = now - since
            # Normal samples update the baseline; a deviating chip keeps its old baseline
            # until the shift has lasted ``adapt_s``.
            keep = dev & ~(age >= self._adapt)
            rb.update(np.where(keep, base, values))
            return dev & (age >= self._hold), base
        if not self._since_clear:
            self.since.fill(np.nan)
            self._since_clear = True
        rb.update(values)
        return self.quiet, base


class DeviationTracker:
    """Per-chip deviation state for one rule: when each chip started deviating."""

    def __init__(self, rule: DeviationRule, n: int, window: int = 60, refresh_every: int = 1,
                 offset: int = 0) -> None:
        self.rule = rule
        self.bank = DeviationBank((rule,), n, window=window, refresh_every=refresh_every, offsets=(offset,))
        self.base = self.bank.base

    @property
    def since(self) -> np.ndarray:
        return self.bank.since[0]

    def reset(self, mask: np.ndarray) -> None:
        """Start the baseline of the chips in ``mask`` afresh (a job started or stopped)."""
        self.bank.reset(mask)

    def observe(self, values: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Feed one sample. Returns (alerting mask, baseline). Deviating samples are not
        folded into the baseline (until ``adapt_s``), so an anomaly cannot quickly become
        the new normal."""
        alerting, base = self.bank.observe(np.asarray(values, np.float64)[None, :], now)
        return alerting[0].copy(), base[0].copy()
