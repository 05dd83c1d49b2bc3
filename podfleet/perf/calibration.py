"""Calibrating the efficiency factors: A100 on reference/validation.md, Trainium on
reference/validation_trn.md, each on its own rows only.

One objective over all rows, no row treated apart: the mean squared log error of
predicted vs measured step time (log, so a 10% miss on a 1 s row weighs as much as on
a 100 s row). ``matmul`` (fraction of peak FLOP/s) and ``link`` (fraction of link/NIC
bandwidth) are searched on a grid; ``hbm`` stays at its STREAM-like value. The result
is stored in ``efficiency.A100_FIT``; a test re-runs this search and checks it agrees.

Out of sample: :func:`leave_one_out` predicts every row with efficiencies refitted by
the same search on the other eleven, and scores the one-parameter baseline (step time
= hardware FLOPs per step / (chips x peak x one efficiency), that efficiency fitted by
the same objective) the same way. The headline accuracy is the leave-one-out one.

Trainium (:func:`calibrate_trn`): ``matmul`` and the per-micro-batch stack cost
``microbatch_s`` are searched on a grid by the same objective over the three trn1 rows;
``link`` stays at the A100 fit's (no trn1 collective measurement is published; the
three rows all run TP over 4 chips, so they cannot tell link from matmul apart) and
``hbm`` at 0.80. Its leave-one-out
(:func:`trn_leave_one_out`) fits on two rows and predicts the third, beside the same
baseline. The out-of-sample rows (``validation.OOS_ROWS``, ``validation_trn.OOS_ROWS``)
are predicted with the stored fits and never enter a fit.

``python -m podfleet.perf.calibration`` prints the fits as JSON (what ``perf/fitted.py``
stores).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from podfleet.hardware.catalog import get_topology
from podfleet.hardware.specs import get_chip
from podfleet.perf import validation_trn as vt
from podfleet.perf.collectives import all_reduce_s, group_levels
from podfleet.perf.efficiency import A100_FIT, TRN1_FIT, Efficiency
from podfleet.perf.flops import hardware_flops_per_step
from podfleet.perf.models import get_model
from podfleet.perf.validation import OOS_ROWS, ROWS, Row, error_figures, predict

MATMUL_GRID = tuple(round(0.50 + 0.01 * i, 2) for i in range(41))  # 0.50 .. 0.90
LINK_GRID = tuple(round(0.40 + 0.05 * i, 2) for i in range(13))  # 0.40 .. 1.00
# The baseline's one efficiency is a whole-step figure (about the HFU), below the
# matmul grid: its own grid, same step.
BASELINE_GRID = tuple(round(0.20 + 0.01 * i, 2) for i in range(71))  # 0.20 .. 0.90


@dataclass(frozen=True)
class Fit:
    eff: Efficiency
    msle: float


def msle(eff: Efficiency, rows: Sequence[Row] = ROWS) -> float:
    errs = [math.log(predict(r, eff)[1].step_time_s / r.measured_s) ** 2 for r in rows]
    return sum(errs) / len(errs)


def calibrate(
    rows: Sequence[Row] = ROWS,
    matmul_grid: Sequence[float] = MATMUL_GRID,
    link_grid: Sequence[float] = LINK_GRID,
    hbm: float = A100_FIT.hbm,
) -> Fit:
    """Grid search: link on its grid, and for each link value matmul on its grid."""
    best: Fit | None = None
    for link in link_grid:
        for mm in matmul_grid:
            eff = Efficiency(matmul=mm, hbm=hbm, link=link)
            fit = Fit(eff, msle(eff, rows))
            if best is None or fit.msle < best.msle:
                best = fit
    assert best is not None
    return best


def baseline_step_s(row: Row, efficiency: float) -> float:
    """The one-parameter baseline: hardware FLOPs per step over the chips' fitted FLOP/s."""
    flops = hardware_flops_per_step(get_model(row.model), row.global_batch, row.recompute)
    return flops / (row.gpus * get_chip("a100").peak_flops("fp16") * efficiency)


def calibrate_baseline(rows: Sequence[Row] = ROWS, grid: Sequence[float] = BASELINE_GRID) -> float:
    """The baseline's efficiency: the grid value with the least mean squared log error."""
    def msle_of(e: float) -> float:
        return sum(math.log(baseline_step_s(r, e) / r.measured_s) ** 2 for r in rows) / len(rows)
    return min(grid, key=msle_of)


class LooRow(TypedDict):
    """One validation row scored in sample and leave-one-out, model and baseline."""

    row: str
    measured_s: float
    in_sample_s: float
    in_sample_err: float  # (predicted - measured) / measured, efficiencies fitted on all rows
    loo_s: float
    loo_err: float  # the same with efficiencies fitted without this row
    loo_matmul: float
    loo_link: float
    baseline_loo_s: float
    baseline_loo_err: float
    baseline_loo_eff: float


def _err(pred: float, meas: float) -> float:
    return (pred - meas) / meas


def leave_one_out(rows: Sequence[Row] = ROWS, stored: Efficiency = A100_FIT) -> list[LooRow]:
    """Every row predicted by a fit on the others (model: :func:`calibrate`; baseline:
    :func:`calibrate_baseline`), beside its in-sample prediction with ``stored``."""
    out: list[LooRow] = []
    for i, row in enumerate(rows):
        rest = [*rows[:i], *rows[i + 1:]]
        eff = calibrate(rest).eff
        base_eff = calibrate_baseline(rest)
        ins = predict(row, stored)[1].step_time_s
        loo = predict(row, eff)[1].step_time_s
        base = baseline_step_s(row, base_eff)
        out.append({
            "row": row.name,
            "measured_s": row.measured_s,
            "in_sample_s": round(ins, 3),
            "in_sample_err": round(_err(ins, row.measured_s), 4),
            "loo_s": round(loo, 3),
            "loo_err": round(_err(loo, row.measured_s), 4),
            "loo_matmul": eff.matmul,
            "loo_link": eff.link,
            "baseline_loo_s": round(base, 3),
            "baseline_loo_err": round(_err(base, row.measured_s), 4),
            "baseline_loo_eff": base_eff,
        })
    return out


def loo_summary(rows: Sequence[LooRow]) -> dict[str, float]:
    """The named out-of-sample figures (and in-sample ones beside them) of ``rows``."""
    loo = error_figures([r["loo_err"] for r in rows])
    ins = error_figures([r["in_sample_err"] for r in rows])
    base = error_figures([r["baseline_loo_err"] for r in rows])
    return {
        "loo_median_abs_err": loo["median_abs_err"],
        "loo_max_abs_err": loo["max_abs_err"],
        "loo_mean_signed_err": loo["mean_signed_err"],
        "in_sample_median_abs_err": ins["median_abs_err"],
        "in_sample_max_abs_err": ins["max_abs_err"],
        "in_sample_mean_signed_err": ins["mean_signed_err"],
        "baseline_loo_median_abs_err": base["median_abs_err"],
        "baseline_loo_max_abs_err": base["max_abs_err"],
        "baseline_loo_mean_signed_err": base["mean_signed_err"],
        "loo_too_fast": loo["too_fast"],
        "baseline_loo_too_fast": base["too_fast"],
        "rows": loo["rows"],
    }




# nccom-test on one trn2 instance (reference/trn2.md): 16 ranks, 512 MiB all-reduce.
NCCOM_RANKS = 16
NCCOM_BYTES = 512 * 2**20
NCCOM_BUSBW_GIB_S = 104.0


def trn2_link_from_nccom() -> float:
    """Trn2 link efficiency: measured busbw over the busbw our torus model predicts."""
    levels = group_levels(get_topology("trn2-node"), range(NCCOM_RANKS))
    t = all_reduce_s(levels, NCCOM_BYTES, 1.0)
    busbw = NCCOM_BYTES / t * 2 * (NCCOM_RANKS - 1) / NCCOM_RANKS / 2**30
    return NCCOM_BUSBW_GIB_S / busbw


# --- Trainium --------------------------------------------------------------------------
TRN_MATMUL_GRID = tuple(round(0.30 + 0.01 * i, 2) for i in range(51))  # 0.30 .. 0.80
MICROBATCH_GRID = tuple(round(0.001 * i, 3) for i in range(61))  # 0 .. 60 ms
TRN_HBM = 0.80


def _trn_eff(matmul: float, microbatch_s: float) -> Efficiency:
    return Efficiency(matmul=matmul, hbm=TRN_HBM, link=TRN1_FIT.link, microbatch_s=microbatch_s,
                      core_ranks=TRN1_FIT.core_ranks,
                      net=TRN1_FIT.net)


def trn_msle(eff: Efficiency, rows: Sequence[vt.TrnRow] = vt.ROWS) -> float:
    errs = [math.log(vt.predict(r, eff)[1].step_time_s / r.measured_s) ** 2 for r in rows]
    return sum(errs) / len(errs)


def calibrate_trn(
    rows: Sequence[vt.TrnRow] = vt.ROWS,
    matmul_grid: Sequence[float] = TRN_MATMUL_GRID,
    microbatch_grid: Sequence[float] = MICROBATCH_GRID,
) -> Fit:
    """Grid search of (matmul, microbatch_s) on the trn1 rows; ties go to the smaller."""
    best: Fit | None = None
    for mb in microbatch_grid:
        for mm in matmul_grid:
            eff = _trn_eff(mm, mb)
            fit = Fit(eff, trn_msle(eff, rows))
            if best is None or fit.msle < best.msle - 1e-15:
                best = fit
    assert best is not None
    return best


def calibrate_trn_baseline(rows: Sequence[vt.TrnRow] = vt.ROWS, grid: Sequence[float] = BASELINE_GRID) -> float:
    def msle_of(e: float) -> float:
        return sum(math.log(vt.baseline_step_s(r, e) / r.measured_s) ** 2 for r in rows) / len(rows)
    return min(grid, key=msle_of)


def trn_leave_one_out(rows: Sequence[vt.TrnRow] = vt.ROWS, stored: Efficiency = TRN1_FIT) -> list[LooRow]:
    """Every trn1 row predicted by a fit on the other rows, beside its in-sample
    prediction with ``stored``; ``loo_link`` holds the fold's ``microbatch_s``."""
    out: list[LooRow] = []
    for i, row in enumerate(rows):
        rest = [*rows[:i], *rows[i + 1:]]
        eff = calibrate_trn(rest).eff
        base_eff = calibrate_trn_baseline(rest)
        ins = vt.predict(row, stored)[1].step_time_s
        loo = vt.predict(row, eff)[1].step_time_s
        base = vt.baseline_step_s(row, base_eff)
        meas = row.measured_s
        out.append({
            "row": row.name, "measured_s": round(meas, 3),
            "in_sample_s": round(ins, 3), "in_sample_err": round(_err(ins, meas), 4),
            "loo_s": round(loo, 3), "loo_err": round(_err(loo, meas), 4),
            "loo_matmul": eff.matmul, "loo_link": eff.microbatch_s,
            "baseline_loo_s": round(base, 3), "baseline_loo_err": round(_err(base, meas), 4),
            "baseline_loo_eff": base_eff,
        })
    return out


class OosRow(TypedDict):
    """One out-of-sample row: predicted with the stored fit, beside the fitted baseline."""

    row: str
    measured_s: float
    predicted_s: float
    err: float
    baseline_s: float
    baseline_err: float
    source: str


def a100_out_of_sample(rows: Sequence[Row] = OOS_ROWS) -> list[OosRow]:
    e = calibrate_baseline()
    out: list[OosRow] = []
    for r in rows:
        pred, base = predict(r)[1].step_time_s, baseline_step_s(r, e)
        out.append({"row": r.name, "measured_s": r.measured_s, "predicted_s": round(pred, 3),
                    "err": round(_err(pred, r.measured_s), 4), "baseline_s": round(base, 3),
                    "baseline_err": round(_err(base, r.measured_s), 4), "source": r.source})
    return out


def trn_out_of_sample(rows: Sequence[vt.TrnRow] = vt.OOS_ROWS) -> list[OosRow]:
    e = calibrate_trn_baseline()
    out: list[OosRow] = []
    for r in rows:
        pred, base, meas = vt.predict(r)[1].step_time_s, vt.baseline_step_s(r, e), r.measured_s
        out.append({"row": r.name, "measured_s": round(meas, 3), "predicted_s": round(pred, 3),
                    "err": round(_err(pred, meas), 4), "baseline_s": round(base, 3),
                    "baseline_err": round(_err(base, meas), 4), "source": r.source})
    return out


def oos_summary(rows: Sequence[OosRow]) -> dict[str, float]:
    model = error_figures([r["err"] for r in rows])
    base = error_figures([r["baseline_err"] for r in rows])
    return {**model, **{f"baseline_{k}": v for k, v in base.items() if k != "rows"}}


def fits() -> dict[str, dict[str, float]]:
    """The fits ``perf/fitted.py`` stores, computed afresh."""
    a, t = calibrate().eff, calibrate_trn().eff
    return {
        "a100": {"matmul": a.matmul, "hbm": a.hbm, "link": a.link},
        "trn1": {"matmul": t.matmul, "hbm": t.hbm, "link": t.link, "microbatch_s": t.microbatch_s},
    }


if __name__ == "__main__":
    import json

    print(json.dumps(fits(), indent=2))
