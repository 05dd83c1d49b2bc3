"""Cross-pod moves of the recovery orchestrator.

A job that fits one pod but had ranks moved to another pod (its own pod had no free
chip) talks over the network tier until they are back:

* a rank that must leave the pod takes its tensor-parallel group along (``_follow``):
  alone there it would put the group's all-reduces on the network tier;
* once chips of its pod are free again (repaired, updated, released), whole groups move
  home at a step boundary (a live copy, one short pause), each rank to the chip it left
  when that is free. A firmware rollout holds these moves (``hold_rehome``) until it
  ends: it frees the pod's chips one after another, so each rank moves once;
* while its pod has no room for them (the chip a group left is out for repair), the rest
  of the job may move to the pod its groups away sit in instead (``POD_MOVE``), when that
  pod has a free chip for each of them and all its links up, and the move's pause costs
  less than the steps' slowdown it removes until the group could come home. The
  slowdown is measured: the job's step time now against its last one in one pod; the
  wait is the soonest repair the flows scheduled in the job's pod (``Timings.repair_s``,
  an assumption, when none is); the pause is the measured move's median fixed cost and the state copy over the
  network tier. All ranks move in one pause, concurrently, as a move home does.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence

from podfleet.errors import PodfleetError
from podfleet.fabric.base import LinkState, RunState, RunStatus
from podfleet.hardware.topology import FleetTopology
from podfleet.recovery import costs
from podfleet.recovery.context import RecoveryContext
from podfleet.recovery.model import Recovery
from podfleet.recovery.spares import free_chips, group_of, home_group, tp_group, whole_groups

REHOME = "rehome"  # a rank in another pod moving back to a free chip of its job's pod
FOLLOW = "tp-group-follow"  # a healthy rank following its tensor-parallel group mate out of a full pod
# A rank moving to the pod its job's groups away sit in, so the whole job is in one pod
# again (a ``rehome`` flow whose target is that pod: the job's pod is full or in repair).
POD_MOVE = "pod-move"


class HomeFlows:
    """The cross-pod moves of a recovery orchestrator, on its shared ``RecoveryContext``;
    ``start`` runs a recovery's job flow (the orchestrator's ``JobFlows.start``)."""

    def __init__(self, ctx: RecoveryContext, start: Callable[[Recovery], None],
                 state_bytes: Callable[[str], float]) -> None:
        self.ctx = ctx
        self._start = start
        self._state_bytes = state_bytes  # one rank's state (``JobFlows.state_bytes``)

    # --- leaving the pod ----------------------------------------------------------------
    def moved_between_pods(self, job_id: str, rank: int, before: tuple[int, ...], chip: int, spare: int,
                            cause: str) -> None:
        """Remember the home chip a rank left for another pod (its way back); forget it
        once the rank is home."""
        topo, origin = self.ctx.fab.topology, self.ctx.origin
        if cause == POD_MOVE:  # the whole job goes to that pod: no way back to remember
            origin.pop((job_id, rank), None)
            return
        home = home_group(topo, before)
        if home is not None and group_of(topo, chip) == home != group_of(topo, spare):
            origin.setdefault((job_id, rank), chip)
        elif cause == REHOME:
            origin.pop((job_id, rank), None)

    def forget_origins(self, job_id: str) -> None:
        origin = self.ctx.origin
        for key in [k for k in origin if k[0] == job_id]:
            origin.pop(key)

    def follow(self, rec: Recovery, chips: tuple[int, ...], options: Mapping[str, object], chip: int,
               spare: int) -> None:
        """A rank that had to leave its job's pod takes its tensor-parallel group along:
        alone in another pod it would put the group's all-reduces (the heaviest traffic,
        every layer) on the network tier and slow every step several times over; the
        whole group there keeps them on NeuronLink, and only pipeline sends and the
        gradient reduction cross. The mates move in the same pause, alongside the first
        move (one worker restart each, concurrently), as live copies of their own state;
        their chips stay free for the group's way home (``rehome`` moves whole groups)."""
        ctx = self.ctx
        topo = ctx.fab.topology
        home = home_group(topo, chips)
        if home is None or group_of(topo, spare) == home or group_of(topo, chip) != home:
            return
        queued = {c for c, _ in rec.pending}
        mates = [m for m in tp_group(chips, options, chip)
                 if m != chip and m not in queued and group_of(topo, m) == home and ctx.usable(m)]
        if not mates:
            return
        ctx.step(rec, "group-follows", f"rank on chip {chip} left the pod: its tensor-parallel group "
                   f"{mates} follows to keep its all-reduces on NeuronLink", chips=mates)
        rec.pending[1:1] = [[m, FOLLOW] for m in mates]
        ctx.follow_to[rec.id] = (group_of(topo, spare), frozenset(tp_group(chips, options, chip)))
        ctx.moved_in_pause.add(rec.id)

    def group_target(self, rec_id: str, chip: int) -> int | None:
        """The pod a rank on ``chip`` must go to because its tensor-parallel group is
        moving there (a follower, or a mate queued by the same batch): None if free to
        go anywhere. A mate must not take a chip a follower just left at home."""
        pod = self.ctx.pod_move_to.get(rec_id)
        if pod is not None:
            return pod
        got = self.ctx.follow_to.get(rec_id)
        return got[0] if got is not None and chip in got[1] else None

    # --- coming home ------------------------------------------------------------------
    def away(self, job_id: str) -> list[int]:
        """Chips of a job outside its home pod (empty when it fits none or sits in one)."""
        topo = self.ctx.fab.topology
        chips = self.ctx.run(job_id).chips
        home = home_group(topo, chips)
        if home is None:
            return []
        return [c for c in chips if group_of(topo, c) != home]

    def home_free(self, job_id: str) -> list[int]:
        home = home_group(self.ctx.fab.topology, self.ctx.run(job_id).chips)
        return [] if home is None else self.pod_free(job_id, home)

    def pod_free(self, job_id: str, pod: int) -> list[int]:
        """Healthy free chips of ``pod`` a rank of the job may move to."""
        ctx = self.ctx
        topo = ctx.fab.topology
        chips = ctx.run(job_id).chips
        states = [str(s) for s in ctx.fab.chip_states()]
        cand = free_chips(states, ctx.owner, exclude=(*chips, *ctx.reserved, *ctx.cordoned))
        return [c for c in cand if group_of(topo, c) == pod]

    def room(self, rec_id: str, job_id: str, cause: str) -> bool:
        """Whether a move of this flow still has a free chip to go to."""
        if cause == POD_MOVE:
            pod = self.ctx.pod_move_to.get(rec_id)
            return pod is not None and bool(self.pod_free(job_id, pod))
        return bool(self.home_free(job_id))

    def step_ended(self, job_id: str) -> None:
        """A step of a managed job ended: note its step time while it is in one pod (what a
        pod move weighs the slowdown against), and while it has ranks away, look for a
        move that brings it back into one pod (the step just run measured the slowdown)."""
        ctx = self.ctx
        if job_id not in ctx.policies:
            return
        with contextlib.suppress(PodfleetError):  # the job is gone
            if not self.note_step(job_id) and job_id not in ctx.active and not ctx.hold_rehome:
                self.rehome(job_id)

    def note_step(self, job_id: str) -> bool:
        """Keep the job's step time as its one-pod figure if it sits in one pod now (True)."""
        if self.away(job_id):
            return False
        st = self.ctx.run(job_id).step_time_s
        if st and st > 0:
            self.ctx.one_pod_step_s[job_id] = float(st)
        return True

    def rehome(self, job_id: str) -> Recovery | None:
        """Move the job's ranks that sit in another pod back to free chips of its pod (as
        many as there are free ones), else the rest of the job to the pod they sit in
        (``pod_move``); a live move at a step boundary. None when there is nothing to do
        (in one pod, no room, a recovery already running)."""
        ctx = self.ctx
        if job_id not in ctx.policies or job_id in ctx.active or ctx.hold_rehome:
            return None
        run = ctx.run(job_id)
        if run.state is not RunState.RUNNING:
            return None
        away = [c for c in self.away(job_id) if ctx.usable(c)]
        if not away:
            return None  # the common case, without a look at every chip
        free = self.home_free(job_id)
        moving = self._whole_groups(run.chips, ctx.spec(job_id).options, away, len(free)) if free else []
        if not moving:
            # Not enough free chips at home for a whole tensor-parallel group yet.
            return self.pod_move(job_id, run, away)
        rec = ctx.new(REHOME, f"chip:{moving[0]}", f"ranks on {moving} are outside the job's pod; "
                        f"{len(free)} chip(s) free there", job_id)
        rec.pending.extend([c, REHOME] for c in moving)
        self._start(rec)
        return rec

    def pod_move(self, job_id: str, run: RunStatus, away: list[int]) -> Recovery | None:
        """Move the ranks still in the job's pod to the pod its groups away sit in, when
        that pod has a free chip for each and the pause costs less than the slowdown it
        removes until the groups could come home (``pod_move_gain_s``)."""
        ctx = self.ctx
        topo = ctx.fab.topology
        pods = {group_of(topo, c) for c in away}
        if len(pods) != 1:
            return None
        target = pods.pop()
        staying = [c for c in run.chips if group_of(topo, c) != target]
        if not staying or not all(ctx.usable(c) for c in staying):
            return None  # a rank on a faulty chip: its own flow goes first
        free = self.pod_free(job_id, target)
        if len(free) < len(staying) or not self.links_up(target):
            return None
        gain, cost = self.pod_move_gain_s(job_id, run), self.pod_move_cost_s(job_id, staying[0], free[0])
        if not gain > cost:
            return None
        rec = ctx.new(REHOME, f"pod:{target}", f"the job's pod has no room for its ranks away yet; moving its "
                      f"{len(staying)} other ranks to pod {target} ({len(free)} chip(s) free there) costs a "
                      f"pause of ~{cost:.1f} s against ~{gain:.0f} s of slower steps until they could come home",
                      job_id)
        rec.pending.extend([c, POD_MOVE] for c in staying)
        ctx.pod_move_to[rec.id] = target
        self.forget_origins(job_id)  # its pod is the target now: no way back to keep
        self._start(rec)
        return rec

    def links_up(self, pod: int) -> bool:
        """Whether every link inside ``pod`` is up. A job that fills a pod crosses most of
        its links, so one down or degraded link stretches every step over its detour (the
        seeded ettr week: 233.5 s against 174.7 s, far more than the 0.7% of a group
        away); as placement does, a pod move avoids such a pod."""
        topo = self.ctx.fab.topology
        if not isinstance(topo, FleetTopology):
            return True
        per = topo.n_group_links
        states = self.ctx.fab.link_states()[pod * per:(pod + 1) * per]
        return all(st is LinkState.UP for st in states)

    def pod_move_gain_s(self, job_id: str, run: RunStatus) -> float:
        """The training time the job's cross-pod slowdown costs until its ranks away could
        come home: the wait x (step time now - step time in one pod) / step time now.
        0 without both step times (nothing measured yet)."""
        ctx = self.ctx
        base, now_st = ctx.one_pod_step_s.get(job_id), float(run.step_time_s or 0.0)
        if base is None or not now_st > base:
            return 0.0
        return self.home_wait_s(job_id) * (now_st - base) / now_st

    def home_wait_s(self, job_id: str) -> float:
        """How long until the job's pod could take its ranks away back: the soonest repair
        the flows scheduled for a chip of it, else the assumed repair time
        (``Timings.repair_s``; none: an operator's repair, no known end)."""
        ctx = self.ctx
        topo = ctx.fab.topology
        home = home_group(topo, ctx.run(job_id).chips)
        now = ctx.tl.now
        due = [t - now for c, t in ctx.repair_due.items() if t > now and group_of(topo, c) == home]
        if due:
            return min(due)
        return math.inf if ctx.timings.repair_s is None else ctx.timings.repair_s

    def pod_move_cost_s(self, job_id: str, src: int, dst: int) -> float:
        """The pause of a pod move: the ranks move concurrently (one worker restart each),
        so it pays one move's fixed cost (the measured median, ``Timings.move_s`` when
        pinned, times ``fixed_cost_scale``) and one rank's state copied from ``src`` to
        ``dst`` (across pods: the network tier), plus the flow's own steps."""
        ctx = self.ctx
        tm = ctx.timings
        move = tm.move_s if tm.move_s is not None else tm.fixed_cost_scale * tm.costs.replica_fixed_s.median
        bw = costs.copy_bw_bytes_per_s(ctx.fab.topology, src, dst, tm.replica_bw_bytes_per_s)
        return tm.select_s + move + tm.replica_restore_s(self._state_bytes(job_id), bw) + tm.resume_s

    @staticmethod
    def _whole_groups(chips: Sequence[int], options: Mapping[str, object], away: list[int],
                      free: int) -> list[int]:
        """The away chips to bring home, whole tensor-parallel groups at a time (at most
        ``free``): a group split between pods runs its all-reduces over the network
        tier, slower than the whole group away (``_follow`` in the orchestrator)."""
        moving: list[int] = []
        for group in whole_groups(away, lambda c: tp_group(chips, options, c)):
            if len(moving) + len(group) <= free:
                moving.extend(group)
        return moving

    def rehome_all(self) -> list[Recovery]:
        """``rehome`` every managed job that has ranks away from its pod."""
        if self.ctx.hold_rehome:
            return []
        out = []
        for job_id in list(self.ctx.policies):
            try:
                rec = self.rehome(job_id)
            except PodfleetError:
                continue  # the fabric no longer knows the job: nothing to bring home
            if rec is not None:
                out.append(rec)
        return out

    def rehome_quietly(self, job_id: str) -> None:
        with contextlib.suppress(PodfleetError):  # the job is gone
            self.rehome(job_id)
