"""Taking back a gang the agent kept running while no control plane was attached.

From what the agent held at ``hello`` (each worker's config, its WorkerGroupSpec, its
journal) the job's runtime record is rebuilt, the workers are tracked again, and the
journal is replayed in report order through the usual handlers: progress rebuilds the
loss history and the step, checkpoints not yet recorded are recorded, an exit while the
plane was down starts the recovery it would have started then. A checkpoint at or below
the step the plane already recorded is not replayed (it would be recorded twice).
"""

from __future__ import annotations

from typing import Any, Protocol

from podfleet.fabric.base import Adoption, WorkerGroupSpec
from podfleet.fabric.local.agent.client import AgentSpawner
from podfleet.fabric.local.jobs import TERMINAL, LocalJob
from podfleet.fabric.local.process import OnExit, OnMessage
from podfleet.fabric.local.speed import RankSpeed
from podfleet.fabric.local.state import LocalState
from podfleet.training.config import WorkerConfig


class AdoptHost(Protocol):
    @property
    def state(self) -> LocalState: ...

    def claim(self, chip: int, job_id: str) -> None: ...

    def busy_with(self, chip: int) -> str | None: ...

    def emit(self, kind: str, *, chip: int | None = None, job_id: str | None = None, **detail: Any) -> None: ...


def gangs(found: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for info in found:
        if info.get("config"):
            out.setdefault(WorkerConfig.from_json(info["config"]).job_id, []).append(info)
    return out


def adopt(host: AdoptHost, spawner: AgentSpawner, infos: list[dict[str, Any]], checkpoint_step: int | None,
          on_msg: OnMessage, on_exit: OnExit) -> tuple[Adoption | None, list[dict[str, Any]]]:
    """The adoption of one job's workers, and the workers left over (older attempts, or
    all of them when the gang cannot be taken back: the caller stops those)."""
    top = max(int(i["attempt"]) for i in infos)
    current = {WorkerConfig.from_json(i["config"]).rank: i for i in infos if int(i["attempt"]) == top}
    rest = [i for i in infos if int(i["attempt"]) != top]
    cfg0 = WorkerConfig.from_json(current[min(current)]["config"])
    group = dict(current[min(current)].get("group") or {})
    job_id = cfg0.job_id
    world = cfg0.world_size
    chips = [int(current[r]["chip"]) for r in range(world) if r in current]
    old = host.state.jobs.get(job_id)
    if (len(chips) != world or not group or (old is not None and old.state not in TERMINAL)
            or any(host.busy_with(c) not in (None, job_id) for c in chips)):
        return None, infos
    spec = WorkerGroupSpec(job_id=job_id, chips=tuple(chips), model=str(group["model"]), steps=int(group["steps"]),
                           checkpoint_interval=int(group.get("checkpoint_interval", 0)),
                           entrypoint=group.get("entrypoint"), options=dict(group.get("options") or {}))
    opts = spec.options
    job = LocalJob(spec, chips, cfg0.replace(rank=0), int(opts.get("max_retries", 0)), bool(opts.get("recover", True)),
                   attempt=top, checkpoint_step=checkpoint_step)
    if spec.entrypoint is None and world > 1:
        even = (cfg0.global_batch // world,) * world
        job.speed = RankSpeed(world, [(0, tuple(cfg0.shares) or even)])
    host.state.jobs[job_id] = job
    for c in chips:
        host.claim(c, job_id)
    floor = checkpoint_step if checkpoint_step is not None else -1

    def skip(entry: dict[str, Any]) -> bool:
        msg = entry.get("msg") or {}
        return msg.get("type") == "checkpoint" and int(msg.get("step", -1)) <= floor

    workers, replayed = spawner.adopt([current[r] for r in range(world)], on_msg, on_exit, skip)
    job.workers = {wp.rank: wp for wp in workers}
    job.log.append(f"[attempt {top}] re-attached after a control-plane restart: pids "
                   f"{[wp.pid for wp in workers]}, {replayed} reports replayed")
    return Adoption(job_id, tuple(chips), tuple(wp.pid for wp in workers), top, replayed), rest


def take_back(host: AdoptHost, spawner: AgentSpawner, job_id: str, checkpoint_step: int | None,
              on_msg: OnMessage, on_exit: OnExit) -> Adoption | None:
    """``LocalFabric.adopt`` (hold the lock): the gang of ``job_id`` the agent kept, adopted
    (event ``job-adopted``), its older workers stopped; None when there is none to take."""
    infos = gangs(spawner.found).get(job_id)
    if not infos:
        return None
    adoption, rest = adopt(host, spawner, infos, checkpoint_step, on_msg, on_exit)
    if rest:
        spawner.discard(rest)
    if adoption is not None:
        host.emit("job-adopted", job_id=job_id, chips=list(adoption.chips), pids=list(adoption.pids),
                  attempt=adoption.attempt, replayed=adoption.replayed)
    return adoption


def discard_unadopted(spawner: AgentSpawner) -> list[str]:
    """Stop the workers the agent held for jobs not adopted (hold the lock); their job ids."""
    left = gangs(spawner.found)
    for infos in left.values():
        spawner.discard(infos)
    spawner.discard([i for i in spawner.found if not i.get("config")])
    return sorted(left)
