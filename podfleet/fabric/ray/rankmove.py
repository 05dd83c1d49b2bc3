"""Rank moves on the Ray fabric: one lost rank actor is replaced while the other ranks'
actors (and their processes) stay alive; the worker side is ``training/regroup.py``, as on
the local fabric (``fabric/local/rankmove.py``).

When one rank's actor of a built-in data-parallel gang dies (its process killed, its node
lost), the survivors' next collective fails and each keeps its model and optimizer in
memory and waits for the gang's next rendezvous (``cfg.regroup_file``, on its own node).
The poller (``runner.py``) notices the death and calls ``begin``: the job is RECOVERING
(event ``job-recovering``, ``mechanism: rank-move``) and a mover thread (``run``):

1. re-reads the cluster's nodes (a rank lost with its node must not go back onto it) and
   picks the rank's new chip: a spare that passes its check (healthy, free, its node
   alive), else a free chip that does, else the rank's own chip once it does (never a
   drained one: ``RayFabric.set_chip_state`` isolates it and ends its rank's actor,
   ``runner.evict``, which the poller then sees die as any lost rank);
2. places the new actor: on its own chip, in its own bundle (freed by the dead actor);
   on a spare or a free chip, in a placement group of one bundle pinned to that chip's
   node. A ``pack`` gang (the default) gives each rank a placement group of its own, so
   the group of the chip the rank left is removed and that chip is free again; in a
   gang-wide group (``strict_pack``, the spread strategies) the chip stays held by the job
   while the group still reserves its bundle (Ray cannot shrink one), until the job ends;
3. asks rank 0's actor (the new one, when rank 0 was lost) for a fresh port on its node:
   the new rendezvous (generation + 1, same world size) is sent to every survivor's actor,
   which writes it on its node, and the new actor starts its rank with ``join``.

Every rank joins the new process group, the newest state a survivor holds is broadcast,
and each rank reports ``regrouped``: ``finish`` puts the job back to RUNNING
(``job-resumed``, ``source: replica``) and the first step trained after it closes the
recovery (``recovered``, with ``resume_s`` from the loss's detection).

A relaunch of the whole gang stays the fallback, reported as such: a user script, a
one-rank gang, a hang, the ``rank_moves`` option off, a second rank lost, no chip that
passes its check, or a move that does not re-form within the gang's ``regroup_timeout_s``
(plus the start of an actor): ``abort`` ends the gang with the lost rank blamed, and the
control plane relaunches it from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Protocol

from podfleet.fabric.base import ChipState, RunState
from podfleet.fabric.local.rankmove import MECHANISM, rendezvous_doc
from podfleet.fabric.ray import control, supervisor
from podfleet.fabric.ray.gang import bundle_selectors, chip_trouble
from podfleet.fabric.ray.jobs import ExitCause, RankRecord, RayJob
from podfleet.fabric.ray.probe import gcs_unreachable
from podfleet.fabric.ray.standby import Standbys
from podfleet.fabric.ray.views import GangFabric, GangRunner


class MoveFabric(GangFabric, Protocol):
    """What a move uses of the fabric (``RayFabric``, through ``runner.RunnerHost``)."""

    @property
    def spares(self) -> tuple[int, ...]: ...

    @property
    def gcs(self) -> tuple[str, int] | None: ...

    def chip_states(self) -> list[ChipState]: ...


class MoveRunner(GangRunner, Protocol):
    """What a move uses of the runner (``runner.JobRunner``), declared here so this module
    never imports the runner that imports it."""

    @property
    def f(self) -> MoveFabric: ...

    @property
    def standbys(self) -> Standbys: ...

    def read_nodes(self) -> None: ...

    def end_gang(self, job: RayJob, blamed: RankRecord | None) -> None: ...

HELLO_TIMEOUT_S = 120.0  # a new actor's start on a busy cluster (starter.START_TIMEOUT_S)


def eligible(job: RayJob, lost: RankRecord, regroup_file: str | None) -> bool:
    """Whether the loss of ``lost`` (just settled) can be a rank move rather than a relaunch.
    Hold the lock."""
    if regroup_file is None or job.state is not RunState.RUNNING or len(job.ranks) < 2:
        return False
    if lost.cause is not ExitCause.INFRA or lost.killed_by not in (None, "fault", "drain"):
        return False  # a hang restarts the gang (the plane counts hang restarts); a stop is a stop
    return all(not r.done and r.actor is not None for r in job.ranks if r is not lost)


def begin(runner: MoveRunner, job: RayJob, lost: RankRecord, why: str) -> None:
    """Start moving ``lost`` (hold the lock): the job is RECOVERING, the rank's record is a
    placeholder until its new actor runs, and the mover thread does the Ray calls."""
    job.generation += 1
    job.moved_ranks += 1
    gen = job.generation
    now = time.monotonic()
    job.set_state(RunState.RECOVERING)
    job.moving = {"rank": lost.rank, "generation": gen, "from": lost.chip, "to": None, "lost": lost}
    if job.recovery is None:
        job.recovery = {"detect_mono": now, "last_step": job.step, "rank": lost.rank, "chip": lost.chip,
                        "cause": ExitCause.INFRA.value, "message": why}
    job.ranks[lost.rank] = RankRecord(lost.rank, lost.chip, pg=lost.pg)  # no actor yet: not polled
    job.log.append(f"[fabric] rank {lost.rank} (chip {lost.chip}) lost: {why}; moving it while the other "
                   f"ranks keep running (rendezvous generation {gen})")
    f = runner.f
    f.emit("worker-exited", job_id=job.job_id, chip=lost.chip, rank=lost.rank, cause=ExitCause.INFRA.value,
           exit_code=None, error=why, killed_by=lost.killed_by, reason=why, infra=True)
    f.emit("job-recovering", job_id=job.job_id, chip=lost.chip, rank=lost.rank, cause=ExitCause.INFRA.value,
           message=why, mechanism=MECHANISM)
    threading.Thread(target=run, args=(runner, job, gen), name=f"ray-move-{job.job_id}-{gen}", daemon=True).start()


def _current(job: RayJob, gen: int) -> bool:
    return job.moving is not None and job.moving["generation"] == gen and job.state is RunState.RECOVERING


def choose_chip(runner: MoveRunner, job: RayJob, old: int) -> tuple[str, int] | str:
    """(path, chip) for the lost rank, or why there is none (hold the lock): a spare that
    passes its check, else a free chip that does (the local fabric's and a relaunch's
    order), else the rank's own chip once it does (a drained chip never passes: it is
    isolated)."""
    f = runner.f
    states = f.chip_states()
    spares = set(f.spares)
    for path, chips in (("spare", sorted(spares)), ("free-chip", [c for c in range(len(states)) if c not in spares])):
        for c in chips:
            if c != old and chip_trouble(runner.state, f.nodes, states, c, f.unreachable) is None:
                return path, c
    why = chip_trouble(runner.state, f.nodes, states, old, f.unreachable, holder=job.job_id)
    return why if why is not None else ("own-chip", old)


def run(runner: MoveRunner, job: RayJob, gen: int) -> None:
    """The mover thread: Ray calls without the lock, applied under it while the move is current."""
    ray, f, state = runner.state.ray, runner.f, runner.state
    actor: Any = None
    pg: Any = None
    try:
        gcs = f.gcs
        lost_head = gcs_unreachable(gcs) if gcs is not None else None
        if lost_head is not None:  # no Ray call to a dead GCS: Ray would abort the process
            abort(runner, job, gen, f"the Ray head does not answer ({lost_head})")
            return
        runner.read_nodes()  # the poller's view may be 2 s old: a node lost with its rank is seen now
        with state.lock:
            if not _current(job, gen):
                return
            rank, old = int(job.moving["rank"]), int(job.moving["from"])  # type: ignore[index]
            placed = choose_chip(runner, job, old)
            if isinstance(placed, str):
                abort(runner, job, gen, f"no chip for rank {rank}: {placed}")
                return
            path, new = placed
            job.moving["to"] = new  # type: ignore[index]
            state.chip_job[new] = (job.job_id, rank)  # reserved for the move
            selectors = bundle_selectors(f.nodes, job, [new]) if new != old else None
            node = f.nodes.node_of(new)
        warm = runner.standbys.take(node.node_id) if node is not None else None
        if warm is not None:
            # Imports done: it runs the rank beside the bundle that reserves the chip (an
            # abort from here on kills it, as it would a cold actor).
            name, actor = warm
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if new == old:
            with state.lock:
                own = job.ranks[rank].pg  # the rank's own group (a ``pack`` gang), else its bundle of the gang's
            strategy = (PlacementGroupSchedulingStrategy(own, placement_group_bundle_index=0) if own is not None
                        else PlacementGroupSchedulingStrategy(job.pg, placement_group_bundle_index=rank))
        else:
            # Its own bundle on the new chip's node; detached, as the gang's actors are.
            pg = placement_group([f.gang.bundle()], strategy="PACK", name=f"podfleet-{job.job_id}-move{gen}",
                                 bundle_label_selector=selectors, lifetime="detached")
            ready, _ = ray.wait([pg.ready()], timeout=f.placement_timeout_s)
            if not ready:
                abort(runner, job, gen, f"the bundle for rank {rank} on chip {new} was not placed within "
                                        f"{f.placement_timeout_s:g} s", pg, actor)
                return
            strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
        if warm is None:
            name = supervisor.rank_name(job.job_id, rank, f"{job.launch}-g{gen}")
            actor = runner.actor_class().options(
                **f.gang.actor_options(), max_concurrency=4, max_restarts=0, name=name, namespace=f.namespace,
                lifetime="detached", scheduling_strategy=strategy).remote(job.job_id, rank)
        info = ray.get(actor.hello.remote(), timeout=HELLO_TIMEOUT_S)
        info["standby"] = warm is not None
        with state.lock:
            head = job.ranks[0]
        master = info if rank == 0 else ray.get(head.actor.hello.remote(), timeout=HELLO_TIMEOUT_S)
        freed = _place(runner, job, gen, path, new, name, actor, info, pg, str(master["ip"]), int(master["port"]))
        if freed is not None:
            _drop(runner, None, freed)  # the chip the rank left is free for Ray's scheduler again
    except Exception as exc:  # Ray errors of every kind end the move, never the fabric
        with state.lock:
            current = _current(job, gen)
        if current:
            abort(runner, job, gen, f"the move failed: {type(exc).__name__}: {exc}", pg, actor)


def _place(runner: MoveRunner, job: RayJob, gen: int, path: str, new: int, name: str, actor: Any,
           info: dict[str, Any], pg: Any, addr: str, port: int) -> Any:
    """The new actor runs: hand every rank the rendezvous and start the replacement. The
    placement group of the chip the rank left, for the caller to remove (None: none)."""
    f, state = runner.f, runner.state
    with state.lock:
        if not _current(job, gen):
            _drop(runner, actor, pg)
            return None
        moving = job.moving
        assert moving is not None
        rank, old = int(moving["rank"]), int(moving["from"])
        left = job.ranks[rank].pg  # the rank's own group (a ``pack`` gang): None with a gang-wide one
        own = (left if new == old else pg) if left is not None else None
        freed = left if left is not None and new != old else None
        r = job.ranks[rank] = RankRecord(rank, new, actor=actor, name=name, info=info, pg=own)
        runner.standbys.taken(name)
        r.last_seen_mono = time.monotonic()
        if pg is not None and own is None:
            job.extra_pgs.append(pg)
        if freed is not None:
            if state.chip_job.get(old, ("",))[0] == job.job_id:
                del state.chip_job[old]
            job.log.append(f"[fabric] chip {old} is free again: the placement group of its rank is removed")
        elif new != old:
            # Its bundle in the gang's placement group stays reserved until the gang ends.
            job.held.add(old)
            job.log.append(f"[fabric] chip {old} stays held by job {job.job_id} until it ends: the gang's "
                           "placement group still reserves its bundle")
        cfg = f.gang.worker_config(job, rank, addr, port).replace(join=True, generation=gen)
        doc = rendezvous_doc(gen, port, len(job.ranks), addr).decode()
        files = control.files(job, len(job.ranks))
        for other in job.ranks:
            if other.rank != rank and other.actor is not None:
                other.actor.control.remote(files["regroup_file"], doc)
        actor.start.remote(cfg.to_json(), job.workdir)
        if job.supervisor is not None:
            job.supervisor.moved.remote({"rank": rank, "chip": new, "info": info, "cfg": cfg.to_json(),
                                         "name": name, "pg": own}, None if own is not None else pg)
        rec: dict[str, Any] = job.recovery if job.recovery is not None else {"detect_mono": time.monotonic(),
                                                                             "last_step": job.step}
        rec.update(mechanism=MECHANISM, path=path, moves={str(rank): [old, new]} if new != old else {},
                   source="replica", restored_step=job.step, relaunch_mono=time.monotonic(), generation=gen)
        # Where a move's time goes (the log line of its end): the new actor up, then re-formed.
        rec["actor_s"] = round(time.monotonic() - float(rec["detect_mono"]), 3)
        job.recovery = rec
        job.log.append(f"[fabric] rank {rank} on chip {new}: node {str(info.get('node_id'))[:12]} ip {info.get('ip')} "
                       f"pid {info.get('pid')} (rank move {path}, generation {gen}, rendezvous {addr}:{port})")
        timeout = float(cfg.regroup_timeout_s) + HELLO_TIMEOUT_S
    timer = threading.Timer(timeout, lambda: _timed_out(runner, job, gen, timeout))
    timer.daemon = True  # never keeps a finished process alive
    timer.start()
    return freed


def finish(runner: MoveRunner, job: RayJob, msg: dict[str, Any]) -> None:
    """A rank reports the re-formed gang shares its state: the move is done (hold the lock)."""
    moving = job.moving
    if moving is None or int(msg.get("generation", -1)) != moving["generation"]:
        return
    job.moving = None
    step = int(msg.get("step", job.step))
    rec = job.recovery
    if rec is not None:
        rec.update(restored_step=step, steps_lost=max(0, int(rec.get("last_step", step)) - step),
                   source_rank=msg.get("source_rank"), restore_s=msg.get("restore_s"))
    job.step = step
    job.pending_ckpt = {s: got for s, got in job.pending_ckpt.items() if s > step}  # the broken gang's
    if job.state is RunState.RECOVERING:
        job.set_state(RunState.RUNNING)
    took = f"{time.monotonic() - float(rec['detect_mono']):.2f}" if rec is not None else "?"
    job.log.append(f"[fabric] rank move generation {moving['generation']} done: rank {moving['rank']} on chip "
                   f"{moving['to']}, state of step {step} from rank {msg.get('source_rank')}; its actor ran "
                   f"{(rec or {}).get('actor_s', '?')} s and the gang re-formed {took} s after the loss was seen")
    runner.f.emit("job-resumed", job_id=job.job_id, chip=moving["to"], attempt=1, source="replica",
                  restored_step=step, chips=[r.chip for r in job.ranks], mechanism=MECHANISM, path=MECHANISM,
                  generation=moving["generation"])


def trained(runner: MoveRunner, job: RayJob, step: int) -> None:
    """Rank 0 trained ``step``: the first step after a finished move closes its recovery."""
    rec = job.recovery
    if rec is None or job.moving is not None or "relaunch_mono" not in rec or step <= int(rec["restored_step"]):
        return
    job.recovery = None
    rec["resume_s"] = round(time.monotonic() - float(rec["detect_mono"]), 4)
    rec["first_step"] = step
    runner.f.emit("recovered", job_id=job.job_id, **{k: v for k, v in rec.items() if not k.endswith("_mono")})


def blamed(job: RayJob) -> RankRecord | None:
    """During a move: the lost rank's record (a survivor that gave up is not the cause)."""
    lost = job.moving.get("lost") if job.moving is not None else None
    return lost if isinstance(lost, RankRecord) else None


def abort(runner: MoveRunner, job: RayJob, gen: int, why: str, pg: Any = None, actor: Any = None) -> None:
    """Give up the move: the gang ends with the lost rank blamed, and the plane relaunches it."""
    with runner.state.lock:
        if not _current(job, gen):
            _drop(runner, actor, pg)
            return
        lost = blamed(job)
        job.log.append(f"[fabric] rank move generation {gen} abandoned: {why}; the gang ends and is relaunched")
        to = job.moving["to"] if job.moving is not None else None
        if to is not None and to not in {r.chip for r in job.ranks} | job.held \
                and runner.state.chip_job.get(to, ("",))[0] == job.job_id:
            del runner.state.chip_job[to]  # reserved for a replacement that never ran
        job.recovery = None
        job.moved_ranks -= 1  # the gang's failure, charged to the lost rank, counts this loss
    _drop(runner, actor, pg)
    runner.end_gang(job, lost)


def _timed_out(runner: MoveRunner, job: RayJob, gen: int, timeout_s: float) -> None:
    with runner.state.lock:
        current = _current(job, gen)
    if current:
        abort(runner, job, gen, f"the gang did not re-form within {timeout_s:g} s")


def _drop(runner: MoveRunner, actor: Any, pg: Any) -> None:
    """Kill an actor and remove a placement group a move made but no longer uses."""
    ray = runner.state.ray
    if actor is not None:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
    if pg is not None:
        from ray.util.placement_group import remove_placement_group

        with contextlib.suppress(Exception):
            remove_placement_group(pg)

