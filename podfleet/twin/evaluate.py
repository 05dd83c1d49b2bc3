"""Train and measure failure prediction on twin runs (labels from ground truth).

``run_seed`` runs one twin fleet in virtual time with faults at a scaled rate, feeds a
``Predictor`` from telemetry (all it sees), and collects per-minute features with
labels taken from the twin's ground-truth log (``precursor-start`` .. ``fault``), the
alarms raised and the failures that happened. ``fit_model`` learns weights from
training seeds; ``score`` measures recall and false alarms on other seeds.

Chip load: every chip runs at a load drawn per chip (half busy, half light), and every
hour a few chips change load (job churn), so thermal features meet real transients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import FabricEvent
from podfleet.fabric.sim import FaultRates, SimFabric
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.faults import CHIP_FAULTS, FaultKind
from podfleet.health.predict import DEFAULT_MODEL, LogisticModel, Predictor, fit

# Chip faults that fail the chip (a corrected-ECC burst only degrades it).
FAILURE_KINDS = CHIP_FAULTS - {FaultKind.HBM_CORRECTED_BURST}
LEAD_MIN_S = 600.0  # "predicted at least 10 minutes ahead"
HORIZON_S = 8 * 3600.0  # an alarm counts as true when its chip fails within this


@dataclass
class SeedRun:
    seed: int
    x: np.ndarray  # sampled features [k, 4]
    y: np.ndarray  # labels [k]
    alarms: list[tuple[int, float, float]]  # chip, t, probability
    failures: list[dict[str, Any]]  # chip, t, kind, precursor
    chip_hours: float
    negative_keep: float = 1.0
    repairs: list[tuple[int, float]] = field(default_factory=list)
    alarm_truth: list[bool] = field(default_factory=list)
    alarm_features: list[dict[str, float]] = field(default_factory=list)


def run_seed(seed: int, *, model: LogisticModel = DEFAULT_MODEL, pods: int = 16, hours: float = 48.0,
             rate_scale: float = 200.0, interval_s: float = 5.0, negative_keep: float = 0.02) -> SeedRun:
    topo = get_topology("trn2-ultraserver" if pods == 1 else f"trn2-ultraserver:{pods}")
    tl = Timeline(seed)
    fab = SimFabric(topo, tl, fault_rates=FaultRates().scaled(rate_scale), telemetry_interval_s=interval_s,
                    auto_repair_s=2 * 3600.0)
    n = fab.n_chips
    rng = np.random.default_rng(seed + 10_000)  # the harness's own draws, not the twin's
    t = fab.telemetry
    t.load[:] = np.where(rng.random(n) < 0.5, 0.76, 0.2)
    t.comm_load[:] = 0.2
    t.dirty = True
    pred = Predictor(n, model)
    active = np.zeros(n, bool)  # ground truth: a precursor is running on the chip
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    alarms: list[tuple[int, float, float]] = []
    failures: list[dict[str, Any]] = []
    repairs: list[tuple[int, float]] = []
    alarm_truth: list[bool] = []  # ground truth: a precursor was running when the alarm rose
    alarm_features: list[dict[str, float]] = []

    def truth(rec: dict[str, Any]) -> None:
        if rec["kind"] == "precursor-start":
            active[rec["chip"]] = True
        elif rec["kind"] == "fault" and rec.get("chip") is not None:
            if rec.get("precursor") or rec.get("averted"):
                active[rec["chip"]] = False
            if rec["fault"] in FAILURE_KINDS and not rec.get("averted"):
                failures.append({"chip": rec["chip"], "t": rec["t"], "kind": rec["fault"],
                                 "precursor": bool(rec.get("precursor"))})

    tl.log.subscribe(truth)

    def on_event(ev: FabricEvent) -> None:
        # What a control plane sees: a chip back from isolation was repaired or replaced.
        if ev.kind == "chip-healthy" and ev.detail.get("prev") == "isolated" and ev.chip is not None:
            mask = np.zeros(n, bool)
            mask[ev.chip] = True
            pred.reset(mask)
            repairs.append((ev.chip, ev.t))

    fab.subscribe(on_event)

    def sample() -> None:
        minute = pred.feat.minutes
        for a in pred.observe(tl.now, fab.chip_metrics(), fab.usable_mask()):
            alarms.append((a.chip, a.t, a.probability))
            alarm_truth.append(bool(active[a.chip]))
            alarm_features.append(a.features)
        if pred.feat.minutes != minute and pred.feat.minutes > 30:
            x = pred.last_x
            keep = active | (rng.random(n) < negative_keep)
            xs.append(x[keep])
            ys.append(active[keep].copy())

    def churn() -> None:
        k = max(1, n // 64)
        idx = rng.choice(n, k, replace=False)
        t.load[idx] = np.where(t.load[idx] > 0.5, 0.2, 0.76)
        t.dirty = True

    tl.every(interval_s, sample)
    tl.every(3600.0, churn, start_delay=1800.0)
    tl.run(until=hours * 3600.0)
    return SeedRun(seed, np.concatenate(xs) if xs else np.zeros((0, 4)),
                   np.concatenate(ys) if ys else np.zeros(0, bool), alarms, failures, n * hours,
                   negative_keep, repairs, alarm_truth, alarm_features)


def fit_model(runs: list[SeedRun], *, target_false_alarm: float = 0.03) -> LogisticModel:
    """Weights from the runs' labelled minutes; threshold: the lowest whose alarms on the
    training runs keep the false-alarm share under ``target_false_alarm``."""
    x = np.concatenate([r.x for r in runs])
    y = np.concatenate([r.y for r in runs])
    # Negatives were subsampled: each kept one stands for 1/keep minutes.
    wneg = np.concatenate([np.where(r.y, 1.0, 1.0 / r.negative_keep) for r in runs])
    w = fit(x, y)
    best = LogisticModel(w, 0.999)
    for thr in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999):
        m = LogisticModel(w, thr)
        hot = m.proba(x) >= thr
        fp = float((wneg * (hot & ~y)).sum())
        tp = float((hot & y).sum())
        # Minute-level precision as the proxy (alarm-level needs a rerun per threshold).
        if tp and fp / (fp + tp) <= target_false_alarm:
            best = m
            break
    return best


def score(runs: list[SeedRun]) -> dict[str, Any]:
    """Recall (precursor-bearing and all failures), false-alarm share and lead times."""
    leads: list[float] = []
    pre_total = pre_hit = all_hit = 0
    total = 0
    true_alarms = false_alarms = strict_false = 0
    for r in runs:
        by_chip: dict[int, list[tuple[float, float]]] = {}
        for chip, t, p in r.alarms:
            by_chip.setdefault(chip, []).append((t, p))
        fails_by_chip: dict[int, list[float]] = {}
        for f in r.failures:
            fails_by_chip.setdefault(f["chip"], []).append(f["t"])
        for f in r.failures:
            total += 1
            pre_total += f["precursor"]
            ok = [t for t, _ in by_chip.get(f["chip"], ()) if f["t"] - HORIZON_S <= t <= f["t"] - LEAD_MIN_S]
            if ok:
                all_hit += 1
                pre_hit += f["precursor"]
                leads.append(f["t"] - min(ok))
        truth = r.alarm_truth or [False] * len(r.alarms)
        for (chip, t, _), running in zip(r.alarms, truth, strict=True):
            followed = any(t <= ft <= t + HORIZON_S for ft in fails_by_chip.get(chip, ()))
            strict_false += not followed
            # True: the chip failed soon after, or (ground truth) its precursor was running
            # (a failure was due; it may land after the run ends or be pre-empted).
            if followed or running:
                true_alarms += 1
            else:
                false_alarms += 1
    alarms = true_alarms + false_alarms
    chip_hours = sum(r.chip_hours for r in runs)
    return {
        "failures": total,
        "failures_with_precursor": pre_total,
        "precursor_share": round(pre_total / total, 4) if total else 0.0,
        "recall": round(pre_hit / pre_total, 4) if pre_total else 0.0,
        "recall_all_failures": round(all_hit / total, 4) if total else 0.0,
        "alarms": alarms,
        "false_alarms": false_alarms,
        "false_alarm_ratio": round(false_alarms / alarms, 4) if alarms else 0.0,
        "false_alarm_ratio_strict": round(strict_false / alarms, 4) if alarms else 0.0,
        "false_alarms_per_1000_chip_hours": round(1000 * false_alarms / chip_hours, 4) if chip_hours else 0.0,
        "median_lead_s": round(float(np.median(leads)), 1) if leads else 0.0,
        "p10_lead_s": round(float(np.percentile(leads, 10)), 1) if leads else 0.0,
    }
