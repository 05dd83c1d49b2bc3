"""The scheduler: a queue, the framework, and the preemption contract, behind one class.

Every method runs on the engine thread (single writer). Times are passed in (``now_s``)
or read from ``clock`` so the same code runs in virtual or paced time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from podfleet.errors import ConflictError, NotFoundError
from podfleet.fabric.base import ChipState
from podfleet.hardware.topology import FleetTopology, Topology
from podfleet.scheduler import fleet, starvation
from podfleet.scheduler import status as st
from podfleet.scheduler.extension import ShapePlanner
from podfleet.scheduler.framework import Framework, FrameworkConfig, Handle
from podfleet.scheduler.jobs import JobPhase, SchedulerJob
from podfleet.scheduler.preemption_contract import HOLDING, PreemptionContract
from podfleet.scheduler.queue import QueuePolicy, check_quotas, order, within_quota
from podfleet.scheduler.queues import QueueSpec, with_defaults
from podfleet.scheduler.reservations import Reservation, ReservationBook, choose_chips
from podfleet.scheduler.spares import choose_spares
from podfleet.scheduler.state import FREE, SchedulerView
from podfleet.scheduler.status import Code, Status
from podfleet.scheduler.types import Decision, DecisionKind, JobRequest, Nomination, Placement


def _limit(job: JobRequest) -> float:
    return float("inf") if job.time_limit_s is None else job.time_limit_s


class Scheduler(PreemptionContract):
    """The queue, the framework and the preemption contract (``scheduler.preemption_contract``)."""

    def __init__(
        self,
        topology: Topology,
        *,
        spares: int | Sequence[int] | None = None,
        config: FrameworkConfig | Mapping[str, Any] | None = None,
        quotas: Mapping[str, int] | None = None,
        policy: QueuePolicy | None = None,
        clock: Callable[[], float] | None = None,
        planner: ShapePlanner | None = None,
        queues: Sequence[QueueSpec] = (),
        fleet_first_fit: bool = False,
    ) -> None:
        self.topology = topology
        # Gangs across pods: True takes the first free pods by index (the baseline the
        # placement benchmark compares the block-aware choice with).
        self.fleet_first_fit = fleet_first_fit
        self.cluster = SchedulerView(topology)
        self.clock = clock or (lambda: 0.0)
        self.policy = policy or QueuePolicy()
        self.quotas = check_quotas(quotas or {})
        self.jobs: dict[str, SchedulerJob] = {}
        self.queues = with_defaults(queues)
        self.queues.half_life_s = self.policy.fair_share_half_life_s
        # ``planner``: how ``parallelism: auto`` jobs get a plan per block shape (the
        # ``ShapePlanner`` port; ``compose.build`` wires ``planner.adapter.PlannerAdapter``).
        self.reservations = ReservationBook(chips_per_pod=self.cluster.chips_per_pod)
        self.handle = Handle(self.cluster, jobs=self.jobs, now_s=self.clock, queues=self.queues,
                             planner=planner, reservations=self.reservations)
        cfg = FrameworkConfig.from_dict(dict(config)) if isinstance(config, Mapping) else config
        self.framework = Framework(self.handle, cfg)
        self.pending: dict[str, None] = {}  # insertion-ordered set
        self.team_chips: dict[str, int] = {}
        self._next_slot = 0
        self._holder: tuple[int, int] | None = None  # (slot, pod) of the starving job's hold
        self._capacity_failure = False  # set by _schedule_one when no block exists even with preemption
        self._quota_refusal = False  # set by _schedule_one when the job's queue has no quota for it
        self.set_spares(spares or 0)

    # --- operator inputs -------------------------------------------------------------
    def set_spares(self, spares: int | Sequence[int]) -> tuple[int, ...]:
        chips = choose_spares(self.topology, spares) if isinstance(spares, int) else tuple(int(c) for c in spares)
        self.cluster.set_spares(chips)
        idx = self.cluster.blocks
        never = np.stack([~p.spare for p in self.cluster.pods])
        ever = np.asarray(idx.shape_free(idx.free_many(never)))
        self._ever_shapes: np.ndarray = np.asarray(ever.any(axis=0))
        # Per pod and block size: could a block of that size be free once every job is gone?
        sizes = np.asarray(idx.shape_size)
        self._ever_sizes = np.zeros((len(self.cluster.pods), self.cluster.chips_per_pod + 1), dtype=bool)
        for size in np.unique(sizes):
            self._ever_sizes[:, int(size)] = ever[:, sizes == size].any(axis=1)
        self._fleet_checks: dict[tuple[int, int | None, str | None], Status | None] = {}
        self.spares = chips
        return chips

    def set_chip_state(self, chip: int, state: ChipState) -> None:
        self.cluster.set_chip_state(chip, state)

    def set_link_states(self, states: Sequence[str]) -> bool:
        """The fabric's link states, one per ``topology.links`` index ("up", "degraded",
        "down"; a fleet's links pod by pod). New placements avoid blocks over links that
        are not up when an equal block without them exists, and a plan placed on such a
        block pays its detour. True when anything changed."""
        return self.cluster.set_link_states(states)

    def set_link_traffic(self, load: np.ndarray) -> bool:
        """Ring edges of the running jobs per directed link (``scheduler.traffic``): new
        placements prefer blocks whose rings stay off busy links. True when it changed."""
        return self.cluster.set_link_traffic(load)

    def set_telemetry(self, **arrays: np.ndarray) -> None:
        self.cluster.set_telemetry(**arrays)

    # --- queues ------------------------------------------------------------------------
    def set_queue(self, spec: QueueSpec) -> None:
        """Define or change a queue; jobs already holding chips keep them (a lowered
        nominal quota is enforced on new admissions, and by reclaim)."""
        self.queues.put(spec)

    def remove_queue(self, name: str) -> None:
        """Delete a queue; ConflictError while any job of it is queued or holds chips."""
        busy = sorted(j for j, r in self.jobs.items()
                      if r.request.queue == name and r.phase not in (JobPhase.FINISHED, JobPhase.REJECTED))
        if busy:
            more = f" and {len(busy) - 3} more" if len(busy) > 3 else ""
            raise ConflictError(f"queue {name!r} still has jobs: {', '.join(busy[:3])}{more}", field="queue")
        self.queues.remove(name)

    # --- reservations (``scheduler.reservations``) -----------------------------------------
    def choose_reservation_chips(self, n: int, *, start_s: float, end_s: float) -> tuple[int, ...]:
        """Chips for a new reservation of ``n`` chips over [start, end): none that another
        reservation overlapping that window holds. ValueError when too few are left."""
        taken = {c for r in self.reservations if r.start_s < end_s and start_s < r.end_s for c in r.chips}
        return choose_chips(self.cluster, n, taken)

    def set_reservation(self, r: Reservation) -> None:
        """Hold ``r``'s chips from now on (jobs already on them keep them)."""
        self.reservations.put(r)

    def remove_reservation(self, name: str) -> None:
        self.reservations.remove(name)

    def queue_jobs(self, name: str) -> dict[str, int]:
        """Jobs of a queue by phase (for DescribeQueue)."""
        out: dict[str, int] = {}
        for r in self.jobs.values():
            if r.request.queue == name:
                out[r.phase.value] = out.get(r.phase.value, 0) + 1
        return out

    # --- job lifecycle -----------------------------------------------------------------
    def time(self, now_s: float | None = None) -> float:
        """``now_s``, or the scheduler clock's time when None."""
        return self.clock() if now_s is None else now_s

    def across_pods(self, job: JobRequest) -> bool:
        """Placed across pods (``scheduler.fleet``): more chips than a pod, or ``pods`` > 1, on a fleet."""
        return isinstance(self.topology, FleetTopology) and (
            job.spans_pods or (job.pods is None and job.chips > self.cluster.chips_per_pod))

    def check(self, job: JobRequest) -> Status:
        """Could this job ever run here? ``UnschedulableAndUnresolvable`` with the reason if not."""
        if self.across_pods(job):
            assert isinstance(self.topology, FleetTopology)  # across_pods says so
            # The answer depends on the ask and the spares only: asked once per kind of gang.
            key = (job.chips, job.pods, job.topology_required)
            if key not in self._fleet_checks:
                self._fleet_checks[key] = fleet.unresolvable(job, self.topology, self.cluster.chips_per_pod,
                                                             fleet.block_sizes(self.framework), self._ever_sizes)
            why = self._fleet_checks[key]
            if why is not None:
                return why.by("fleet")
            quota = self.quotas.get(job.team)
            if quota is not None and job.chips > quota:
                return st.unresolvable(f"job asks {job.chips} chips; team {job.team!r} quota is {quota}")
            s = self.framework.admit({}, job)
            return s if s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE else st.SUCCESS
        s = self.framework.pre_filter({}, job)
        if s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return s
        idx = self.cluster.blocks
        if not self._ever_shapes[idx.shape_ids_for(job.chips, job.shape)].any():
            want = "x".join(map(str, job.shape)) if job.shape else f"{job.chips}-chip"
            return st.unresolvable(
                f"no {want} block avoids the {len(self.spares)} spare chips; spares are never used for jobs"
            )
        quota = self.quotas.get(job.team)
        if quota is not None and job.chips > quota:
            return st.unresolvable(f"job asks {job.chips} chips; team {job.team!r} quota is {quota}")
        s = self.framework.admit({}, job)  # only what does not depend on usage is final
        if s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return s
        return st.SUCCESS

    def submit(self, job: JobRequest, now_s: float | None = None, *, check: bool = True) -> Decision:
        """Queue ``job``. ``check=False`` skips the can-it-ever-fit check, for a job that
        already holds its chips (reloaded after a restart) and needs no new block."""
        if job.job_id in self.jobs:
            raise ConflictError(f"job {job.job_id} was already submitted", field="job_id")
        now = self.time(now_s)
        rec = SchedulerJob(job, self._next_slot, now, now)
        self._next_slot += 1
        self.jobs[job.job_id] = rec
        self.handle.slots[rec.slot] = job.job_id
        s = self.check(job) if check else st.SUCCESS
        if s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            rec.to(JobPhase.REJECTED, now)
            rec.reason = str(s)
            return Decision(job.job_id, DecisionKind.REJECTED, s)
        rec.reason = "Pending: waiting for the next scheduling cycle"
        self.pending[job.job_id] = None
        return Decision(job.job_id, DecisionKind.PENDING, st.SUCCESS)

    def schedule(self, now_s: float | None = None, max_jobs: int | None = None) -> list[Decision]:
        """One cycle over the queue; returns the BIND / PREEMPT / REJECTED decisions made."""
        now = self.time(now_s)
        out: list[Decision] = []
        holder_seen = False
        # Capacity failures seen this cycle: (chips, hbm per chip, priority, reason). A later
        # job that asks at least as much, at no higher priority, cannot fit either (the
        # cluster does not change within a cycle unless something binds, which clears
        # this), so it gets the same reason without another block search. This keeps a
        # cycle over a long queue of small jobs cheap (cf. Kubernetes' unschedulable queue).
        # With reservations the time limit counts too: a job with an earlier end may backfill
        # where a longer one could not (``inf``: no limit).
        failed: list[tuple[int, int, int, str, bool, str, tuple[str | None, int | None], float]] = []
        # Quota refusals seen this cycle, by (queue, chips): the same ask of the same queue
        # gets the same answer until something binds (quota use changes only then).
        refused: dict[tuple[str, int], str] = {}
        self.queues.advance(now)
        w = self.policy.fair_share_weight
        bonus = {q: w * self.queues.fair_share(q) for q in {self.jobs[j].request.queue for j in self.pending}} \
            if w and len(self.queues.specs) > 1 else None
        queue = order((self.jobs[j] for j in self.pending), now, self.policy, bonus)
        for n, rec in enumerate(queue):
            if max_jobs is not None and n >= max_jobs:
                break
            if rec.phase is not JobPhase.PENDING:
                continue
            # Total time queued (all stints: a preempted job keeps what it already waited).
            starving = rec.wait_s + now - rec.enqueued_s >= self.policy.starvation_s and not holder_seen
            if self._holder is not None and rec.slot == self._holder[0]:
                starvation.release(self.cluster, rec.slot, [self._holder[1]])  # its own hold is free to it
                self._holder = None
            req = rec.request
            hit = refused.get((req.queue, req.chips)) if not starving else None
            if hit is None and req.shape is None and not starving:
                # Same queue only: a job of another queue may reclaim where this one could not;
                # and one that may preempt is not answered by one that may not.
                # Gangs across pods: only one asking the same level and pod count shares the answer.
                level = (req.topology_required, req.pods)
                limit = _limit(req)
                hit = next((r for c, h, p, q, m, r, lv, t in failed if req.chips >= c and req.hbm_bytes_per_chip >= h
                            and req.priority <= p and req.queue == q and (m or not req.may_preempt)
                            and lv == level and limit >= t), None)
            if hit is not None:
                rec.reason = hit
                d = None
            else:
                self._capacity_failure = self._quota_refusal = False
                d = self._schedule_one(rec, now)
                if d is not None:
                    failed.clear()
                    refused.clear()
                elif self._quota_refusal:
                    refused[(req.queue, req.chips)] = rec.reason
                elif self._capacity_failure and req.shape is None:
                    failed.append((req.chips, req.hbm_bytes_per_chip, req.priority, req.queue, req.may_preempt,
                                   rec.reason, (req.topology_required, req.pods), _limit(req)))
            if d is not None:
                out.append(d)
            elif starving and self._holder is None and not self.across_pods(rec.request):
                holder_seen = True
                held = starvation.hold_block(self.cluster, rec.slot, rec.request.chips, rec.request.shape)
                if held is not None:
                    self._holder = (rec.slot, held[1])
                    rec.reason += f"; starving for {rec.wait_s + now - rec.enqueued_s:.0f} s: {held[0]}"
        return out

    def _schedule_one(self, rec: SchedulerJob, now: float) -> Decision | None:
        job, fw = rec.request, self.framework
        used = self.team_chips.get(job.team, 0)
        if not within_quota(used, job.chips, self.quotas.get(job.team)):
            rec.reason = f"Unschedulable: team {job.team!r} over quota: {used} of {self.quotas[job.team]} chips in use, job asks {job.chips}"
            return None
        state: dict[str, Any] = {"now_s": now}
        s = fw.admit(state, job)
        if s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return self._reject(rec, s, now)
        if not s.ok:
            verdict = state.get("admission")
            if verdict is not None and verdict.reclaim > 0:
                # Within nominal quota, but lent out: take it back before taking any block.
                ps, nom = fw.reclaim(state, job, s.reason)
                if ps.ok and nom is not None:
                    return self._nominate(rec, nom, now)
                s = ps
            else:
                self._quota_refusal = True  # no reclaim involved: the answer depends on usage only
            rec.reason = str(s)
            return None
        if self.across_pods(job):
            assert isinstance(self.topology, FleetTopology)  # across_pods says so
            s, placement = fleet.place(fw, state, job, self.topology, first_fit=self.fleet_first_fit)
            if placement is None:
                # No free pods: preempt lower-priority jobs on the pods it needs
                # (``fleet_preemption``), else a capacity failure: later gangs as large,
                # at no higher priority, get the same answer this cycle.
                ps, nom = fw.post_filter_across_pods(state, job, s.reason)
                if ps.ok and nom is not None:
                    return self._nominate(rec, nom, now)
                self._capacity_failure = True
                rec.reason = str(ps if ps.code is not Code.SKIP else s)
                return None
            return self._complete(rec, state, placement, now)
        s, cands = fw.find(state, job)
        if cands is None:
            if s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return self._reject(rec, s, now)
            if s.code is Code.UNSCHEDULABLE:
                ps, nom = fw.post_filter(state, job, s.reason)
                if ps.ok and nom is not None:
                    return self._nominate(rec, nom, now)
                s = ps
                self._capacity_failure = True  # no block, and preemption could not make one
            rec.reason = str(s)
            return None
        s, scores = fw.score(state, job, cands)
        if not s.ok:
            rec.reason = str(s)
            return None
        placement = fw.select(state, job, cands, scores)
        return self._complete(rec, state, placement, now)

    def _complete(self, rec: SchedulerJob, state: dict[str, Any], placement: Placement, now: float) -> Decision | None:
        job, fw = rec.request, self.framework
        s = fw.reserve(state, job, placement)
        if s.ok:
            s = fw.permit(state, job, placement)
        if s.code is Code.WAIT:
            rec.reason = str(s)
            return None
        if s.ok:
            s = fw.bind(state, job, placement)
        if not s.ok:
            fw.unreserve(state, job, placement)
            rec.reason = str(s)
            return None
        self._to(rec, JobPhase.RUNNING, now)
        rec.placement, rec.started_s, rec.reason = placement, now, ""
        rec.victims = ()
        self.pending.pop(job.job_id, None)
        return Decision(job.job_id, DecisionKind.BIND, st.SUCCESS, placement, resume_step=rec.resume_step)

    def _to(self, rec: SchedulerJob, phase: JobPhase, now: float) -> None:
        """Phase change plus team quota accounting (chips count while held or nominated)."""
        before, after = rec.phase in HOLDING, phase in HOLDING
        rec.to(phase, now)
        self.handle.set_running(rec, phase is JobPhase.RUNNING)
        team, queue = rec.request.team, rec.request.queue
        if after != before:
            self.queues.advance(now)  # usage so far at the old chip count
        if after and not before:
            self.team_chips[team] = self.team_chips.get(team, 0) + rec.request.chips
            self.queues.charge(queue, rec.request.chips)
        elif before and not after:
            self.team_chips[team] -= rec.request.chips
            self.queues.release(queue, rec.request.chips)

    def _reject(self, rec: SchedulerJob, s: Status, now: float) -> Decision:
        rec.to(JobPhase.REJECTED, now)
        rec.reason = str(s)
        self.pending.pop(rec.job_id, None)
        return Decision(rec.job_id, DecisionKind.REJECTED, s)

    def _nominate(self, rec: SchedulerJob, nom: Nomination, now: float) -> Decision:
        if nom.placement is not None:  # a gang across pods: its chips on every pod it takes
            self.cluster.arrays.flat_nominated[list(nom.placement.chips)] = rec.slot
            self.cluster.touch_pods(nom.all_pods)
        else:
            pod = self.cluster.pods[nom.pod]
            pod.nominated[list(nom.local_chips)] = rec.slot
            for m in nom.moves:  # the chips a moved job goes to are kept for it, as the block is
                pod.nominated[list(m.local_chips)] = rec.slot
            self.cluster.touch(pod)
        for v in nom.victims:
            vr = self.jobs[v]
            self._to(vr, JobPhase.CHECKPOINTING, now)
            vr.preempted_by = rec.job_id
            vr.preempt_reason = nom.reason
        self._to(rec, JobPhase.NOMINATED, now)
        rec.victims = nom.victims
        rec.nomination = nom
        why = f": {nom.reason}" if nom.reason else ""
        then = f"; holding the block until {', '.join(nom.awaited)} (not preempted) end" if nom.awaited else ""
        if nom.moves:
            then += (f"; moving {', '.join(m.job_id for m in nom.moves)} (within quota, not preempted) "
                     "out of the block")
        status = st.wait(f"preempting {', '.join(nom.victims) or 'nothing'} (checkpoint and requeue){why}{then}")
        rec.reason = str(status)
        return Decision(rec.job_id, DecisionKind.PREEMPT, status, victims=nom.victims)

    def _free_chips(self, rec: SchedulerJob) -> None:
        if rec.placement is None:
            return
        self.cluster.release(rec.slot, rec.placement.all_pods)
        rec.placement = None

    def report_checkpoint(self, job_id: str, step: int) -> None:
        """A running job saved a checkpoint (used if it must later be requeued)."""
        rec = self._get(job_id)
        rec.last_checkpoint_step = max(rec.last_checkpoint_step, int(step))

    def finish(self, job_id: str, now_s: float | None = None) -> None:
        """The job completed, failed for good, or was cancelled: release everything it holds.

        Stopping a preemption victim for good is the caller's decision; preemption itself
        never releases a victim without its checkpoint (``victims_checkpointed``).
        """
        now = self.time(now_s)
        rec = self._get(job_id)
        if rec.phase in (JobPhase.FINISHED, JobPhase.REJECTED):
            return
        # A victim that completes while checkpointing simply finishes (nothing is lost);
        # its preemptor binds once the remaining victims report (victims_checkpointed).
        self._free_chips(rec)
        if rec.phase is JobPhase.NOMINATED and rec.nomination is not None:
            starvation.release(self.cluster, rec.slot, list(rec.nomination.all_pods))
        if self._holder is not None and self._holder[0] == rec.slot:
            starvation.release(self.cluster, rec.slot, [self._holder[1]])
            self._holder = None
        self.pending.pop(job_id, None)
        self._to(rec, JobPhase.FINISHED, now)
        rec.finished_s = now

    def requeue(self, job_id: str, resume_step: int | None = None, now_s: float | None = None) -> None:
        """A running job lost a chip (recovery): back to the queue from its last checkpoint."""
        now = self.time(now_s)
        rec = self._get(job_id)
        if rec.phase is not JobPhase.RUNNING:
            raise ConflictError(f"job {job_id} is {rec.phase.value}, not running", field="job_id")
        self._free_chips(rec)
        rec.resume_step = rec.last_checkpoint_step if resume_step is None else int(resume_step)
        self._to(rec, JobPhase.PENDING, now)
        rec.reason = f"Pending: requeued, resumes from checkpoint step {rec.resume_step}"
        self.pending[job_id] = None

    # --- the control plane's own moves ---------------------------------------------
    def adopt(self, job_id: str, chips: Sequence[int], now_s: float | None = None) -> None:
        """A submitted job already runs on ``chips`` (reloaded after a control-plane
        restart): bind it there without a cycle, so no other job is given those chips."""
        now = self.time(now_s)
        rec = self._get(job_id)
        if rec.phase is not JobPhase.PENDING:
            raise ConflictError(f"job {job_id} is {rec.phase.value}, not pending", field="job_id")
        self.hold(job_id, chips, _rec=rec)
        self._to(rec, JobPhase.RUNNING, now)
        if chips:  # none: every chip it had is gone; it holds nothing until recovered
            where = [self.cluster.locate(int(c)) for c in chips]
            pods = tuple(dict.fromkeys(pod.index for pod, _ in where))
            rec.placement = Placement(job_id, pods[0], tuple(int(c) for c in chips),
                                      tuple(int(lc) for _, lc in where), (len(chips),), (0,),
                                      reason="adopted after a control-plane restart",
                                      pods=pods if len(pods) > 1 else ())
        rec.started_s, rec.reason = now, ""
        self.pending.pop(job_id, None)

    def hold(self, job_id: str, chips: Sequence[int], *, _rec: SchedulerJob | None = None) -> None:
        """The job now holds exactly ``chips`` (a rank moved to another chip, or the job
        shrank): the owner arrays follow. A chip held by another job is a ConflictError."""
        rec = _rec or self._get(job_id)
        where = [self.cluster.locate(int(c)) for c in chips]
        for c, (pod, local) in zip(chips, where, strict=True):  # check all before changing any
            other = int(pod.owner[local])
            if other not in (FREE, rec.slot):
                raise ConflictError(f"chip {c} is held by {self.handle.slots.get(other, other)}", field="chips")
        for pod in self.cluster.pods:
            mine = pod.owner == rec.slot
            if mine.any():
                pod.owner[mine] = FREE
                self.cluster.touch(pod)
        for pod, local in where:
            pod.owner[local] = rec.slot
            self.cluster.touch(pod)
        if rec.placement is not None:
            # Its chips may now be on other pods (a rank moved across pods): release follows them.
            pods = tuple(dict.fromkeys(pod.index for pod, _ in where))
            rec.placement = replace(rec.placement, chips=tuple(int(c) for c in chips),
                                    local_chips=tuple(int(lc) for _, lc in where),
                                    pods=pods if len(pods) > 1 else (), pod=pods[0] if pods else rec.placement.pod)

    # --- read side ---------------------------------------------------------------------
    def _get(self, job_id: str) -> SchedulerJob:
        rec = self.jobs.get(job_id)
        if rec is None:
            raise NotFoundError(f"job {job_id} is not known to the scheduler", field="job_id")
        return rec

    def describe(self, job_id: str, now_s: float | None = None) -> dict[str, Any]:
        """For DescribeTrainingJob: phase, allocation (chips, shape; reason while pending)."""
        rec = self._get(job_id)
        now = self.time(now_s)
        queued = rec.phase in (JobPhase.PENDING, JobPhase.NOMINATED)
        alloc: dict[str, Any] = {"chips": [], "shape": [], "reason": rec.reason}
        if rec.placement is not None:
            alloc = {**rec.placement.to_dict(), "reason": rec.reason or rec.placement.reason}
        return {
            "job_id": job_id,
            "phase": rec.phase.value,
            "allocation": alloc,
            "priority": rec.request.priority,
            "team": rec.request.team,
            "queue": rec.request.queue,
            "queue_wait_s": round(rec.wait_s + (now - rec.enqueued_s if queued else 0.0), 6),
            "resume_step": rec.resume_step,
            "preemptions": rec.preemptions,
            "victims": list(rec.victims),
        }

    def reason(self, job_id: str) -> str:
        return self._get(job_id).reason

    def allocations(self) -> dict[str, Placement]:
        return {j: r.placement for j, r in self.jobs.items() if r.placement is not None}
