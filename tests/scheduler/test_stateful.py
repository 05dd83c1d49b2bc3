"""Rule-based stateful test of the scheduler's invariants under any sequence of events."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as hs
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from podfleet.fabric.base import ChipState
from podfleet.hardware.catalog import get_topology
from podfleet.scheduler import DecisionKind, JobPhase, JobRequest, Scheduler

POD = get_topology("trn2-ultraserver")


class SchedulerMachine(RuleBasedStateMachine):
    @initialize(spares=hs.sampled_from([0, 2, 4]))
    def start(self, spares: int) -> None:
        self.s = Scheduler(POD, spares=spares, quotas={"t1": 40})
        self.n = 0
        self.t = 0.0
        self.expected_resume: dict[str, int] = {}

    def _jobs(self, *phases: JobPhase) -> list[str]:
        return sorted(j for j, r in self.s.jobs.items() if r.phase in phases)

    def _check_bind(self, d) -> None:
        if d.kind is DecisionKind.BIND:
            # A job that was preempted or requeued resumes from the checkpoint it saved.
            assert d.resume_step == self.expected_resume.get(d.job_id, 0)

    @rule(size=hs.sampled_from([1, 2, 4, 8, 16, 32, 48]), priority=hs.integers(0, 3),
          preemptible=hs.booleans(), team=hs.sampled_from(["t0", "t1"]))
    def submit(self, size: int, priority: int, preemptible: bool, team: str) -> None:
        self.n += 1
        self.s.submit(JobRequest(f"j{self.n}", size, priority=priority, preemptible=preemptible, team=team),
                      now_s=self.t)

    @rule()
    def schedule(self) -> None:
        self.t += 500.0  # past min_run_s every other cycle, so preemption happens
        for d in self.s.schedule(now_s=self.t):
            self._check_bind(d)

    @rule(data=hs.data())
    def checkpoint_victims(self, data: hs.DataObject) -> None:
        nominated = self._jobs(JobPhase.NOMINATED)
        if not nominated:
            return
        j = data.draw(hs.sampled_from(nominated))
        steps = {}
        for v in self.s.jobs[j].victims:
            vr = self.s.jobs[v]
            if vr.phase is JobPhase.CHECKPOINTING:
                steps[v] = vr.last_checkpoint_step + data.draw(hs.integers(0, 100))
                self.expected_resume[v] = steps[v]
        self._check_bind(self.s.victims_checkpointed(j, steps, now_s=self.t))

    @rule(data=hs.data(), step=hs.integers(0, 1000))
    def report_checkpoint(self, data: hs.DataObject, step: int) -> None:
        running = self._jobs(JobPhase.RUNNING)
        if running:
            self.s.report_checkpoint(data.draw(hs.sampled_from(running)), step)

    @rule(data=hs.data())
    def finish(self, data: hs.DataObject) -> None:
        live = self._jobs(JobPhase.RUNNING, JobPhase.PENDING, JobPhase.NOMINATED)
        if live:
            self.s.finish(data.draw(hs.sampled_from(live)), now_s=self.t)

    @rule(chip=hs.integers(0, 63), fail=hs.booleans())
    def chip_health(self, chip: int, fail: bool) -> None:
        self.s.set_chip_state(chip, ChipState.FAILED if fail else ChipState.HEALTHY)
        if fail:
            pod = self.s.cluster.pods[0]
            holder = self.s.handle.slots.get(int(pod.owner[chip]))
            if holder and self.s.jobs[holder].phase is JobPhase.RUNNING:
                self.expected_resume[holder] = self.s.jobs[holder].last_checkpoint_step
                self.s.requeue(holder, now_s=self.t)

    @invariant()
    def no_chip_in_two_allocations(self) -> None:
        pod = self.s.cluster.pods[0]
        seen: set[int] = set()
        for r in self.s.jobs.values():
            if r.phase in (JobPhase.RUNNING, JobPhase.CHECKPOINTING):
                chips = set(r.placement.local_chips)
                assert len(chips) == r.request.chips  # the whole gang, never part
                assert not chips & seen
                seen |= chips
                assert (pod.owner[list(chips)] == r.slot).all()
            else:
                assert r.placement is None and not (pod.owner == r.slot).any()
        assert int((pod.owner >= 0).sum()) == len(seen)

    @invariant()
    def spares_stay_free(self) -> None:
        pod = self.s.cluster.pods[0]
        assert (pod.owner[pod.spare] == -1).all() and (pod.nominated[pod.spare] == -1).all()

    @invariant()
    def allocations_are_sub_blocks(self) -> None:
        idx = self.s.cluster.blocks
        for p in self.s.allocations().values():
            ids, _ = idx.blocks_for(len(p.chips), p.shape)
            assert any(set(idx.chips(b).tolist()) == set(p.local_chips) for b in ids)
            # ring order: consecutive ranks are torus neighbours
            for a, b in zip(p.local_chips, p.local_chips[1:], strict=False):
                assert POD.hops(a, b) == 1

    @invariant()
    def quota_accounting(self) -> None:
        used: dict[str, int] = {}
        for r in self.s.jobs.values():
            if r.phase in (JobPhase.RUNNING, JobPhase.NOMINATED, JobPhase.CHECKPOINTING):
                used[r.request.team] = used.get(r.request.team, 0) + r.request.chips
        assert {k: v for k, v in self.s.team_chips.items() if v} == used
        running_t1 = sum(r.request.chips for r in self.s.jobs.values()
                         if r.request.team == "t1" and r.phase in (JobPhase.RUNNING, JobPhase.NOMINATED))
        assert running_t1 <= 40 or any(r.phase is JobPhase.CHECKPOINTING for r in self.s.jobs.values())

    @invariant()
    def pending_jobs_say_why(self) -> None:
        for r in self.s.jobs.values():
            if r.phase is JobPhase.PENDING:
                assert r.reason


TestScheduler = SchedulerMachine.TestCase
TestScheduler.settings = __import__("hypothesis").settings(stateful_step_count=40, deadline=None)


def test_machine_smoke_is_deterministic() -> None:
    # the same operations give the same placements (no hidden randomness)
    out = []
    for _ in range(2):
        s = Scheduler(POD, spares=4)
        for i, n in enumerate([16, 8, 4, 32]):
            s.submit(JobRequest(f"j{i}", n, tp=4 if n >= 4 else 1))
        out.append({d.job_id: d.placement.chips for d in s.schedule()})
    assert out[0] == out[1]
    assert np.unique(np.concatenate([np.array(c) for c in out[0].values()])).size == 60
