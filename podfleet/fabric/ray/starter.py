"""Starting a Ray gang (one starter thread per launch): wait for the Ray cluster if it is
unreachable, place the gang's placement groups (one per rank for ``pack``, pinned to the
ranks' nodes, so a moved rank frees its chip; one for the gang otherwise), watching the
nodes their bundles are pinned to, create one detached actor per rank, greet them, record the gang's supervisor
(``supervisor.py``) and start each rank's worker.

Ray calls are made without the fabric's lock held; their results are applied under it,
re-checking that the job was not stopped meanwhile. A start that cannot go on ends through
the runner (``StartRunner.fail``, ``lose_gang``), declared here so this module never
imports the runner that imports it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Protocol

from podfleet.fabric.ray import supervisor, telemetry
from podfleet.fabric.ray.gang import bundle_selectors
from podfleet.fabric.ray.jobs import STRATEGIES, TERMINAL, RankRecord, RayJob, RunState
from podfleet.fabric.ray.views import GangFabric, GangRunner
from podfleet.training.config import WorkerConfig

START_TIMEOUT_S = 120.0  # actor creation + hello on a busy cluster
PLACEMENT_SLICE_S = 1.0  # how often a gang waiting for its placement group looks at its nodes


class StartFabric(GangFabric, Protocol):
    """What a start uses of the fabric (``RayFabric``, through ``runner.RunnerHost``)."""

    @property
    def resource(self) -> str: ...


class StartRunner(GangRunner, Protocol):
    """What a start uses of the runner (``runner.JobRunner``)."""

    @property
    def f(self) -> StartFabric: ...

    def stopped(self) -> bool: ...

    def supervisor_class(self) -> Any: ...

    def fail(self, job: RayJob, blamed: RankRecord | None, reason: str) -> None: ...

    def lose_gang(self, job: RayJob, blamed: RankRecord, why: str) -> None: ...


def start(runner: StartRunner, job: RayJob) -> None:
    """Start the gang of ``job`` (its starter thread): placement group, actors, supervisor,
    then each rank's worker; a start that fails ends the job (``runner.fail``)."""
    f, ray = runner.f, runner.state.ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    n = len(job.ranks)
    try:
        if not _wait_for_link(runner, job):
            return
        with runner.state.lock:
            selectors = bundle_selectors(f.nodes, job)
        # Detached, as the gang's actors are: a driver's placement group goes with it.
        if job.strategy == "pack" and selectors is not None:
            # Each rank's bundle pinned to its chip's node, in a placement group of its own:
            # a rank that moves away frees its chip (Ray cannot shrink a placement group).
            for r, sel in zip(job.ranks, selectors, strict=True):
                r.pg = placement_group([f.gang.bundle()], strategy="PACK", name=f"podfleet-{job.job_id}-r{r.rank}",
                                       bundle_label_selector=[sel], lifetime="detached")
            pgs = [r.pg for r in job.ranks]
        else:
            job.pg = placement_group([f.gang.bundle() for _ in range(n)], strategy=STRATEGIES[job.strategy],
                                     name=f"podfleet-{job.job_id}", bundle_label_selector=selectors,
                                     lifetime="detached")
            pgs = [job.pg]
        ready = _wait_placed(runner, job, pgs)
        if ready is None:
            return  # lost meanwhile (a node, the cluster): reported as such
        if not ready:
            avail = ray.available_resources().get(f.resource, 0.0)
            runner.fail(job, None, f"placement group of {n} x {f.gang.bundle()} ({job.strategy}) not placed "
                                   f"within {f.placement_timeout_s:g} s; {avail:g} {f.resource} free")
            return
        runner.actor_class()
        with runner.state.lock:
            if job.state is not RunState.PLACING:
                # Stopped while placing: stop() may have run before the groups were set.
                from ray.util.placement_group import remove_placement_group

                for pg in pgs:
                    with contextlib.suppress(Exception):
                        remove_placement_group(pg)
                return
            for r in job.ranks:
                where = (PlacementGroupSchedulingStrategy(r.pg, placement_group_bundle_index=0) if r.pg is not None
                         else PlacementGroupSchedulingStrategy(job.pg, placement_group_bundle_index=r.rank))
                r.actor = runner.actor_class().options(
                    **f.gang.actor_options(), max_concurrency=4, max_restarts=0,
                    name=supervisor.rank_name(job.job_id, r.rank, job.launch), namespace=f.namespace,
                    lifetime="detached", scheduling_strategy=where,
                ).remote(job.job_id, r.rank)
            job.set_state(RunState.STARTING)
        infos = ray.get([r.actor.hello.remote() for r in job.ranks], timeout=START_TIMEOUT_S)
        master = infos[0]
        with runner.state.lock:
            if job.state is not RunState.STARTING:
                return
            cfgs = [f.gang.worker_config(job, r.rank, master["ip"], int(master["port"])) for r in job.ranks]
            job.supervisor = _start_supervisor(runner, job, infos, cfgs)
            for r, info, cfg in zip(job.ranks, infos, cfgs, strict=True):
                r.info = info
                if r.rank == 0:
                    job.speed = telemetry.speed_for(job, cfg)
                r.actor.start.remote(cfg.to_json(), job.workdir)
                job.log.append(f"[fabric] rank {r.rank} on chip {r.chip}: node {str(info.get('node_id'))[:12]} "
                               f"ip {info.get('ip')} pid {info.get('pid')}")
            job.set_state(RunState.RUNNING)
        f.emit("job-started", job_id=job.job_id, chip=job.ranks[0].chip,
               nodes=sorted({i["ip"] for i in infos}), placement=job.strategy,
               master=f"{master['ip']}:{master['port']}", chips=[r.chip for r in job.ranks],
               ranks=[{"rank": r.rank, "chip": r.chip, "node_id": r.info.get("node_id"),
                       "ip": r.info.get("ip"), "pid": r.info.get("pid")} for r in job.ranks])
    except Exception as exc:  # Ray errors of every kind end the start, never the fabric
        if job.state not in TERMINAL and job.state is not RunState.STOPPING:
            runner.fail(job, None, f"could not start the gang: {type(exc).__name__}: {exc}")


def _start_supervisor(runner: StartRunner, job: RayJob, infos: list[dict[str, Any]],
                      cfgs: list[WorkerConfig]) -> Any:
    """The gang's detached record, for a plane that re-attaches (``supervisor.py``)."""
    f = runner.f
    renv = f.gang.actor_options().get("runtime_env")
    record = {"spec": job.spec, "strategy": job.strategy, "workdir": job.workdir,
              "checkpoint_dir": job.checkpoint_dir, "launch": job.launch, "pg": job.pg,
              "ranks": [{"rank": r.rank, "chip": r.chip, "info": info, "cfg": cfg.to_json(),
                         "name": supervisor.rank_name(job.job_id, r.rank, job.launch), "pg": r.pg}
                        for r, info, cfg in zip(job.ranks, infos, cfgs, strict=True)]}
    return runner.supervisor_class().options(
        name=supervisor.supervisor_name(job.job_id, job.launch), namespace=f.namespace, lifetime="detached",
        num_cpus=0, max_restarts=0, **({"runtime_env": renv} if renv else {}),
    ).remote(record)


def _wait_for_link(runner: StartRunner, job: RayJob) -> bool:
    """A gang launched while the Ray cluster is unreachable waits for it (PLACING),
    saying why once; False when the job was stopped meanwhile."""
    said = False
    while runner.f.unreachable is not None:
        if job.state is not RunState.PLACING or runner.stopped():
            return False
        if not said:
            said = True
            job.log.append(f"[fabric] waiting: {runner.f.unreachable}")
            runner.f.emit("job-waiting", job_id=job.job_id, chip=job.ranks[0].chip, reason=runner.f.unreachable)
        time.sleep(PLACEMENT_SLICE_S)
    return job.state is RunState.PLACING


def _wait_placed(runner: StartRunner, job: RayJob, pgs: list[Any]) -> bool | None:
    """Wait for the placement groups in slices, watching the nodes their bundles are pinned
    to: a pinned node that dies (or the cluster lost) ends the wait at once as a lost
    gang, never a 60 s placement failure of the job. None when so reported."""
    ray, f = runner.state.ray, runner.f
    refs = [pg.ready() for pg in pgs]
    deadline = time.monotonic() + f.placement_timeout_s
    while True:
        slice_s = min(PLACEMENT_SLICE_S, max(0.0, deadline - time.monotonic()))
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=slice_s)
        if len(ready) == len(refs):
            return True
        if f.unreachable is not None:
            return None  # lose_all reports it
        with runner.state.lock:
            lost = [r for r in job.ranks if job.strategy in ("pack", "strict_pack") and f.nodes.lost(r.chip)]
            node = f.nodes.node_of(lost[0].chip) if lost else None
        if lost and node is not None:
            runner.lose_gang(job, lost[0], f"its Ray node {node.short} ({node.ip}) is not alive")
            return None
        if time.monotonic() >= deadline:
            return False
