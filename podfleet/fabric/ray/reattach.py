"""Taking back a Ray gang that ran on through a control-plane restart.

From the gang's supervisor (``supervisor.py``) the job's runtime record is rebuilt: its
spec, strategy, directories, placement group, each rank's chip, worker config and where
it runs. Each rank's actor is looked up by name and polled for its journal, which the
runner then applies in report order through its usual handlers (``JobRunner.replay``):
progress rebuilds the step and the loss history, checkpoints not yet recorded are
recorded, a rank that ended while the plane was down ends now, and a rank whose actor
died meanwhile is an infrastructure loss that ends the gang, so the plane's recovery
runs as it would have then. Ray calls are made here, without the fabric's lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podfleet.errors import ConflictError
from podfleet.fabric.base import Adoption, RunState
from podfleet.fabric.ray import supervisor, telemetry
from podfleet.fabric.ray.jobs import TERMINAL, RankRecord, RayJob, RayState
from podfleet.fabric.ray.runner import JobRunner
from podfleet.training.config import WorkerConfig


@dataclass
class Found:
    """A gang read back from Ray: the job, and per rank its journal or why it is gone."""

    job: RayJob
    config: WorkerConfig  # rank 0's
    journals: dict[int, dict[str, Any]] = field(default_factory=dict)
    died: dict[int, str] = field(default_factory=dict)


def read(ray: Any, namespace: str, named: supervisor.Named) -> Found | None:
    """The gang ``named`` (a supervisor) leads, or None when its supervisor is gone; a
    ConflictError when Ray does not answer in time (the plane resumes the job instead)."""
    sup = supervisor.handle(ray, named.name, namespace)
    if sup is None:
        return None
    timeout = supervisor.LOOKUP_TIMEOUT_S
    try:
        rec = ray.get(sup.state.remote(), timeout=timeout)
    except ray.exceptions.RayActorError:
        return None
    except ray.exceptions.GetTimeoutError:
        raise ConflictError(f"the gang's supervisor {named.name} did not answer within {timeout:g} s",
                            field="job_id") from None
    job = RayJob(rec["spec"], rec["strategy"], rec["workdir"], rec["checkpoint_dir"])
    job.launch, job.pg, job.supervisor = str(rec["launch"]), rec.get("pg"), sup
    ranks = sorted(rec["ranks"], key=lambda x: int(x["rank"]))
    job.ranks = [RankRecord(int(x["rank"]), int(x["chip"]), name=str(x["name"]), info=dict(x.get("info") or {}),
                            pg=x.get("pg")) for x in ranks]
    job.extra_pgs = list(rec.get("pgs") or [])  # those of moved ranks (rankmove.py)
    found = Found(job, WorkerConfig.from_json(ranks[0]["cfg"]))
    polls = {}
    for r, x in zip(job.ranks, ranks, strict=True):
        r.actor = supervisor.handle(ray, str(x["name"]), namespace)
        if r.actor is None:
            found.died[r.rank] = "its actor died while the control plane was down"
        else:
            polls[r.rank] = r.actor.journal.remote()
    for rank, ref in polls.items():
        try:
            found.journals[rank] = ray.get(ref, timeout=timeout)
        except ray.exceptions.RayActorError:
            found.died[rank] = "its actor died while the control plane was down"
        except ray.exceptions.GetTimeoutError:
            raise ConflictError(f"rank {rank}'s actor did not answer within {timeout:g} s", field="job_id") from None
    return found


def adopt(state: RayState, runner: JobRunner, namespace: str, n_chips: int, job_id: str,
          checkpoint_step: int | None) -> Adoption | None:
    """Take back ``job_id``'s gang (``RayFabric.adopt``): read it, register it on its chips
    and replay its journals; None when Ray holds no gang of that job."""
    ray = state.ray
    named = supervisor.find(ray, namespace).get(job_id)
    if named is None:
        return None
    found = read(ray, namespace, named)
    if found is None:
        return None
    job = found.job
    chips = [r.chip for r in job.ranks]
    with state.lock:
        old = state.jobs.get(job_id)
        if old is not None and old.state not in TERMINAL:
            raise ConflictError(f"job {job_id} is already {old.state.value} on this fabric", field="job_id")
        bad = [c for c in chips if not 0 <= c < n_chips or c in state.chip_job]
        if bad:
            raise ConflictError(f"the gang's chips {bad} are not this cluster's or are in use", field="chips")
        job.set_state(RunState.STARTING)
        job.set_state(RunState.RUNNING)
        if job.spec.entrypoint is None:
            job.speed = telemetry.speed_for(job, found.config)
        state.jobs[job_id] = job
        for r in job.ranks:
            state.chip_job[r.chip] = (job_id, r.rank)
        replayed = runner.replay(job, found.journals, found.died, checkpoint_step)
        pids = tuple(int(r.info.get("pid") or 0) for r in job.ranks)
        job.log.append(f"[fabric] re-attached after a control-plane restart: pids {list(pids)}, "
                       f"{replayed} reports replayed" + "".join(
                           f"; rank {rank} {why}" for rank, why in sorted(found.died.items())))
    runner.start()
    return Adoption(job_id, tuple(chips), pids, 1, replayed)


def live_names(state: RayState) -> set[str]:
    """The actor names of every gang ``state`` holds that has not ended (``discard`` spares them)."""
    with state.lock:
        return set(state.standby_names) | {name for job in state.jobs.values() if job.state not in TERMINAL and job.launch
                for name in [supervisor.supervisor_name(job.job_id, job.launch),
                             *(r.name or supervisor.rank_name(job.job_id, r.rank, job.launch) for r in job.ranks)]}
