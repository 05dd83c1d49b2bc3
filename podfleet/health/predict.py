"""Failure prediction from precursors, learned from labelled twin runs.

Features per chip, once a minute, vectorized over chips (``PrecursorFeatures``):

* ``ecc_log10m``: log1p of corrected HBM ECC errors in the last 10 minutes;
* ``ecc_spread30m``: share of the last 30 minutes that saw a corrected error. A rising
  corrected-error rate spreads over many minutes; a one-off burst (a particle strike, a
  ``hbm-corrected-burst``) lands in one, so this separates ramps from bursts;
* ``r_rise``: rise of the chip's thermal resistance ``(T - ambient) / P`` over its own
  baseline (mean of its steady minutes 30-120 ago), from steady minutes only (power within 5%
  of the previous three minutes), so job starts and stops do not look like drift;
* ``link_spread30m``: share of the last 30 minutes with link errors on the chip.

``LogisticModel`` maps them to a probability; ``fit`` learns its weights by
iteratively reweighted least squares (Newton's method) with balanced class weights,
from (feature, label) pairs whose labels come from the twin's ground-truth log
(``precursor-start`` .. ``fault``). ``Predictor`` raises an alarm for a chip when the
probability stays above the threshold for ``confirm`` consecutive minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

FEATURES = ("ecc_log10m", "ecc_spread30m", "r_rise", "link_spread30m")
HISTORY_MIN = 150


@dataclass(frozen=True)
class LogisticModel:
    weights: tuple[float, ...]  # bias first, then one per feature
    threshold: float = 0.5
    scale: tuple[float, ...] = (1.0, 1.0, 10.0, 1.0)

    def proba(self, x: np.ndarray) -> np.ndarray:
        z = self.weights[0] + (x * np.asarray(self.scale)) @ np.asarray(self.weights[1:])
        return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))


# Fitted by ``bench/prediction.py`` on training seeds 1-3 (never the evaluation seeds);
# refit with ``.venv/bin/podfleet bench run prediction`` (it prints the weights).
DEFAULT_MODEL = LogisticModel(weights=(-2.5408, -0.4687, 138.6816, 8.5303, -26.1641), threshold=0.999)


def fit(x: np.ndarray, y: np.ndarray, *, scale: tuple[float, ...] = (1.0, 1.0, 10.0, 1.0),
        l2: float = 1e-3, iters: int = 30) -> tuple[float, ...]:
    """Logistic regression by Newton's method with balanced class weights; returns weights."""
    xs = np.hstack([np.ones((x.shape[0], 1)), x * np.asarray(scale)])
    y = y.astype(np.float64)
    pos = max(y.sum(), 1.0)
    neg = max(len(y) - y.sum(), 1.0)
    sw = np.where(y > 0, len(y) / (2 * pos), len(y) / (2 * neg))
    w = np.zeros(xs.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(xs @ w, -40, 40)))
        g = xs.T @ (sw * (p - y)) + l2 * w
        h = (xs * (sw * p * (1 - p))[:, None]).T @ xs + l2 * np.eye(xs.shape[1])
        step = np.linalg.solve(h, g)
        w -= step
        if np.abs(step).max() < 1e-6:
            break
    return tuple(float(v) for v in w)


class PrecursorFeatures:
    """Per-minute history of the raw signals, and the feature matrix over chips."""

    def __init__(self, n: int, ambient_c: float = 35.0) -> None:
        self.n = n
        self.ambient_c = ambient_c
        h = HISTORY_MIN
        self.ecc = np.zeros((h, n))  # corrected errors counted in each minute
        self.link = np.zeros((h, n))
        self.r = np.full((h, n), np.nan)  # mean thermal resistance of steady minutes
        self.p = np.full((h, n), np.nan)  # mean power of each minute
        self.minutes = 0
        self._acc_r = np.zeros(n)
        self._acc_p = np.zeros(n)
        self._acc_k = 0
        self._prev_ecc: np.ndarray | None = None
        self._prev_link: np.ndarray | None = None
        self._acc_ecc = np.zeros(n)
        self._acc_link = np.zeros(n)

    def reset(self, mask: np.ndarray) -> None:
        """A repaired or replaced chip starts with no history."""
        if mask.any():
            self.ecc[:, mask] = 0
            self.link[:, mask] = 0
            self.r[:, mask] = np.nan
            self.p[:, mask] = np.nan

    def sample(self, metrics: Mapping[str, np.ndarray]) -> None:
        """One telemetry sample (any rate); folded into the current minute."""
        temp = np.asarray(metrics["temperature_c"], np.float64)
        power = np.maximum(np.asarray(metrics["power_w"], np.float64), 1.0)
        self._acc_r += (temp - self.ambient_c) / power
        self._acc_p += power
        self._acc_k += 1
        ecc = np.asarray(metrics["mem_ecc_corrected"], np.float64)
        link = np.asarray(metrics["link_errors"], np.float64)
        if self._prev_ecc is not None:
            self._acc_ecc += np.maximum(ecc - self._prev_ecc, 0)
            self._acc_link += np.maximum(link - self._prev_link, 0)  # type: ignore[operator]
        self._prev_ecc, self._prev_link = ecc, link

    def close_minute(self) -> None:
        """End the current minute: shift the history by one row."""
        k = max(self._acc_k, 1)
        for a in (self.ecc, self.link, self.r, self.p):
            a[:-1] = a[1:]
        self.ecc[-1] = self._acc_ecc
        self.link[-1] = self._acc_link
        p = self._acc_p / k
        self.p[-1] = p
        prev = self.p[-4:-1]
        # NaN (a reset chip's history) compares False: not steady.
        steady = np.all(np.abs(prev - p) <= 0.05 * p, axis=0) if self.minutes >= 3 else np.zeros(self.n, bool)
        self.r[-1] = np.where(steady & (self._acc_k > 0), self._acc_r / k, np.nan)
        self.minutes += 1
        self._acc_r[:] = 0
        self._acc_p[:] = 0
        self._acc_ecc[:] = 0
        self._acc_link[:] = 0
        self._acc_k = 0

    def features(self) -> np.ndarray:
        """[n, len(FEATURES)] for the minute just closed."""
        ecc10 = self.ecc[-10:].sum(axis=0)
        spread = (self.ecc[-30:] > 0).mean(axis=0)
        lspread = (self.link[-30:] > 0).mean(axis=0)
        # Means, not medians: transient minutes are already excluded, and a median over
        # [90, n] costs 10x more at fleet scale. Written out (not nanmean) so empty
        # columns raise no warning: warning filters are not thread-safe.
        now_r, now_k = _sum_count(self.r[-5:])
        base_r, base_k = _sum_count(self.r[-120:-30])
        # Needs enough steady history on both sides; otherwise no thermal evidence.
        have = (base_k >= 20) & (now_k >= 2)
        ratio = (now_r / np.maximum(now_k, 1)) / np.where(have, base_r / np.maximum(base_k, 1), 1.0)
        rise = np.where(have, ratio - 1.0, 0.0)
        rise = np.nan_to_num(np.clip(rise, -1.0, 2.0))
        return np.stack([np.log1p(ecc10), spread, rise, lspread], axis=1)


def _sum_count(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = ~np.isnan(a)
    return np.where(ok, a, 0.0).sum(axis=0), ok.sum(axis=0)


@dataclass
class Alarm:
    chip: int
    t: float
    probability: float
    features: dict[str, float] = field(default_factory=dict)


class Predictor:
    """Feeds ``PrecursorFeatures`` from telemetry and raises alarms from a model."""

    def __init__(self, n: int, model: LogisticModel = DEFAULT_MODEL, *, ambient_c: float = 35.0,
                 confirm: int = 2, minute_s: float = 60.0) -> None:
        self.feat = PrecursorFeatures(n, ambient_c)
        self.model = model
        self.confirm = confirm
        self.minute_s = minute_s
        self._minute_end: float | None = None
        self._streak = np.zeros(n, np.int64)
        self.alarmed = np.zeros(n, bool)  # an alarm is open for this chip
        self.last_proba = np.zeros(n)
        self.last_x = np.zeros((n, len(FEATURES)))

    def reset(self, mask: np.ndarray) -> None:
        self.feat.reset(mask)
        self._streak[mask] = 0
        self.alarmed[mask] = False

    def observe(self, now: float, metrics: Mapping[str, np.ndarray], usable: np.ndarray | None = None) -> list[Alarm]:
        """Feed one sample; at each minute boundary evaluate and return new alarms.
        ``usable``: chips that run work; the others (failed, isolated) have nothing left
        to predict and their history restarts."""
        if self._minute_end is None:
            self._minute_end = now + self.minute_s
        self.feat.sample(metrics)
        if now < self._minute_end:
            return []
        self._minute_end += self.minute_s
        self.feat.close_minute()
        if usable is not None and not usable.all():
            self.reset(~np.asarray(usable, bool))
        x = self.feat.features()
        p = self.model.proba(x)
        self.last_proba, self.last_x = p, x
        hot = p >= self.model.threshold
        self._streak = np.where(hot, self._streak + 1, 0)
        new = (self._streak >= self.confirm) & ~self.alarmed
        self.alarmed |= new
        return [Alarm(int(c), now, float(p[c]), dict(zip(FEATURES, map(float, x[c]), strict=True)))
                for c in np.flatnonzero(new).tolist()]
