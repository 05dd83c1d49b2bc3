"""The published Trainium training runs and their predictions.

``ROWS`` are the three rows of reference/validation_trn.md: the Trainium efficiencies
are fitted on them and on nothing else. ``OOS_ROWS`` are other rows of the same Neuron
benchmark table (``general/benchmarks/trn1/training_data_decoder.csv`` in
aws-neuron/aws-neuron-sdk, release 2.17, commit 82ffe529): other models, other layouts,
and the fitted configurations on an earlier release. They are only ever predicted.

Every row runs on ``trn1-node:N`` (16 chips per trn1.32xlarge, EFA v2 800 Gbps per
instance) with micro-batch 1, BF16 with FP32 optimizer state, ZeRO-1, sequence
parallelism, selective recomputation, fused attention and the plain 1F1B schedule (the
NxD tutorials' settings), gradients reduced after the accumulation loop. The table counts TP in NeuronCores: here it is in chips
(cores / 2). A row's step time is global batch / (sequences per second).
"""

from __future__ import annotations

from dataclasses import dataclass

from podfleet.hardware.catalog import get_topology
from podfleet.hardware.specs import get_chip
from podfleet.perf.efficiency import Efficiency, efficiency_for
from podfleet.perf.flops import Recompute, hardware_flops_per_step
from podfleet.perf.models import get_model
from podfleet.perf.plan import Plan
from podfleet.perf.step import StepEstimate, estimate

CHIPS_PER_NODE = 16


@dataclass(frozen=True)
class TrnRow:
    name: str
    model: str
    tp: int  # in chips
    pp: int
    dp: int
    global_batch: int
    seq_per_s: float
    source: str

    @property
    def chips(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def measured_s(self) -> float:
        return self.global_batch / self.seq_per_s


_FIT = "reference/validation_trn.md"
_OOS = "Neuron trn1 training table, release 2.17 (aws-neuron-sdk 82ffe529)"

ROWS: tuple[TrnRow, ...] = (
    TrnRow("Llama 2 7B NxD ZeRO-1", "llama2-7b", 4, 1, 64, 1024, 95.14, f"{_FIT}, 2.21"),
    TrnRow("Llama 2 13B NxD", "llama2-13b", 4, 8, 16, 1024, 80.33, f"{_FIT}, 2.21"),
    TrnRow("GPT-3 23B NeMo", "nemo-gpt3-23b", 4, 4, 32, 1024, 107.18, f"{_FIT}, 2.18"),
)

# Out of sample. Left out of the table's 2.17 rows: the two NeMo Llama 2 rows, whose
# TP*DP*PP (128 cores) does not match their node count (16 or 32 nodes = 512 or 1,024
# cores), and GPT-3 46B, whose dimensions the table does not give.
OOS_ROWS: tuple[TrnRow, ...] = (
    TrnRow("Llama 2 7B NxD ZeRO-1 (2.17)", "llama2-7b", 4, 1, 64, 1024, 94.7, _OOS),
    TrnRow("Llama 2 13B NxD tp4/pp4/dp32", "llama2-13b", 4, 4, 32, 1024, 81.8, _OOS),
    TrnRow("Llama 2 70B NxD", "llama2-70b", 16, 4, 8, 1024, 15.6, _OOS),
    TrnRow("GPT-3 23B NeMo (2.17)", "nemo-gpt3-23b", 4, 4, 32, 1024, 102.5, _OOS),
    TrnRow("GPT-3 175B NeMo (2.15.2)", "nemo-gpt3-175b", 16, 8, 4, 1024, 13.3, _OOS),
)


def plan_of(row: TrnRow) -> Plan:
    return Plan(row.tp, row.pp, row.dp, 1, row.global_batch // row.dp, Recompute.selective, 1, 1, True)


def predict(row: TrnRow, eff: Efficiency | None = None) -> tuple[Plan, StepEstimate]:
    topo = get_topology(f"trn1-node:{-(-row.chips // CHIPS_PER_NODE)}")
    plan = plan_of(row)
    # NxD/NeMo's ZeRO-1 (torch-xla's ZeroRedundancyOptimizer) reduce-scatters the gradients
    # in optimizer.step(), after the accumulation loop: nothing overlaps the backward.
    return plan, estimate(get_model(row.model), plan, topo, eff=eff or efficiency_for("trn1"),
                          overlap_grad_reduce=False)


def baseline_step_s(row: TrnRow, efficiency: float) -> float:
    """The one-parameter baseline: hardware FLOPs per step over the chips' fitted FLOP/s."""
    flops = hardware_flops_per_step(get_model(row.model), row.global_batch, Recompute.selective)
    return flops / (row.chips * get_chip("trn1").peak_flops("bf16") * efficiency)
