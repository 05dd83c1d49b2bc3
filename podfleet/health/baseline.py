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


class RollingBaseline:
    """Ring buffer [window, n] of one metric; median baseline once ``min_samples`` exist."""

    def __init__(self, n: int, window: int = 60, min_samples: int = 10) -> None:
        self.buf = np.full((window, n), np.nan, dtype=np.float64)
        self.window = window
        self.min_samples = min_samples
        self._i = 0
        self._count = 0

    def update(self, values: np.ndarray) -> None:
        self.buf[self._i] = values
        self._i = (self._i + 1) % self.window
        self._count = min(self._count + 1, self.window)

    @property
    def ready(self) -> bool:
        return self._count >= self.min_samples

    def baseline(self) -> np.ndarray:
        return np.nanmedian(self.buf[: self._count] if self._count < self.window else self.buf, axis=0)


class DeviationTracker:
    """Per-chip deviation state for one rule: when each chip started deviating."""

    def __init__(self, rule: DeviationRule, n: int, window: int = 60) -> None:
        self.rule = rule
        self.base = RollingBaseline(n, window=window)
        self.since = np.full(n, np.nan)

    def observe(self, values: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Feed one sample. Returns (alerting mask, baseline). Deviating samples are not
        folded into the baseline (until ``adapt_s``), so an anomaly cannot quickly become
        the new normal."""
        values = np.asarray(values, dtype=np.float64)
        if not self.base.ready:
            self.base.update(values)
            return np.zeros(values.shape[0], dtype=bool), values
        base = self.base.baseline()
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
