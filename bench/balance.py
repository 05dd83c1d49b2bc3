"""Load-balance degree and tokens/s of a 64-chip data-parallel job with a throttled chip
and a slow link, through the control plane on the digital twin.

The path users run: ``podfleet.compose.build(MemoryStore(), Timeline(seed))`` with a
twin ``trn2-ultraserver`` cluster and a 64-chip ``llama3-8b`` job (tp=1, pp=1, dp=64);
the twin's own step model (``fabric/sim``: perf model, throttling, link health, the
work split and ring order it was given). Nothing here models a step.

* faults: the chip of rank ``HOT_RANK`` gets a partial cooling fault (its thermal
  resistance x ``COOLING_R``, set on the twin's thermal model directly): under load it
  runs past its throttle point and the twin's thermal model lowers its clock, so it
  stays in the job, slow. Not the ``thermal-runaway`` fault kind: that one is answered
  by recovery (the chip is isolated and the replica dropped or moved), so there would
  be no slow chip left to balance around. And ``link-flap`` on the link between ranks
  ``SLOW_LINK_RANKS`` (it flaps, then stays up at reduced width: degraded).
* the control plane's ``ClusterBalancer`` samples the twin's noisy chip and link
  telemetry every ``BALANCE_INTERVAL_S`` of twin time, decides (micro-batches in
  proportion to measured clock speed, a ring order around the slow link) and hands the
  decision to the fabric (``Rebalanceable``), which uses it from its next step on.
* three runs of the same seed: rebalancing applied; the same faults on a twin that
  declares ``Rebalanceable`` but ignores what it is given (the balancer decides and logs,
  nothing changes: "without rebalancing"); no faults.

The split's unit is one sequence of the global batch: ``MODEL`` at the planner's
~4M-token batch has 8 sequences of 8192 tokens per rank, so the best any split can do
around one ~0.7x chip is to give it 6 and two fast ranks 9: their 9/8 sets the step,
and mean / max busy time is ~0.89 (``balance_degree_ceiling``, computed from the
twin's clocks at the end of the run). The same faults on ``FINE_MODEL`` (32 sequences
of 2048 tokens per rank) show the balancer at a 4x finer unit.

Figures over the measurement window (after the faults have set in): tokens/s from the
job's completed steps (steps x tokens per step / time), balance degree as the control
plane reports it on the job (mean / max chip utilization over the job's chips, from the
monitor's window of noisy utilization telemetry), averaged over the window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from podfleet.compose import build
from podfleet.engine import Timeline
from podfleet.fabric.base import Fabric
from podfleet.fabric.factory import make_fabric
from podfleet.fabric.sim import SimFabric
from podfleet.hardware.topology import Topology
from podfleet.scheduler.balance import split_microbatches
from podfleet.store.memory import MemoryStore

NAME = "balance"
DESCRIPTION = "balance degree and tokens/s of a 64-chip DP job with a throttled chip and a slow link (control plane, twin)"

BALANCE_INTERVAL_S = 1.0
COOLING_R = 2.3
HOT_RANK = 21
SLOW_LINK_RANKS = (15, 16)  # a z step of the ring (between the first two instances)
MODEL = "llama3-8b"  # 8 sequences of 8192 tokens per rank (the planner's ~4M-token global batch)
JOB = {"model": MODEL, "chips": 64, "steps": 10**7, "parallelism": {"tp": 1, "pp": 1, "dp": 64}}
# Same faults, a model whose ~4M-token global batch holds 4x the sequences (2048 tokens
# each): 32 sequences per rank instead of 8, a 4x finer unit for the split.
FINE_MODEL = "megatron-1.7b"


class IgnoringSimFabric(SimFabric):
    """A twin that declares ``Rebalanceable`` but ignores what it is given."""

    def set_work_split(self, job_id: str, shares: Sequence[int]) -> None:
        pass

    def set_ring_order(self, job_id: str, ring: Sequence[int]) -> None:
        pass


def _factory(ignore: bool):  # type: ignore[no-untyped-def]
    def make(kind: str, topology: Topology, timeline: Timeline, spares: tuple[int, ...], seed: int,
             *, options: Mapping[str, Any] | None = None) -> Fabric:
        if kind == "sim" and ignore:
            return IgnoringSimFabric(topology, timeline, spares=spares, progress_every_steps=1)
        return make_fabric(kind, topology, timeline, spares, seed, options=options)
    return make


def ceiling(clocks: np.ndarray, per_rank: int) -> float:
    """The best mean / max busy time over ranks any whole-sequence split reaches at these
    clocks (noise-free): the rebalancer's own water-filling is optimal for max busy."""
    m = split_microbatches(clocks, per_rank * len(clocks))
    busy = m / clocks
    return float(busy.mean() / busy.max())


def scenario(faults: bool, applied: bool, duration_s: float, warm_s: float, seed: int = 0,
             balance_interval_s: float = BALANCE_INTERVAL_S, model: str = MODEL) -> dict[str, Any]:
    """One run; ``applied=False`` uses a twin that ignores the split (see module docstring)."""
    tl = Timeline(seed=seed)
    parts = build(MemoryStore(), tl, fabric_factory=_factory(not applied), balance_interval_s=balance_interval_s)
    plane = parts.plane
    plane.load()
    view = plane.create_cluster({"name": "pod", "type": "trn2-ultraserver"}, actor="bench")
    tl.run(tl.now + 30)
    job = plane.jobs.submit("pod", {**JOB, "model": model}, actor="bench")
    tl.run(tl.now + 30)
    d = plane.jobs.describe(job["id"])
    if d["state"].lower() != "running":
        raise RuntimeError(f"the job did not start: {d['state']} {d.get('reason')}")
    chips = d["allocation"]["chips"]
    hot = chips[HOT_RANK]
    fab = plane.resolve(view["id"]).fabric
    t0 = tl.now
    if faults and isinstance(fab, SimFabric):
        # A partial cooling fault (thermal resistance x COOLING_R): the chip runs hot and
        # throttles under load. A full thermal-runaway is recovery's (it drops the replica).
        fab.telemetry.r_scale[hot] = COOLING_R
        fab.telemetry.dirty = True
        a, b = chips[SLOW_LINK_RANKS[0]], chips[SLOW_LINK_RANKS[1]]
        plane.inject_fault("pod", "link-flap", link=f"{a}-{b}", actor="bench")
    degrees: list[float] = []
    marks: list[tuple[float, int]] = []
    throttled = False
    end = t0 + duration_s
    while tl.now < end:
        tl.run(tl.now + 1.0)
        if tl.now - t0 < warm_s:
            continue
        d = plane.jobs.describe(job["id"])
        marks.append((tl.now, int(d["progress"]["step"])))
        deg = d["scheduling"].get("balance_degree")
        if deg is not None:
            degrees.append(float(deg))
        if isinstance(fab, SimFabric):
            throttled = throttled or bool(fab.telemetry.throttle[hot])
    d = plane.jobs.describe(job["id"])
    p = d["progress"]
    tokens_per_step = float(p["tokens_per_s"]) * float(p.get("step_time_s") or 0.0)
    if not tokens_per_step and isinstance(fab, SimFabric):
        run = fab.job(job["id"])
        tokens_per_step = run.tokens_per_s * run.step_time_s
    (ta, sa), (tb, sb) = marks[0], marks[-1]
    lines = [ln["message"] for ln in plane.jobs.job_logs(job["id"]).since(0) if ln["message"].startswith("rebalance")]
    out = {
        "tokens_per_s": (sb - sa) * tokens_per_step / (tb - ta),
        "balance_degree": float(np.mean(degrees)) if degrees else 1.0,
        "steps": sb - sa,
        "throttled": throttled,
        "state": d["state"],
        "actions": lines,
        "work_split": d["scheduling"].get("work_split"),
        "per_rank": int((d.get("plan") or {}).get("micro_batch") or 1) * int((d.get("plan") or {}).get("num_micro_batches") or 8),
        "clocks": np.asarray(fab.telemetry.clock_factor, float)[chips] if isinstance(fab, SimFabric) else None,
    }
    return out


def run(quick: bool = False) -> dict[str, Any]:
    duration, warm = (240.0, 90.0) if quick else (600.0, 120.0)
    fixed = scenario(True, True, duration, warm)
    stuck = scenario(True, False, duration, warm)
    clean = scenario(False, True, duration, warm)
    fine = scenario(True, True, duration, warm, model=FINE_MODEL)
    if not (fixed["throttled"] and stuck["throttled"]):
        raise RuntimeError("the hot chip never throttled; the scenario is not what it claims")
    split = fixed["work_split"] or {}
    shares = split.get("shares") or []
    return {
        "balance_degree": round(fixed["balance_degree"], 4),
        "tokens_per_s_ratio": round(fixed["tokens_per_s"] / stuck["tokens_per_s"], 4),
        "balance_degree_without_rebalancing": round(stuck["balance_degree"], 4),
        "sequences_per_rank": fixed["per_rank"],
        "balance_degree_ceiling": round(ceiling(fixed["clocks"], fixed["per_rank"]), 4),
        "balance_degree_32_per_rank": round(fine["balance_degree"], 4),
        "balance_degree_ceiling_32_per_rank": round(ceiling(fine["clocks"], fine["per_rank"]), 4),
        "sequences_per_rank_fine": fine["per_rank"],
        "tokens_per_s_vs_fault_free": round(fixed["tokens_per_s"] / clean["tokens_per_s"], 4),
        "tokens_per_s_vs_fault_free_without_rebalancing": round(stuck["tokens_per_s"] / clean["tokens_per_s"], 4),
        "balance_degree_fault_free": round(clean["balance_degree"], 4),
        "tokens_per_s_fault_free": round(clean["tokens_per_s"], 1),
        "steps_measured": fixed["steps"],
        "rebalance_actions": len(fixed["actions"]),
        "first_actions": fixed["actions"][:3],
        "final_split_min_max": [min(shares), max(shares)] if shares else None,
        "ring_rerouted": "ring" in split,
        "job_states": [fixed["state"], stuck["state"], clean["state"], fine["state"]],
        "step_model": "the twin's own (perf model + throttling + link health + the split it was given)",
        "goal_balance_degree": 0.97,
    }
