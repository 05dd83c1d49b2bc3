"""Achievable-efficiency factors per chip type: the fraction of a datasheet peak that
real kernels reach. They are calibrated, not guessed (docs/performance-model.md):

- ``a100``: ``matmul`` and ``link`` are fitted jointly by ``perf.calibration.calibrate``
  on all twelve rows of reference/validation.md (one grid search minimising the mean
  squared log error of predicted vs measured step time; no row is treated apart).
  ``hbm`` is the fraction of HBM bandwidth a streaming kernel reaches (STREAM-like,
  ~0.8 on A100 and H100) and stays fixed during the fit.
- ``trn2``: ``link`` is calibrated on the one dated collective measurement published
  for Trn2 (nccom-test, 16 ranks on one trn2 instance, 512 MiB all-reduce, busbw
  about 104 GiB/s, reference/trn2.md): our 2D-torus all-reduce model gives its busbw
  at link efficiency 1 (472.5 GiB/s), hence 0.220. No Trn2 training throughput is published,
  so ``matmul`` and ``hbm`` carry over the A100 fit; they are assumptions until a
  measured Trn2 run is added to the validation set.
- other chips carry over the A100 fit (same caveat).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Efficiency:
    matmul: float  # of dense peak FLOP/s, for large GEMMs
    hbm: float  # of HBM bandwidth, for memory-bound kernels
    link: float  # of link / NIC bandwidth, for collectives and point-to-point


# Result of ``calibrate()`` on reference/validation.md (see the test that re-derives it).
A100_FIT = Efficiency(matmul=0.74, hbm=0.80, link=0.60)
# 104 GiB/s measured / 472.5 GiB/s modelled: ``calibration.trn2_link_from_nccom()``.
TRN2_NCCOM_LINK = 0.220

EFFICIENCY: dict[str, Efficiency] = {
    "a100": A100_FIT,
    "h100": A100_FIT,
    "h200": A100_FIT,
    "trn1": A100_FIT,
    "trn2": Efficiency(matmul=A100_FIT.matmul, hbm=A100_FIT.hbm, link=TRN2_NCCOM_LINK),
}


def efficiency_for(chip_type: str) -> Efficiency:
    return EFFICIENCY.get(chip_type, A100_FIT)
