"""The scheduler (``podfleet.scheduler``) inside the control plane: the pure glue.

Each ``ClusterRuntime`` owns one ``Scheduler`` built from its topology and spares. The
control plane's owner map (chip -> job, shared with recovery) and the fabric's chip
and link states stay the truth; ``sync`` folds them into the scheduler before every
cycle, so a rank that recovery moved, a chip that failed or was repaired, or a link
that went down, is seen by placement.

Nothing here mutates a job record: ``dispatch`` applies the scheduler's decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from itertools import repeat
from typing import Any, Protocol

import numpy as np

from podfleet.control.chipmodes import ChipModes
from podfleet.control.owners import ChipOwners
from podfleet.control.placement import Allocation
from podfleet.control.planning import PERF_PLAN_FIELDS, Plan
from podfleet.control.presets import resolve_model
from podfleet.control.specs import ClusterSpec, JobSpec
from podfleet.errors import PodfleetError
from podfleet.fabric.base import ChipState, Fabric, LinkTraffic
from podfleet.hardware.topology import Topology
from podfleet.perf.models import MODELS, ModelSpec
from podfleet.scheduler import JobRequest, Placement, Scheduler, choose_spares, cluster_metrics
from podfleet.scheduler.extension import ShapePlanner
from podfleet.scheduler.jobs import JobPhase, SchedulerJob
from podfleet.scheduler.state import FREE
from podfleet.wire import JsonObject

_HOLDING = (JobPhase.RUNNING, JobPhase.CHECKPOINTING)


class SyncTarget(Protocol):
    """What ``sync`` reads of a cluster (``ClusterRuntime`` is one): declared here, below the
    runtime, so this glue never imports the runtime that imports it."""

    # The link states last folded into the scheduler, with its pods' link versions then.
    synced_links: tuple[int, list[Any]] | None
    # The chip states and modes last folded, with the healthy mask made of them.
    synced_health: tuple[list[ChipState], tuple[int, ...], np.ndarray] | None
    # The ring traffic last folded (a copy of the fabric's array).
    synced_traffic: np.ndarray | None

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def fabric(self) -> Fabric: ...

    @property
    def modes(self) -> ChipModes: ...

    @property
    def owner(self) -> Mapping[int, str]: ...

    @property
    def spare_mask(self) -> np.ndarray: ...

    def chip_states(self) -> list[ChipState]: ...


def cluster_spares(spec: ClusterSpec, topology: Topology, stored: Sequence[int] | None = None) -> tuple[int, ...]:
    """The cluster's spare chips: as persisted, as the operator named them, or chosen
    by ``choose_spares`` where they keep the largest blocks free."""
    if stored is not None:
        return tuple(int(c) for c in stored)
    if spec.spare_chips is not None:
        return tuple(spec.spare_chips)
    return choose_spares(topology, spec.total_spares())


def new_scheduler(topology: Topology, spares: Sequence[int], quotas: Mapping[str, int] | None,
                  clock: Callable[[], float], planner: ShapePlanner | None = None) -> Scheduler:
    return Scheduler(topology, spares=tuple(spares), quotas=dict(quotas or {}), clock=clock, planner=planner)


def job_request(job_id: str, spec: JobSpec, plan: Plan | None, *, preemptible: bool = True,
                auto_plan: bool = True, movable: bool = False) -> JobRequest:
    """What the scheduler needs of a job: gang size, team, priority, TP degree, and for
    ``parallelism: auto`` the model and its gradient compression, so block shape and plan
    (its step time with that compression) are chosen together (``auto_plan``: the
    driver's models are the planner's; the twin's)."""
    chips = spec.chips
    tp = spec.tp or (plan.tp if plan is not None else 1) or 1
    if tp < 1 or chips % tp:
        tp = 1
    model: str | ModelSpec | None = None
    if spec.parallelism == "auto" and auto_plan:
        try:
            # A preset by name (the planner caches it); a custom model as its spec.
            model = spec.model if spec.model in MODELS else resolve_model(spec.model, spec.model_dims)
        except PodfleetError:
            model = None
    return JobRequest(
        job_id, chips, team=spec.team or "default", priority=spec.priority, tp=tp,
        queue=spec.queue or "default", may_preempt=spec.priority_preemption != "never",
        parallelism="auto" if model is not None else "manual", model=model, preemptible=preemptible, movable=movable,
        grad_compression=spec.grad_compression or "none",
        pods=spec.pods, topology_required=spec.topology_required,
        topology_preferred=spec.topology_preferred,
        time_limit_s=float(spec.time_limit_s) if spec.time_limit_s is not None else None,
    )


def plan_fields(plan: object) -> Plan | None:
    """The planner's best plan (a ``PlanResult``, or a ``Plan`` from ``plan_for_job``) as
    perf.Plan fields plus its predicted figures; None without one."""
    if plan is None or isinstance(plan, Plan):
        return plan
    if isinstance(plan, Mapping):
        return Plan.from_dict(plan)
    best = getattr(plan, "best", None)
    if best is None:
        return None
    d = {k: _plain(v) for k, v in asdict(best.plan).items() if k in PERF_PLAN_FIELDS}
    est = best.estimate
    d.update(step_time_s=float(est.step_time_s), tokens_per_s=float(est.tokens_per_s), mfu=float(est.mfu),
             memory_per_chip_bytes=int(est.memory.total_bytes), fits=bool(est.fits))
    comp = str(getattr(plan, "grad_compression", "none") or "none")
    if comp != "none":  # planned with the job's gradient compression: say so, and what it changed
        d["grad_compression"] = comp
        raw = getattr(plan, "uncompressed", None)
        if raw is not None:
            d["uncompressed_step_time_s"] = float(raw.step_time_s)
    return Plan.from_dict(d)


def worker_options(parallelism: str | tuple[int, int, int], plan: Plan | None) -> JsonObject:
    """``WorkerGroupSpec.options`` for the layout: ``parallelism`` {tp, pp, dp} when the job
    gave it, ``plan`` (perf.Plan fields) when a plan is known."""
    out: JsonObject = {}
    if isinstance(parallelism, tuple):
        tp, pp, dp = parallelism
        out["parallelism"] = {"tp": tp, "pp": pp, "dp": dp}
    else:
        out["parallelism"] = parallelism
    if plan is not None and plan.predicted:
        out["plan"] = plan.perf_fields()
    return out


def allocation_view(p: Placement) -> Allocation:
    return Allocation(tuple(p.chips), tuple(p.shape), p.reason, p.pod, tuple(p.offset),
                      tuple(tuple(c) for c in p.cores), round(p.score, 3),
                      pods=tuple(p.pods), blocks=tuple(p.blocks))


def pending_allocation(reason: str) -> Allocation:
    return Allocation.waiting(reason)


def sync(rt: SyncTarget) -> None:
    """Fold the fabric's chip states, link states and the owner map into the scheduler
    (engine thread). Links that are down or degraded keep new placements off them; on a
    fabric that reports its links' traffic (``LinkTraffic``), links other jobs' rings load
    count against a candidate block too.

    Spares are left out of the owner arrays: a rank recovery moved onto a spare does not
    make the spare look allocated, and the scheduler never places on spares anyway.
    """
    sched: Scheduler = rt.scheduler
    cl = sched.cluster
    states = rt.chip_states()
    moded = tuple(rt.modes)
    last = rt.synced_health
    if last is not None and last[1] == moded and last[0] == states:
        healthy = last[2]  # nothing moved since the last fold (one C-level list compare)
    else:
        seen = list(states)
        # A cordoned or draining chip is out of service for placement, whatever the fabric
        # says of it (``control.chips``).
        for c in moded:
            if states[c] is ChipState.HEALTHY:
                states[c] = ChipState.ISOLATED
        healthy = np.fromiter(map(ChipState.HEALTHY.__eq__, states), dtype=bool, count=len(states))
        rt.synced_health = (seen, moded, healthy)
    per = cl.chips_per_pod
    # Compared over all pods at once (a fleet has 1,024), then set chip by chip where it differs.
    held = cl.arrays.healthy.reshape(-1)
    for chip in np.flatnonzero(held != healthy).tolist():
        state = states[chip]
        if state is ChipState.HEALTHY and chip in moded:  # as folded above (a kept fold)
            state = ChipState.ISOLATED
        sched.set_chip_state(chip, state)
    links = rt.fabric.link_states()
    if cl.links_per_pod and len(links) == cl.links_per_pod * len(cl.pods):
        # Folded only when the fabric's links or the scheduler's moved since the last fold
        # (a fleet has 196,608 links; a fold is a pass over them in Python).
        key = sum(p.link_version for p in cl.pods)
        if rt.synced_links is None or rt.synced_links[0] != key or rt.synced_links[1] != links:
            sched.set_link_states(links)
            rt.synced_links = (sum(p.link_version for p in cl.pods), links)
    if isinstance(rt.fabric, LinkTraffic) and cl.links_per_pod:
        # The running rings' load per directed link: placement scores a candidate block by
        # the traffic its ring would add (``scheduler.traffic``). Compared pod by pod, so an
        # unchanged load costs one array comparison per pod that carries traffic.
        # A fleet's pods compared one by one cost milliseconds with a few hundred jobs
        # running; the whole array compared once skips them when nothing moved.
        traffic = rt.fabric.link_traffic()
        last_traffic = rt.synced_traffic
        if traffic.size == 2 * cl.links_per_pod * len(cl.pods) and (
                last_traffic is None or not np.array_equal(last_traffic, traffic)):
            sched.set_link_traffic(traffic)
            rt.synced_traffic = np.array(traffic, copy=True)
    # Each held chip's job slot, spares left out. Built from a plain copy of the owner map
    # in C-level passes: iterating the map as a Mapping went through Python per chip (a
    # fleet with 300 jobs of 32 chips: 9 ms of every scheduling cycle, so of every submit).
    slot_of = {job_id: r.slot for job_id, r in sched.jobs.items() if r.phase in _HOLDING}
    owned = rt.owner
    by_chip = owned.copy() if isinstance(owned, ChipOwners) else {c: owned[c] for c in list(owned)}
    want = np.full(cl.n_chips, FREE, dtype=np.int64)
    if by_chip and slot_of:
        chips = np.fromiter(by_chip.keys(), dtype=np.int64, count=len(by_chip))
        want[chips] = np.fromiter(map(slot_of.get, by_chip.values(), repeat(FREE)), dtype=np.int64, count=len(by_chip))
        want[np.asarray(rt.spare_mask, dtype=bool)] = FREE
    owners = cl.arrays.owner.reshape(-1)
    for i in np.flatnonzero((owners != want).reshape(len(cl.pods), per).any(axis=1)).tolist():
        pod = cl.pods[i]
        pod.owner[:] = want[pod.index * per:(pod.index + 1) * per]
        cl.touch(pod)


def chip_utilization(fabric: Fabric) -> np.ndarray | None:
    """Per-chip busy share 0-1 from the fabric's telemetry (None when it has none)."""
    m = fabric.chip_metrics()
    u = m.get("neuroncore_utilization") if isinstance(m, Mapping) else None
    if u is None:
        return None
    a = np.asarray(u, dtype=float)
    a = a.mean(axis=1) if a.ndim == 2 else a
    return np.nan_to_num(a / 100.0)


def scheduler_metrics(sched: Scheduler, spares: Sequence[int], util: np.ndarray | None) -> JsonObject:
    """DescribeCluster's ``scheduler`` object: pods, utilization, fragmentation, waits,
    per-job load-balance degree. Engine thread (the framework refreshes summaries).
    ``util``: the fabric's per-chip utilization (``chip_utilization``; None without telemetry)."""
    m = cluster_metrics(sched, utilization=util)
    m["utilization"] = round(float(m["utilization"]), 4)
    m["fragmentation"] = round(float(m["fragmentation"]), 4)
    m["queue_wait_p50_s"] = round(float(m["queue_wait_p50_s"]), 3)
    m["queue_wait_p95_s"] = round(float(m["queue_wait_p95_s"]), 3)
    for p in m["pods"]:
        p["utilization"] = round(float(p["utilization"]), 4)
    if len(m["pods"]) > LISTED_PODS:
        # A fleet's pods are counted per pod and per block by DescribeClusterHardware
        # (summary=true); listed here they were 150 KB of every DescribeCluster and
        # ListClusters answer for 1,024 pods.
        m["pod_count"] = len(m["pods"])
        m["pods_whole_free"] = sum(1 for p in m["pods"] if p["utilization"] == 0.0 and not p["unhealthy"])
        m["pods"] = []
        m["pods_in"] = "DescribeClusterHardware summary=true"
    m["spares"] = list(spares)
    return m


LISTED_PODS = 64  # DescribeCluster lists the pods of a cluster of at most this many


def record_wait(r: SchedulerJob, now: float) -> float:
    """Total time a scheduler record has queued (all stints) at ``now``."""
    if r.phase is JobPhase.REJECTED:
        return 0.0
    return r.wait_s + (now - r.enqueued_s if r.phase in (JobPhase.PENDING, JobPhase.NOMINATED) else 0.0)


def queue_wait(sched: Scheduler, job_id: str, now: float | None = None) -> float:
    """Total time ``job_id`` has queued (all stints), without walking every job."""
    r = sched.jobs.get(job_id)
    return 0.0 if r is None else record_wait(r, sched.clock() if now is None else now)


def queue_waits(sched: Scheduler) -> dict[str, float]:
    """Total time queued per job (all stints), for the queue-wait histogram."""
    now = sched.clock()
    return {j: record_wait(r, now) for j, r in sched.jobs.items() if r.phase is not JobPhase.REJECTED}


def _plain(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v
