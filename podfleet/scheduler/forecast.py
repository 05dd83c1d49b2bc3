"""Demand forecasting per job: Holt's linear exponential smoothing (level + trend).

For a series x_t sampled every ``dt_s`` (a job's power draw per chip, or utilization)::

    level_t = alpha * x_t + (1 - alpha) * (level_{t-1} + trend_{t-1})
    trend_t = beta * (level_t - level_{t-1}) + (1 - beta) * trend_{t-1}
    forecast(h) = level_t + h * trend_t          (h in samples = horizon_s / dt_s)

initialised with level_1 = x_1 and trend_1 = x_1 - x_0 (one sample: level x_0, trend 0). ``alpha``
(default 0.5) weighs recent samples; ``beta`` (0.2) how fast the trend adapts. Holt
captures ramps (a job warming up, a growing batch) that a moving average lags behind,
and is a few multiplies per sample, vectorized over all jobs. The scheduler turns the
per-job forecasts into per-chip ``forecast_power_w`` so ``thermal_headroom`` places new
jobs where headroom will be, not only where it is now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from podfleet.errors import InvalidInputError


@dataclass(frozen=True)
class HoltParams:
    alpha: float = 0.5
    beta: float = 0.2

    def __post_init__(self) -> None:
        for name in ("alpha", "beta"):
            v = getattr(self, name)
            if not 0.0 < v <= 1.0:
                raise InvalidInputError(f"{name} must be in (0, 1], got {v}", field=name)


def holt(series: Sequence[float], params: HoltParams = HoltParams()) -> tuple[float, float]:
    """(level, trend) after smoothing ``series`` (the pure rule, for one series)."""
    xs = [float(x) for x in series]
    if not xs:
        raise InvalidInputError("holt needs at least one sample", field="series")
    level, trend = xs[0], 0.0
    for i, x in enumerate(xs[1:], start=1):
        if i == 1:
            level, trend = x, x - xs[0]
            continue
        prev = level
        level = params.alpha * x + (1 - params.alpha) * (level + trend)
        trend = params.beta * (level - prev) + (1 - params.beta) * trend
    return level, trend


class DemandForecaster:
    """Holt state for many jobs at once (arrays), keyed by job id."""

    def __init__(self, params: HoltParams = HoltParams(), dt_s: float = 1.0) -> None:
        if dt_s <= 0:
            raise InvalidInputError("dt_s must be positive", field="dt_s")
        self.params = params
        self.dt_s = dt_s
        self._row: dict[str, int] = {}
        self.level = np.zeros(0)
        self.trend = np.zeros(0)
        self.first = np.zeros(0)
        self.count = np.zeros(0, dtype=np.int64)

    def observe(self, samples: Mapping[str, float]) -> None:
        """One sample per job (same instant). New jobs start a series."""
        for j in samples:
            if j not in self._row:
                self._row[j] = len(self._row)
                self.level = np.append(self.level, 0.0)
                self.trend = np.append(self.trend, 0.0)
                self.first = np.append(self.first, 0.0)
                self.count = np.append(self.count, 0)
        rows = np.array([self._row[j] for j in samples], dtype=np.int64)
        x = np.array(list(samples.values()), dtype=float)
        a, b = self.params.alpha, self.params.beta
        n = self.count[rows]
        prev = self.level[rows]
        level = np.where(n <= 1, x, a * x + (1 - a) * (prev + self.trend[rows]))
        trend = np.where(
            n == 0, 0.0, np.where(n == 1, x - self.first[rows], b * (level - prev) + (1 - b) * self.trend[rows])
        )
        self.first[rows] = np.where(n == 0, x, self.first[rows])
        self.level[rows], self.trend[rows] = level, trend
        self.count[rows] = n + 1

    def forecast(self, job_id: str, horizon_s: float) -> float:
        r = self._row.get(job_id)
        if r is None:
            return 0.0
        return float(self.level[r] + (horizon_s / self.dt_s) * self.trend[r])

    def forget(self, job_id: str) -> None:
        r = self._row.get(job_id)
        if r is not None:
            self.level[r] = self.trend[r] = 0.0
            self.count[r] = 0


def chip_forecast(
    allocations: Mapping[str, Sequence[int]], forecaster: DemandForecaster, n_chips: int, horizon_s: float,
    idle_w: float = 0.0,
) -> np.ndarray:
    """Per-chip predicted power: each job's per-chip forecast on its chips, ``idle_w`` elsewhere."""
    out = np.full(n_chips, idle_w, dtype=float)
    for job, chips in allocations.items():
        out[list(chips)] = max(forecaster.forecast(job, horizon_s), idle_w)
    return out
