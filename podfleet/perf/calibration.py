"""Calibrating the A100 efficiency factors on the validation rows.

One objective over all rows, no row treated apart: the mean squared log error of
predicted vs measured step time (log, so a 10% miss on a 1 s row weighs as much as on
a 100 s row). ``matmul`` (fraction of peak FLOP/s) and ``link`` (fraction of link/NIC
bandwidth) are searched on a grid; ``hbm`` stays at its STREAM-like value. The result
is stored in ``efficiency.A100_FIT``; a test re-runs this search and checks it agrees.

Out of sample: :func:`leave_one_out` predicts every row with efficiencies refitted by
the same search on the other eleven, and scores the one-parameter baseline (step time
= hardware FLOPs per step / (chips x peak x one efficiency), that efficiency fitted by
the same objective) the same way. The headline accuracy is the leave-one-out one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from podfleet.hardware.catalog import get_topology
from podfleet.hardware.specs import get_chip
from podfleet.perf.collectives import all_reduce_s, group_levels
from podfleet.perf.efficiency import A100_FIT, Efficiency
from podfleet.perf.flops import hardware_flops_per_step
from podfleet.perf.models import get_model
from podfleet.perf.validation import ROWS, Row, error_figures, predict

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
