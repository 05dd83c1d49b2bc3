"""Advice candidates from the running state (engine thread): what might pay, not yet proven.

Each generator reads one cluster (its fabric's chip and link states and metrics, which
job holds which chip, the jobs' specs and plans) and returns ``Candidate``\\ s. A
candidate says which job it is about, the action that would help, and the *stand-in*
that reproduces the problem in a rehearsal (a fresh control plane in virtual time that
knows only what the advisor saw). Nothing here decides whether the action pays: the
rehearsal does (``advise.prove``).

Kinds:

* ``move-straggler``: a chip of a running job is throttled (its clock holds back the
  whole gang). Action: drain it, so the rank moves to a spare or a free chip. Stand-in:
  a thermal runaway on the same rank.
* ``move-off-degraded-link``: a link between two chips of one job is degraded (jobs run
  at the pace of their slowest link). Action: drain one end. Stand-in: a link flap
  between the same two ranks.
* ``drain-climbing-ecc``: a chip of a running job logs corrected HBM errors at a rate
  that climbs (the precursor of an uncorrectable error). Action: drain it before it
  fails. Stand-in: an HBM uncorrectable error announced by corrected-ECC growth, landing
  ``ECC_LEAD_S`` later (an assumption: the advisor cannot know the lead time).
* ``replan``: a job runs with an explicit layout (tp, pp, dp) whose collectives the
  performance model prices higher than the planner's best layout for the same chips
  (typically a tensor-parallel group stretched over the slower z links). Action: restart
  the job with the planner's layout.
* ``enable-grad-compression``: a data-parallel job whose exposed gradient reduction a
  compression mode (``bf16``, ``powersgd:R``, ``lossless``; ``perf.compression``) would
  shorten by the performance model. Action: restart the job with that mode.
* ``consolidate``: the pod is fragmented: a job waits for placement because no free
  block of its size exists, while enough chips are free in pieces. Action: requeue the
  smaller running jobs (stop, submit again: the waiting job, ahead in the queue, takes a
  block first and they pack around it). Measured over every job of the cluster.

The rehearsal replays the current state: every running job on the same chips (pinned
with cordons while it is placed), then the waiting jobs, in queue order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from podfleet.control.plane import ControlPlane
from podfleet.control.planning import Plan, plan_for_job
from podfleet.control.runtime import ClusterRuntime
from podfleet.control.scheduling import worker_options
from podfleet.errors import PodfleetError
from podfleet.fabric.base import HardwareErrors, LinkState
from podfleet.hardware.topology import GridTopology
from podfleet.perf import estimate_step
from podfleet.perf.compression import parse_grad_compression
from podfleet.perf.models import MODELS
from podfleet.perf.options import plan_from_options

ECC_LEAD_S = 1800.0  # stand-in: the uncorrectable error lands this long after the advice
ECC_MIN_CORRECTED = 3  # corrected HBM errors on a chip before its rate counts as climbing
COMPRESSION_MODES = ("bf16", "powersgd:4", "powersgd:32", "lossless")
PREFILTER_GAIN = 0.01  # a modelled gain under this is not worth two rehearsals
JOB_FIELDS = ("model", "chips", "steps", "checkpoint_interval", "priority", "parallelism", "model_dims",
              "entrypoint", "name", "team", "max_retries", "options", "grad_compression")


@dataclass(frozen=True)
class JobShape:
    """What a rehearsal needs to run the same job: its spec and where its ranks sit."""

    job_id: str
    model: str
    chips: tuple[int, ...]
    parallelism: Mapping[str, int] | str
    grad_compression: str
    checkpoint_interval: int
    body: Mapping[str, Any] = field(repr=False)  # the SubmitTrainingJob body to restart it with

    @property
    def n(self) -> int:
        """Chips the job asks for (a waiting job holds none yet)."""
        return int(self.body.get("chips") or len(self.chips))


@dataclass(frozen=True)
class StandIn:
    """The problem as a rehearsal reproduces it: a fault on a rank (or between two ranks),
    or the job pinned to scattered chips."""

    fault: str | None = None  # link-flap | thermal-runaway | hbm-precursor
    ranks: tuple[int, ...] = ()
    lead_s: float | None = None


@dataclass(frozen=True)
class Candidate:
    kind: str
    cluster_id: str
    cluster_type: str
    spares: int
    job: JobShape  # the job the advice is about
    scene: tuple[JobShape, ...]  # the cluster's running jobs, then its waiting ones (queue order)
    stand_in: StandIn
    # {"op": "drain-chip", "rank": r, "chip": c} | {"op": "restart-job", "changes": {...}}
    # | {"op": "requeue-jobs", "jobs": [job ids]}
    action: Mapping[str, Any]
    title: str
    guide: str
    evidence: Mapping[str, Any]
    confidence: float
    fingerprint: str
    whole_cluster: bool = False  # the gain is measured over every job, not the one

    @property
    def job_id(self) -> str:
        return self.job.job_id


def job_shape(plane: ControlPlane, job_id: str, *, state: str = "RUNNING") -> JobShape | None:
    view = plane.jobs.describe(job_id)
    chips = tuple(int(c) for c in (view.get("allocation") or {}).get("chips") or [])
    if view.get("state") != state or view.get("model") not in MODELS or view.get("entrypoint"):
        return None
    if state == "RUNNING" and not chips:
        return None
    par = view.get("parallelism") or "auto"
    body = {k: view.get(k) for k in JOB_FIELDS if view.get(k) is not None}
    return JobShape(job_id, str(view["model"]), chips, dict(par) if isinstance(par, Mapping) else str(par),
                    str(view.get("grad_compression") or "none"), int(view.get("checkpoint_interval") or 0), body)


def running_jobs(plane: ControlPlane, rt: ClusterRuntime) -> list[JobShape]:
    out = []
    for job_id in sorted(set(rt.owners.values())):
        shape = job_shape(plane, job_id)
        if shape is not None:
            out.append(shape)
    return out


def waiting_jobs(plane: ControlPlane, rt: ClusterRuntime) -> list[JobShape]:
    rows, _ = plane.jobs.list(cluster_id=rt.id, state="PENDING", max_results=1000)
    out = []
    for v in sorted(rows, key=lambda v: str(v.get("created_at") or "")):
        shape = job_shape(plane, str(v["id"]), state="PENDING")
        if shape is not None:
            out.append(shape)
    return out


def _base(kind: str, rt: ClusterRuntime, job: JobShape, fp: str, scene: Sequence[JobShape],
          **kw: Any) -> Candidate:
    return Candidate(kind, rt.id, rt.spec.type, len(rt.spares), job, tuple(scene), fingerprint=fp, **kw)


def _free_chips(rt: ClusterRuntime) -> list[int]:
    return [c for c in rt.replacement_chips() if c not in rt.owners]


def _movable_metric(rt: ClusterRuntime, name: str) -> np.ndarray | None:
    """The chip metric ``name`` where the fabric measures it and a rank could move to a
    free chip (no free chip: nothing to advise that moves one)."""
    m = rt.fabric.chip_metrics()
    if name not in m or not _free_chips(rt):
        return None
    return np.asarray(m[name], float)


def stragglers(plane: ControlPlane, rt: ClusterRuntime, jobs: Sequence[JobShape], fp: str) -> list[Candidate]:
    clock = _movable_metric(rt, "clock_mhz")
    if clock is None:
        return []
    out = []
    for job in jobs:
        idx = np.asarray(job.chips)
        nominal = float(np.median(clock[idx]))
        slow = [i for i, c in enumerate(job.chips) if nominal > 0 and clock[c] < 0.95 * nominal]
        if not slow:
            continue
        rank = min(slow, key=lambda i: clock[job.chips[i]])
        chip = job.chips[rank]
        ratio = float(clock[chip] / nominal)
        out.append(_base("move-straggler", rt, job, fp, jobs, stand_in=StandIn("thermal-runaway", (rank,)),
                         action={"op": "drain-chip", "rank": rank, "chip": chip},
                         title=f"chip {chip} (rank {rank} of {job.job_id}) runs at {ratio:.0%} clock and holds "
                               "back its gang: move the rank to a spare",
                         guide="tuning-throughput",
                         evidence={"chip": chip, "rank": rank, "clock_mhz": float(clock[chip]),
                                   "gang_median_clock_mhz": nominal, "job_id": job.job_id},
                         confidence=0.8))
    return out


def degraded_links(plane: ControlPlane, rt: ClusterRuntime, jobs: Sequence[JobShape], fp: str) -> list[Candidate]:
    fab = rt.fabric
    if not _free_chips(rt):
        return []
    links = [LinkState(s) for s in fab.link_states()]
    errors = fab.hardware_errors() if isinstance(fab, HardwareErrors) else []
    out = []
    for job in jobs:
        where = {c: i for i, c in enumerate(job.chips)}
        for i, st in enumerate(links):
            lk = rt.topology.links[i]
            if st != LinkState.DEGRADED or lk.src not in where or lk.dst not in where:
                continue
            name = f"{min(lk.src, lk.dst)}-{max(lk.src, lk.dst)}"
            ranks = (where[lk.src], where[lk.dst])
            reported = [e for e in errors if e.link == i]
            ev: dict[str, Any] = {"link": name, "state": st.value, "job_id": job.job_id, "ranks": list(ranks)}
            if reported:
                ev["hardware_error"] = {"fault": reported[-1].detail.get("fault"), "t": round(reported[-1].t, 3)}
            out.append(_base("move-off-degraded-link", rt, job, fp, jobs, stand_in=StandIn("link-flap", ranks),
                             action={"op": "drain-chip", "rank": ranks[0], "chip": lk.src},
                             title=f"job {job.job_id} runs over degraded link {name}: drain chip {lk.src} so rank "
                                   f"{ranks[0]} moves off it",
                             guide="troubleshooting-a-link", evidence=ev, confidence=0.9 if reported else 0.7))
            break  # one per job: the rehearsal of one drain says what the job gains
    return out


def climbing_ecc(plane: ControlPlane, rt: ClusterRuntime, jobs: Sequence[JobShape], fp: str,
                 history: Mapping[int, float] | None = None) -> list[Candidate]:
    """Chips whose corrected-HBM-error count is at least ``ECC_MIN_CORRECTED`` and grew
    since the previous look (``history``: chip -> count then; without one, any count at
    or over the threshold)."""
    ce = _movable_metric(rt, "mem_ecc_corrected")
    if ce is None:
        return []
    out = []
    for job in jobs:
        for rank, chip in enumerate(job.chips):
            before = (history or {}).get(chip, 0.0)
            if ce[chip] < ECC_MIN_CORRECTED or ce[chip] <= before:
                continue
            out.append(_base("drain-climbing-ecc", rt, job, fp, jobs,
                             stand_in=StandIn("hbm-precursor", (rank,), lead_s=ECC_LEAD_S),
                             action={"op": "drain-chip", "rank": rank, "chip": chip},
                             title=f"chip {chip} (rank {rank} of {job.job_id}) logs climbing corrected HBM errors "
                                   f"({int(ce[chip])}): drain it before an uncorrectable error stops the job",
                             guide="runbook-hbm-uncorrectable",
                             evidence={"chip": chip, "rank": rank, "mem_ecc_corrected": int(ce[chip]),
                                       "before": int(before), "job_id": job.job_id,
                                       "assumed_lead_s": ECC_LEAD_S},
                             confidence=0.6))
            break
    return out


def _job_plan(rt: ClusterRuntime, job: JobShape, par: Mapping[str, int] | str) -> dict[str, Any] | None:
    model = MODELS[job.model]
    fixed = par if isinstance(par, str) else (int(par["tp"]), int(par["pp"]), int(par["dp"]))
    lay = plan_for_job(rt.topology, model, job.n, fixed)
    return lay.to_dict() if lay.predicted else None


def replans(plane: ControlPlane, rt: ClusterRuntime, jobs: Sequence[JobShape], fp: str) -> list[Candidate]:
    out = []
    for job in jobs:
        if not isinstance(job.parallelism, Mapping):
            continue  # "auto" is the planner's layout already
        now, best = _job_plan(rt, job, job.parallelism), _job_plan(rt, job, "auto")
        if now is None or best is None or best["step_time_s"] >= now["step_time_s"] * (1 - PREFILTER_GAIN):
            continue
        new = {k: int(best[k]) for k in ("tp", "pp", "dp")}
        ev = {"job_id": job.job_id, "layout": dict(job.parallelism), "modelled_step_s": round(now["step_time_s"], 3),
              "planner_layout": new, "planner_step_s": round(best["step_time_s"], 3)}
        ev.update(_tp_axes(rt, job))
        out.append(_base("replan", rt, job, fp, jobs, stand_in=StandIn(),
                         action={"op": "restart-job", "changes": {"parallelism": new}},
                         title=f"job {job.job_id} runs tp={job.parallelism['tp']} pp={job.parallelism['pp']} "
                               f"dp={job.parallelism['dp']}; the planner's tp={new['tp']} pp={new['pp']} "
                               f"dp={new['dp']} spends less on collectives: restart it re-planned",
                         guide="configuring-parallelism", evidence=ev, confidence=0.8))
    return out


def _tp_axes(rt: ClusterRuntime, job: JobShape) -> dict[str, Any]:
    """Which torus axes the job's first tensor-parallel group spans (z is the slow one)."""
    topo = rt.topology
    if not isinstance(job.parallelism, Mapping) or not isinstance(topo, GridTopology):
        return {}
    tp = int(job.parallelism["tp"])
    coords = [topo.coords(c) for c in job.chips[:tp]]
    spans = [i for i in range(len(topo.dims)) if len({c[i] for c in coords}) > 1]
    return {"tp_group_spans_axes": ["xyz"[i] if i < 3 else str(i) for i in spans]}


def compressions(plane: ControlPlane, rt: ClusterRuntime, jobs: Sequence[JobShape], fp: str) -> list[Candidate]:
    out = []
    for job in jobs:
        if job.grad_compression != "none":
            continue
        lay = _job_plan(rt, job, job.parallelism)
        if lay is None or int(lay.get("dp", 1)) < 2:
            continue
        model = MODELS[job.model]
        par = job.parallelism
        opts = worker_options(par if isinstance(par, str) else (int(par["tp"]), int(par["pp"]), int(par["dp"])),
                              Plan.from_dict(lay))
        try:
            plan = plan_from_options(model, job.n, opts, rt.topology)
            base = estimate_step(model, job.n, rt.topology, plan=plan)
            tried = {mode: estimate_step(model, job.n, rt.topology, plan=plan,
                                         grad_compression=parse_grad_compression(mode)).step_time_s
                     for mode in COMPRESSION_MODES}
        except PodfleetError:
            continue
        mode = min(tried, key=lambda k: tried[k])
        if tried[mode] >= base.step_time_s * (1 - PREFILTER_GAIN):
            continue
        out.append(_base("enable-grad-compression", rt, job, fp, jobs, stand_in=StandIn(),
                         action={"op": "restart-job", "changes": {"grad_compression": mode}},
                         title=f"job {job.job_id} waits {base.dp_comm_exposed_s:.2f} s a step on its gradient "
                               f"reduction: restart it with gradient compression {mode}",
                         guide="tuning-throughput",
                         evidence={"job_id": job.job_id, "dp": int(lay["dp"]),
                                   "dp_comm_exposed_s": round(base.dp_comm_exposed_s, 4),
                                   "modelled_step_s": {"none": round(base.step_time_s, 3),
                                                       **{k: round(v, 3) for k, v in tried.items()}}},
                         confidence=0.7))
    return out


def fragmented(plane: ControlPlane, rt: ClusterRuntime, jobs: Sequence[JobShape], fp: str) -> list[Candidate]:
    waiting = waiting_jobs(plane, rt)
    if not waiting or not jobs:
        return []
    free = np.flatnonzero(rt.usable()).tolist()
    out = []
    for job in waiting:
        reason = str(plane.jobs.describe(job.job_id).get("reason") or "")
        if "block" not in reason or job.n > len(free):
            continue
        movers = [j for j in jobs if j.n < job.n]
        if not movers:
            continue
        out.append(_base("consolidate", rt, job, fp, [*jobs, *waiting], stand_in=StandIn(),
                         action={"op": "requeue-jobs", "jobs": [j.job_id for j in movers]},
                         title=f"job {job.job_id} ({job.n} chips) waits for a block while {len(free)} chips are "
                               f"free in pieces: requeue {len(movers)} smaller job(s) so the pod packs",
                         guide="tuning-throughput",
                         evidence={"job_id": job.job_id, "chips": job.n, "free_chips": len(free),
                                   "reason": reason, "requeue": [j.job_id for j in movers]},
                         confidence=0.8, whole_cluster=True))
        break
    return out


GENERATORS = (stragglers, degraded_links, climbing_ecc, replans, compressions, fragmented)
