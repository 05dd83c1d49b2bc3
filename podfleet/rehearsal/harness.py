"""A twin pod with managed jobs and the recovery orchestrator, for scenarios,
benchmarks and tests; and the invariants chaos runs check after every event."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import ChipState, WorkerGroupSpec
from podfleet.fabric.sim import FaultRates, SimFabric
from podfleet.recovery.journal import MemoryJournal
from podfleet.recovery.model import JobPolicy, Timings
from podfleet.recovery.orchestrator import RecoveryOrchestrator

RUNNING_STATES = ("running", "paused")


@dataclass
class Pod:
    tl: Timeline
    fab: SimFabric
    orch: RecoveryOrchestrator
    journal: MemoryJournal
    jobs: list[str] = field(default_factory=list)


def make_pod(seed: int = 0, *, topology: str = "trn2-ultraserver:2", jobs: tuple[int, ...] = (64,),
             spares: int = 8, policy: JobPolicy | None = None, fault_rates: FaultRates | None = None,
             timings: Timings | None = None, model: str = "llama3-70b", steps: int = 10**7,
             checkpoint_interval: int = 10, hbm_fraction: float = 0.85) -> Pod:
    """Jobs of the given sizes packed from chip 0 up; the last ``spares`` chips are spares."""
    tl = Timeline(seed)
    fab = SimFabric(topology, tl, fault_rates=fault_rates, spares=spares)
    journal = MemoryJournal()
    orch = RecoveryOrchestrator(fab, tl, timings=timings, listener=journal, spares=fab.spares)
    pod = Pod(tl, fab, orch, journal)
    start = 0
    for i, n in enumerate(jobs):
        job_id = f"job-{i}"
        fab.launch(WorkerGroupSpec(job_id, tuple(range(start, start + n)), model, steps, checkpoint_interval,
                                   options={"hbm_fraction": hbm_fraction}))
        orch.manage(job_id, policy or JobPolicy(hbm_need_ratio=hbm_fraction))
        pod.jobs.append(job_id)
        start += n
    return pod


def check_invariants(pod: Pod) -> list[str]:
    """Broken invariants, as sentences (empty when all hold):
    no chip in two jobs, the owner map matches the fabric, no running job on a chip that
    cannot run work, and every managed job is alive (running, paused in a recovery, or done)."""
    bad: list[str] = []
    fab, orch = pod.fab, pod.orch
    seen: dict[int, str] = {}
    states = fab.chip_states()
    for job_id, run in fab.jobs.items():
        if str(run.state) not in RUNNING_STATES:
            continue
        for c in run.chips:
            if c in seen:
                bad.append(f"chip {c} is in jobs {seen[c]} and {job_id}")
            seen[c] = job_id
            if orch.owner.get(c) != job_id and job_id in orch.policies:
                bad.append(f"chip {c} runs {job_id} but the owner map says {orch.owner.get(c)}")
            if str(run.state) == "running" and states[c] not in (ChipState.HEALTHY, ChipState.DEGRADED):
                bad.append(f"job {job_id} runs on chip {c} which is {states[c].value}")
        if str(run.state) == "paused" and job_id not in orch.active:
            bad.append(f"job {job_id} is paused with no recovery in flight")
    for job_id in orch.policies:
        if str(fab.jobs[job_id].state) == "stopped" and job_id not in orch.active:
            bad.append(f"job {job_id} was lost (stopped)")
    return bad


def summary(pod: Pod) -> dict[str, Any]:
    recs = pod.orch.done
    return {"recoveries": len(recs), "active": len(pod.orch.active),
            "by_kind": {k: sum(r.kind == k for r in recs) for k in sorted({r.kind for r in recs})}}
