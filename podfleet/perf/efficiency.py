"""Achievable-efficiency factors and software-stack terms per chip type: the fraction of
a datasheet peak that real kernels reach, and what the chip's training stack adds. The
fitted numbers live in ``perf/fitted.py`` (data, with the command that produced them);
docs/performance-model.md says how each was obtained:

- ``a100``: ``matmul`` and ``link`` fitted jointly by ``perf.calibration.calibrate`` on
  the twelve rows of reference/validation.md only. ``hbm`` is the fraction of HBM
  bandwidth a streaming kernel reaches (STREAM-like, ~0.8) and stays fixed.
- ``trn1``: ``matmul`` and ``microbatch_s`` fitted by ``calibration.calibrate_trn`` on
  the three rows of reference/validation_trn.md only; ``link`` is the Neuron collective
  measurement below (the one Neuron runtime figure published), not the A100 fit.
- ``trn2``: ``link`` from that nccom-test measurement on a trn2 instance (16 ranks,
  512 MiB all-reduce, busbw about 104 GiB/s; our torus model gives 472.5 GiB/s at full
  link speed: 0.220). No Trn2 training run is published, so ``matmul`` and
  ``microbatch_s`` carry over the trn1 fit (same compiler, runtime and NxD stack): an
  assumption, named as one.
- H100/H200 carry over the A100 fit (same caveat).

Trainium's own terms (``StackTerms``): a NeuronCore is a rank of its own (the Neuron
tables count TP in cores, reference/validation_trn.md), so a tensor-parallel group of t
chips is a ring of t*c ranks (c = 2 NeuronCores on trn1, 4 logical cores on trn2 at
LNC=2, reference/trn2.md); and each micro-batch is a compiled graph the runtime
launches and synchronises per pipeline stage (lazy tensors executed at ``mark_step``,
Neuron PyTorch programming guide), a fixed cost per micro-batch and model chunk. How a
run reduces its gradients is the run's, not the chip's: the trn1 rows ran NxD/NeMo's
ZeRO-1, which reduce-scatters inside the optimizer step after the accumulation loop
(``validation_trn.predict`` says so, as ``validation.predict`` does for Megatron's
rows); the planner and the twin assume an overlapping reduction on every chip.
"""

from __future__ import annotations

from dataclasses import dataclass

from podfleet.perf import fitted


@dataclass(frozen=True)
class Efficiency:
    matmul: float  # of dense peak FLOP/s, for large GEMMs
    hbm: float  # of HBM bandwidth, for memory-bound kernels
    link: float  # of link bandwidth (NVLink, NeuronLink), for collectives and point-to-point
    # Fixed runtime cost per micro-batch and model chunk on a pipeline stage (graph launch
    # and host synchronisation); 0 where kernels are queued asynchronously (CUDA).
    microbatch_s: float = 0.0
    # Ranks per chip in a tensor-parallel collective (NeuronCores; 1 on GPUs).
    core_ranks: int = 1
    # Of the network tier's bandwidth (IB, EFA) where it differs from ``link``; None: same.
    net: float | None = None


def _eff(name: str, **terms: object) -> Efficiency:
    f = fitted.FITS[name]
    return Efficiency(matmul=float(f["matmul"]), hbm=float(f["hbm"]), link=float(f["link"]),
                      microbatch_s=float(f.get("microbatch_s", 0.0)), **terms)  # type: ignore[arg-type]


# Result of ``calibration.calibrate()`` on reference/validation.md (a test re-derives it).
A100_FIT = _eff("a100")
# 104 GiB/s measured / 472.5 GiB/s modelled: ``calibration.trn2_link_from_nccom()``.
TRN2_NCCOM_LINK = 0.220
# Result of ``calibration.calibrate_trn()`` on reference/validation_trn.md (re-derived in a test).
TRN1_FIT = _eff("trn1", core_ranks=2)
# NeuronLink measured on trn2 (nccom-test); EFA, never measured, at the trn1 (= A100) figure.
TRN2 = Efficiency(matmul=TRN1_FIT.matmul, hbm=TRN1_FIT.hbm, link=TRN2_NCCOM_LINK,
                  microbatch_s=TRN1_FIT.microbatch_s, core_ranks=4,
                  net=TRN1_FIT.link)

EFFICIENCY: dict[str, Efficiency] = {
    "a100": A100_FIT,
    "h100": A100_FIT,
    "h200": A100_FIT,
    "trn1": TRN1_FIT,
    "trn2": TRN2,
}


def efficiency_for(chip_type: str) -> Efficiency:
    return EFFICIENCY.get(chip_type, A100_FIT)
