"""What the planner returns: ranked fitting candidates and the reasons for the rest."""

from __future__ import annotations

from dataclasses import dataclass

from podfleet.perf.plan import Plan
from podfleet.perf.step import StepEstimate


@dataclass(frozen=True)
class Candidate:
    plan: Plan
    estimate: StepEstimate

    @property
    def step_time_s(self) -> float:
        return self.estimate.step_time_s

    @property
    def fits(self) -> bool:
        return self.estimate.fits

    def sort_key(self) -> tuple[float, float, int, int, int, int, str, int]:
        p = self.plan
        return (
            round(self.step_time_s, 12), self.estimate.memory.total_bytes,
            p.tp, p.pp, p.micro_batch, p.interleave, str(p.recompute), p.zero_stage,
        )

    def to_dict(self) -> dict[str, object]:
        return {**self.plan.to_dict(), **self.estimate.to_dict()}


@dataclass(frozen=True)
class Rejected:
    plan: dict[str, int]  # the degrees it was rejected at: tp, pp, dp
    reason: str
    memory_per_chip_bytes: float | None = None  # least memory any variant needed

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {**self.plan, "reason": self.reason}
        if self.memory_per_chip_bytes is not None:
            out["memory_per_chip_bytes"] = int(self.memory_per_chip_bytes)
        return out


@dataclass(frozen=True)
class PlanResult:
    model: str
    chips: int
    topology: str
    chip_type: str
    seq_len: int
    global_batch: int
    candidates: tuple[Candidate, ...]  # fitting plans, fastest first
    rejected: tuple[Rejected, ...]
    evaluated: int  # plans whose step time was estimated
    grad_compression: str = "none"  # the mode every candidate was estimated with
    # The best plan without compression (only when a mode is given): what compression changed.
    uncompressed: StepEstimate | None = None

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    # The best plan's headline figures, for callers that only rank results.
    @property
    def step_time_s(self) -> float:
        return self.best.step_time_s

    @property
    def tokens_per_s(self) -> float:
        return self.best.estimate.tokens_per_s

    @property
    def mfu(self) -> float:
        return self.best.estimate.mfu

    @property
    def memory_per_chip_bytes(self) -> int:
        return int(self.best.estimate.memory.total_bytes)

    def _compression_view(self) -> dict[str, object]:
        if self.uncompressed is None:
            return {}
        base, est = self.uncompressed, self.best.estimate
        return {"uncompressed_step_time_s": base.step_time_s,
                "compression_speedup": base.step_time_s / est.step_time_s,
                "dp_comm_exposed_uncompressed_s": base.dp_comm_exposed_s,
                "grad_codec_s": est.grad_codec_s}

    def to_dict(self, top: int = 5) -> dict[str, object]:
        return {
            **self.best.to_dict(),
            "model": self.model,
            "chips": self.chips,
            "topology": self.topology,
            "chip_type": self.chip_type,
            "seq_len": self.seq_len,
            "evaluated": self.evaluated,
            "grad_compression": self.grad_compression,
            **self._compression_view(),
            "candidates": [c.to_dict() for c in self.candidates[:top]],
            "rejected": [r.to_dict() for r in self.rejected],
        }
