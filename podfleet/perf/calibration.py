"""Calibrating the A100 efficiency factors on the validation rows.

One objective over all rows, no row treated apart: the mean squared log error of
predicted vs measured step time (log, so a 10% miss on a 1 s row weighs as much as on
a 100 s row). ``matmul`` (fraction of peak FLOP/s) and ``link`` (fraction of link/NIC
bandwidth) are searched on a grid; ``hbm`` stays at its STREAM-like value. The result
is stored in ``efficiency.A100_FIT``; a test re-runs this search and checks it agrees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from podfleet.hardware.catalog import get_topology
from podfleet.perf.collectives import all_reduce_s, group_levels
from podfleet.perf.efficiency import A100_FIT, Efficiency
from podfleet.perf.validation import ROWS, Row, predict

MATMUL_GRID = tuple(round(0.50 + 0.01 * i, 2) for i in range(41))  # 0.50 .. 0.90
LINK_GRID = tuple(round(0.40 + 0.05 * i, 2) for i in range(13))  # 0.40 .. 1.00


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
