"""The published training runs of reference/validation.md, and their predictions.

Every row runs on a ``dgx-a100:N`` fleet (N = GPUs / 8) with mixed precision, no
ZeRO (Megatron had no distributed optimizer then). Set 1 fixes the micro-batch and
interleaving; the full-recompute column ran plain tensor parallelism, the selective
column with sequence parallelism. Set 2 ran full recomputation and an interleaved
schedule where PP > 1 without giving the micro-batch or interleaving: like the
planner, we take the fastest micro-batch (a divisor of the per-replica batch, <= 8)
and interleaving (a divisor of the layers per stage) whose memory fits.

Megatron-LM as these runs used it all-reduced data-parallel gradients after the
pipeline flush (its default local DDP, in ``train_step`` after
``forward_backward_func``), not overlapped with the backward: ``predict`` says so
with ``overlap_grad_reduce=False``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from podfleet.hardware.catalog import get_topology
from podfleet.perf.efficiency import Efficiency, efficiency_for
from podfleet.perf.flops import Recompute
from podfleet.perf.models import get_model
from podfleet.perf.plan import Plan
from podfleet.perf.step import StepEstimate, estimate


@dataclass(frozen=True)
class Row:
    name: str
    model: str
    tp: int
    pp: int
    gpus: int
    global_batch: int
    micro_batch: int | None  # None: not published, chosen like the planner does
    interleave: int | None
    recompute: Recompute
    sequence_parallel: bool
    measured_s: float
    source: str


_K = "Korthikanti et al. 2022, Tables 3/5"
_N = "Narayanan et al. 2021, Table 1"
_SEL, _FULL = Recompute.selective, Recompute.full

ROWS: tuple[Row, ...] = (
    Row("22B full", "megatron-22b", 8, 1, 8, 4, 4, 1, _FULL, False, 1.42, _K),
    Row("22B selective+SP", "megatron-22b", 8, 1, 8, 4, 4, 1, _SEL, True, 1.10, _K),
    Row("175B full", "megatron-175b", 8, 8, 64, 64, 1, 3, _FULL, False, 18.13, _K),
    Row("175B selective+SP", "megatron-175b", 8, 8, 64, 64, 1, 3, _SEL, True, 13.75, _K),
    Row("530B full", "megatron-530b", 8, 35, 280, 280, 1, 3, _FULL, False, 49.05, _K),
    Row("530B selective+SP", "megatron-530b", 8, 35, 280, 280, 1, 3, _SEL, True, 37.83, _K),
    Row("1T full", "megatron-1t", 8, 64, 512, 512, 1, 1, _FULL, False, 94.42, _K),
    Row("1T selective+SP", "megatron-1t", 8, 64, 512, 512, 1, 1, _SEL, True, 71.49, _K),
    Row("1.7B", "megatron-1.7b", 1, 1, 32, 512, None, None, _FULL, False, 3.53, _N),
    Row("18.4B", "megatron-18.4b", 8, 1, 256, 1024, None, None, _FULL, False, 9.40, _N),
    Row("145.6B", "megatron-145.6b", 8, 8, 1536, 2304, None, None, _FULL, False, 24.82, _N),
    Row("1008B", "megatron-1008b", 8, 64, 3072, 3072, None, None, _FULL, False, 102.63, _N),
)


def narayanan_step_s(model: str, gpus: int, global_batch: int, tflops_per_gpu: float) -> float:
    """Seconds per iteration from Narayanan et al.'s reported TFLOP/s per GPU (their Eq. 3,
    F = 96*B*s*l*h^2*(1 + s/6h + V/16lh), counting full recomputation), rounded like
    reference/validation.md."""
    m = get_model(model)
    s, h, l_, v = m.seq_len, m.hidden, m.layers, m.vocab
    f = 96 * global_batch * s * l_ * h * h * (1 + s / (6 * h) + v / (16 * l_ * h))
    return round(f / (gpus * tflops_per_gpu * 1e12), 2)


def _oos(name: str, tp: int, pp: int, gpus: int, batch: int, tflops: float) -> Row:
    model = f"megatron-{name.lower()}"
    return Row(name, model, tp, pp, gpus, batch, None, None, _FULL, False,
               narayanan_step_s(model, gpus, batch, tflops), f"{_N} (out of sample)")


# The other rows of Narayanan et al. 2021, Table 1: never fitted on, only predicted.
OOS_ROWS: tuple[Row, ...] = (
    _oos("3.6B", 2, 1, 64, 512, 138),
    _oos("7.5B", 4, 1, 128, 512, 142),
    _oos("39.1B", 8, 2, 512, 1536, 138),
    _oos("76.1B", 8, 4, 1024, 1792, 140),
    _oos("310.1B", 8, 16, 1920, 2160, 155),
    _oos("529.6B", 8, 35, 2520, 2520, 163),
)


def _candidates(row: Row) -> list[Plan]:
    model = get_model(row.model)
    dp = row.gpus // (row.tp * row.pp)
    per_replica = row.global_batch // dp
    mbs = [row.micro_batch] if row.micro_batch else [b for b in range(1, 9) if per_replica % b == 0]
    per_stage = model.layers // row.pp
    if row.interleave:
        vs = [row.interleave]
    elif row.pp == 1:
        vs = [1]
    else:
        vs = [v for v in range(1, per_stage + 1) if per_stage % v == 0]
    out = []
    for b in mbs:
        m = per_replica // b
        for v in vs:
            if v > 1 and m % row.pp:
                continue
            out.append(Plan(row.tp, row.pp, dp, b, m, row.recompute, 0, v, row.sequence_parallel))
    return out


def predict(row: Row, eff: Efficiency | None = None) -> tuple[Plan, StepEstimate]:
    """The predicted step of ``row``: its published plan, or the fastest fitting one."""
    model = get_model(row.model)
    topo = get_topology(f"dgx-a100:{row.gpus // 8}") if row.gpus >= 8 else get_topology("dgx-a100")
    eff = eff or efficiency_for("a100")
    best: tuple[Plan, StepEstimate] | None = None
    for plan in _candidates(row):
        est = estimate(model, plan, topo, eff=eff, dtype="fp16", overlap_grad_reduce=False)
        if row.micro_batch is None and not est.fits:
            continue
        if best is None or est.step_time_s < best[1].step_time_s:
            best = (plan, est)
    assert best is not None, f"no plan fits for {row.name}"
    return best


class TableRow(TypedDict):
    """One row of :func:`table`: a published run beside its prediction."""

    row: str
    recompute: str
    tp: int
    pp: int
    dp: int
    micro_batch: int
    interleave: int
    measured_s: float
    predicted_s: float
    error: float  # (predicted - measured) / measured
    mfu: float
    fits: bool
    source: str


def table(eff: Efficiency | None = None, rows: Sequence[Row] = ROWS) -> list[TableRow]:
    out: list[TableRow] = []
    for row in rows:
        plan, est = predict(row, eff)
        err = (est.step_time_s - row.measured_s) / row.measured_s
        out.append({
            "row": row.name,
            "recompute": str(row.recompute),
            "tp": plan.tp, "pp": plan.pp, "dp": plan.dp,
            "micro_batch": plan.micro_batch, "interleave": plan.interleave,
            "measured_s": row.measured_s,
            "predicted_s": round(est.step_time_s, 3),
            "error": round(err, 4),
            "mfu": round(est.mfu, 4),
            "fits": est.fits,
            "source": row.source,
        })
    return out


def summary(rows: Sequence[TableRow]) -> dict[str, float]:
    """In-sample figures of a :func:`table` (errors of the efficiencies it was run with)."""
    return error_figures([r["error"] for r in rows])


def error_figures(errors: Sequence[float]) -> dict[str, float]:
    """Median and max absolute, and mean signed, of relative errors (pred - meas) / meas,
    and how many rows are predicted too fast (error < 0) out of how many."""
    abs_errs = [abs(e) for e in errors]
    return {
        "median_abs_err": statistics.median(abs_errs),
        "max_abs_err": max(abs_errs),
        "mean_signed_err": statistics.fmean(errors),
        "too_fast": float(sum(1 for e in errors if e < 0)),
        "rows": float(len(errors)),
    }
