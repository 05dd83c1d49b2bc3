"""Predicted vs measured step time for every published run in reference/validation.md."""

from __future__ import annotations

from podfleet.perf import validation
from podfleet.perf.efficiency import efficiency_for

NAME = "perf-validation"
DESCRIPTION = "Performance model vs published Megatron runs: median_abs_err (goal <= 0.10), max_abs_err (goal <= 0.25)."


def run(quick: bool = False) -> dict[str, object]:
    rows = validation.table()
    summary = validation.summary(rows)
    eff = efficiency_for("a100")
    return {
        "median_abs_err": round(summary["median_abs_err"], 4),
        "max_abs_err": round(summary["max_abs_err"], 4),
        "rows": rows,
        "efficiency_a100": {"matmul": eff.matmul, "hbm": eff.hbm, "link": eff.link},
        "goals": {"median_abs_err": 0.10, "max_abs_err": 0.25},
    }
