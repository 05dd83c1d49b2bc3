"""Robust rolling baselines per (chip, metric), and the deviation rule.

Baseline = rolling median over the last ``window`` samples; scale = median absolute
deviation. Medians ignore the short spikes a mean would chase, so a baseline is not
dragged by the anomaly it should detect. A value deviates when
``|x - baseline| > rel * max(|baseline|, floor)`` (default rel = 10%, the issue's rule)
and an alert fires only after the deviation persisted for ``hold_s`` seconds.
Everything is vectorized: one call handles all chips of a metric.
"""

from __future__ import annotations

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


def _nanmedian0(buf: np.ndarray) -> np.ndarray:
    """Median over axis 0 ignoring NaN; NaN where a column has no value. A sort (NaN
    sorts last) instead of ``np.nanmedian``: that one goes through masked arrays (10x
    slower at fleet scale) and warns on empty columns (warning filters are not
    thread-safe)."""
    srt = np.sort(buf, axis=0)
    k = (~np.isnan(buf)).sum(axis=0)
    lo = np.maximum((k - 1) // 2, 0)[None, :]
    hi = np.maximum(k // 2, 0)[None, :]
    med = 0.5 * (np.take_along_axis(srt, lo, 0)[0] + np.take_along_axis(srt, hi, 0)[0])
    return np.where(k > 0, med, np.nan)


class RollingBaseline:
    """Ring buffer [window, n] of one metric; median baseline once ``min_samples`` exist.

    With ``refresh_every = r > 1`` each call recomputes the median of one r-th of the
    chips (round robin), so every chip's baseline is at most r samples old and every
    scan costs the same (no scan pays for all medians at once: at 65,536 chips a full
    median over the window takes ~150 ms). ``offset`` staggers trackers."""

    def __init__(self, n: int, window: int = 60, min_samples: int = 10, refresh_every: int = 1,
                 offset: int = 0) -> None:
        self.buf = np.full((window, n), np.nan, dtype=np.float64)
        self.n = n
        self.window = window
        self.min_samples = min_samples
        self.refresh_every = max(1, min(refresh_every, n))
        self._i = 0
        self._count = 0
        self._chunk = offset % self.refresh_every
        self._bounds = np.linspace(0, n, self.refresh_every + 1).astype(int)
        self._cached: np.ndarray | None = None

    def update(self, values: np.ndarray) -> None:
        self.buf[self._i] = values
        self._i = (self._i + 1) % self.window
        self._count = min(self._count + 1, self.window)

    @property
    def ready(self) -> bool:
        return self._count >= self.min_samples

    def reset(self, mask: np.ndarray) -> None:
        """Forget the history of the chips in ``mask`` (their operating point changed)."""
        if mask.any():
            self.buf[:, mask] = np.nan
            if self._cached is not None:
                self._cached[mask] = np.nan

    def baseline(self) -> np.ndarray:
        buf = self.buf[: self._count] if self._count < self.window else self.buf
        if self._cached is None or self.refresh_every == 1:
            self._cached = _median0(buf)
            return self._cached
        lo, hi = self._bounds[self._chunk], self._bounds[self._chunk + 1]
        self._chunk = (self._chunk + 1) % self.refresh_every
        self._cached[lo:hi] = _median0(buf[:, lo:hi])
        # A reset chip (NaN) cannot wait for its turn: it is cheap to do now.
        stale = np.isnan(self._cached)
        if stale.any():
            self._cached[stale] = _median0(buf[:, stale])
        return self._cached


def _median0(buf: np.ndarray) -> np.ndarray:
    return _nanmedian0(buf) if np.isnan(buf).any() else np.median(buf, axis=0)


class DeviationTracker:
    """Per-chip deviation state for one rule: when each chip started deviating."""

    def __init__(self, rule: DeviationRule, n: int, window: int = 60, refresh_every: int = 1,
                 offset: int = 0) -> None:
        self.rule = rule
        self.base = RollingBaseline(n, window=window, refresh_every=refresh_every, offset=offset)
        self.since = np.full(n, np.nan)

    def reset(self, mask: np.ndarray) -> None:
        """Start the baseline of the chips in ``mask`` afresh (a job started or stopped)."""
        self.base.reset(mask)
        self.since[mask] = np.nan

    def observe(self, values: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Feed one sample. Returns (alerting mask, baseline). Deviating samples are not
        folded into the baseline (until ``adapt_s``), so an anomaly cannot quickly become
        the new normal."""
        values = np.asarray(values, dtype=np.float64)
        if not self.base.ready:
            self.base.update(values)
            return np.zeros(values.shape[0], dtype=bool), values
        base = self.base.baseline()
        fresh = np.isnan(base)  # a chip whose history was reset: it learns first
        base = np.where(fresh, values, base)
        ref = np.maximum(np.abs(base), self.rule.floor)
        delta = values - base
        if self.rule.direction == "up":
            dev = delta > self.rule.rel * ref
        elif self.rule.direction == "down":
            dev = -delta > self.rule.rel * ref
        else:
            dev = np.abs(delta) > self.rule.rel * ref
        self.since = np.where(dev, np.where(np.isnan(self.since), now, self.since), np.nan)
        # Normal samples update the baseline; a deviating chip keeps its old baseline
        # until the shift has lasted ``adapt_s``.
        adapt = dev & (now - self.since >= self.rule.adapt_s)
        self.base.update(np.where(dev & ~adapt, base, values))
        alerting = dev & (now - self.since >= self.rule.hold_s)
        return alerting, base
