"""Predicted vs measured step time for every published run in reference/validation.md,
scored out of sample: each row predicted with efficiencies refitted without it."""

from __future__ import annotations

from podfleet.perf import calibration, validation
from podfleet.perf.efficiency import efficiency_for

NAME = "perf-validation"
DESCRIPTION = (
    "Performance model vs published Megatron runs, leave-one-out: median_abs_err (goal <= 0.05) and "
    "max_abs_err (goal <= 0.15), beside in-sample figures and a one-parameter FLOPs baseline."
)


def run(quick: bool = False) -> dict[str, object]:
    rows = validation.table()
    loo_rows = calibration.leave_one_out()
    figures = {k: round(v, 4) for k, v in calibration.loo_summary(loo_rows).items()}
    eff = efficiency_for("a100")
    return {
        # The headline is out of sample: median/max of the leave-one-out errors.
        "median_abs_err": figures["loo_median_abs_err"],
        "max_abs_err": figures["loo_max_abs_err"],
        **figures,
        "rows": rows,
        "loo_rows": loo_rows,
        "efficiency_a100": {"matmul": eff.matmul, "hbm": eff.hbm, "link": eff.link},
        "baseline_efficiency": calibration.calibrate_baseline(),
        "goals": {"median_abs_err": 0.05, "max_abs_err": 0.15, "beat_baseline": True},
    }
