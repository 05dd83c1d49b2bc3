"""Replay a synthetic job trace on one timeline: the scheduler vs FIFO first-fit.

Trace (seeded, ``make_trace``): Poisson arrivals, mean inter-arrival chosen so the
offered load is ~95% of the pod's chip-time; sizes 1/2/4/8/16/32/64 chips with
probabilities .10/.10/.20/.20/.20/.15/.05; run times log-normal (median 20 min,
sigma 1.0, clipped to 1 min - 8 h); priorities 0/1/2 with probabilities .7/.2/.1;
four teams. No public cluster trace was fetched (none is available through the
package registries), so the mix is documented here instead.

Both policies run side by side on the same ``podfleet.engine.Timeline`` (virtual time),
each on its own trn2-ultraserver pod (64 chips, no spares), fed the same arrivals:

* scheduler: ``podfleet.scheduler.Scheduler`` with its default plugins: priority queue
  with aging, backfill, topology-aware blocks, preemption by checkpoint-and-requeue
  (a victim spends 30 s checkpointing, loses nothing before its checkpoint, and pays a
  60 s restart when it resumes).
* baseline: strict FIFO (the head of the queue blocks everything behind it), placing
  each job in the first free contiguous block (lowest offset) of any shape.

Figures: utilization = busy chip-seconds / (64 x the time until the last job ends);
mean job completion time (finish - submit); p95 queue wait (time spent pending).
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

import numpy as np

from podfleet.engine import Timeline
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.topology import GridTopology
from podfleet.scheduler import DecisionKind, JobRequest, Scheduler

NAME = "trace-replay"
DESCRIPTION = "synthetic job trace on one timeline: scheduler vs FIFO first-fit (utilization, JCT, p95 wait)"

SIZES = np.array([1, 2, 4, 8, 16, 32, 64])
SIZE_P = np.array([0.10, 0.10, 0.20, 0.20, 0.20, 0.15, 0.05])
CHECKPOINT_S = 30.0
RESTART_S = 60.0


class TraceJob(NamedTuple):  # not a dataclass: bench modules load outside sys.modules
    job_id: str
    submit_s: float
    chips: int
    run_s: float
    priority: int
    team: str


def make_trace(n: int, seed: int = 7, load: float = 0.95, pod_chips: int = 64) -> list[TraceJob]:
    rng = np.random.default_rng(seed)
    sizes = rng.choice(SIZES, size=n, p=SIZE_P)
    run = np.clip(rng.lognormal(np.log(1200.0), 1.0, size=n), 60.0, 8 * 3600.0)
    prio = rng.choice([0, 1, 2], size=n, p=[0.7, 0.2, 0.1])
    mean_gap = float((sizes * run).mean()) / (pod_chips * load)
    arrivals = np.cumsum(rng.exponential(mean_gap, size=n))
    return [
        TraceJob(f"job-{i:04d}", float(arrivals[i]), int(sizes[i]), float(run[i]), int(prio[i]), f"team-{i % 4}")
        for i in range(n)
    ]


class Stats:
    def __init__(self) -> None:
        self.submit: dict[str, float] = {}
        self.finish: dict[str, float] = {}
        self.wait: dict[str, float] = {}
        self.busy_chip_s = 0.0

    def figures(self, pod_chips: int) -> dict[str, float]:
        end = max(self.finish.values())
        jct = [self.finish[j] - self.submit[j] for j in self.finish]
        return {
            "utilization": self.busy_chip_s / (pod_chips * end),
            "mean_jct_s": float(np.mean(jct)),
            "p95_wait_s": float(np.percentile(list(self.wait.values()), 95)),
            "max_wait_s": float(max(self.wait.values())),
            "makespan_s": end,
        }


class SchedulerRun:
    """Drives ``Scheduler`` from timeline events, playing the control plane's part."""

    def __init__(self, tl: Timeline, topo: GridTopology) -> None:
        self.tl, self.s = tl, Scheduler(topo, clock=lambda: tl.now)
        self.stats = Stats()
        self.left: dict[str, float] = {}  # remaining run time
        self.started: dict[str, float] = {}
        self.gen: dict[str, int] = {}  # bumps when a run is cut short (its end event is stale)
        self.preemptions = 0

    def arrive(self, job: TraceJob) -> None:
        self.stats.submit[job.job_id] = job.submit_s
        self.left[job.job_id] = job.run_s
        self.s.submit(JobRequest(job.job_id, job.chips, priority=job.priority, team=job.team))
        self.cycle()

    def cycle(self) -> None:
        for d in self.s.schedule():
            self.apply(d)

    def apply(self, d: Any) -> None:
        if d.kind is DecisionKind.BIND:
            j = d.job_id
            run = self.left[j] + (RESTART_S if d.resume_step else 0.0)
            self.started[j] = self.tl.now
            g = self.gen[j] = self.gen.get(j, 0) + 1
            self.tl.call_at(run, lambda j=j, g=g, run=run: self.end(j, g, run))
        elif d.kind is DecisionKind.PREEMPT:
            self.preemptions += len(d.victims)
            self.tl.call_at(CHECKPOINT_S, lambda j=d.job_id, v=d.victims: self.checkpointed(j, v))

    def checkpointed(self, preemptor: str, victims: tuple[str, ...]) -> None:
        steps = {}
        for v in victims:
            if self.s.jobs[v].phase.value != "checkpointing":
                continue  # it finished while checkpointing
            ran = self.tl.now - self.started[v]  # progress up to the checkpoint is kept
            self.stats.busy_chip_s += ran * self.s.jobs[v].request.chips
            self.left[v] = max(self.left[v] - ran + (RESTART_S if self.s.jobs[v].resume_step else 0.0), 1.0)
            self.gen[v] += 1
            steps[v] = self.s.jobs[v].last_checkpoint_step + max(int(ran), 1)
        self.apply(self.s.victims_checkpointed(preemptor, steps))
        self.cycle()

    def end(self, j: str, g: int, run: float) -> None:
        if self.gen.get(j) != g:
            return  # preempted meanwhile
        self.stats.busy_chip_s += run * self.s.jobs[j].request.chips
        self.s.finish(j)
        self.stats.finish[j] = self.tl.now
        self.stats.wait[j] = self.s.jobs[j].wait_s
        self.cycle()


class FifoFirstFit:
    """Strict FIFO; first free contiguous block in index order."""

    def __init__(self, tl: Timeline, topo: GridTopology) -> None:
        self.tl, self.topo = tl, topo
        self.free = np.ones(topo.n_chips, dtype=bool)
        self.queue: deque[TraceJob] = deque()
        self.stats = Stats()

    def arrive(self, job: TraceJob) -> None:
        self.stats.submit[job.job_id] = job.submit_s
        self.queue.append(job)
        self.cycle()

    def cycle(self) -> None:
        while self.queue:
            job = self.queue[0]
            blocks = self.topo.free_blocks(job.chips, self.free)
            if not blocks:
                return  # the head blocks the queue
            chips = list(min(blocks, key=lambda b: b.chips[0]).chips)
            self.queue.popleft()
            self.free[chips] = False
            self.stats.wait[job.job_id] = self.tl.now - job.submit_s
            self.stats.busy_chip_s += job.run_s * job.chips
            self.tl.call_at(job.run_s, lambda job=job, chips=chips: self.end(job, chips))

    def end(self, job: TraceJob, chips: list[int]) -> None:
        self.free[chips] = True
        self.stats.finish[job.job_id] = self.tl.now
        self.cycle()


def run(quick: bool = False) -> dict[str, Any]:
    trace = make_trace(120 if quick else 500)
    topo = get_topology("trn2-ultraserver")
    assert isinstance(topo, GridTopology)
    tl = Timeline(seed=7)
    ours, base = SchedulerRun(tl, topo), FifoFirstFit(tl, topo)
    for job in trace:
        tl.call_at(job.submit_s, lambda job=job: (ours.arrive(job), base.arrive(job)))
    tl.run()
    if len(ours.stats.finish) != len(trace) or len(base.stats.finish) != len(trace):
        raise RuntimeError("not every job finished; the replay is incomplete")
    a, b = ours.stats.figures(64), base.stats.figures(64)
    out: dict[str, Any] = {k: round(v, 4 if k == "utilization" else 1) for k, v in a.items()}
    out.update({f"baseline_{k}": round(v, 4 if k == "utilization" else 1) for k, v in b.items()})
    out["jobs"] = len(trace)
    out["preemptions"] = ours.preemptions
    high = [j.job_id for j in trace if j.priority == 2]
    out["p95_wait_s_priority2"] = round(float(np.percentile([ours.stats.wait[j] for j in high], 95)), 1)
    out["baseline_p95_wait_s_priority2"] = round(float(np.percentile([base.stats.wait[j] for j in high], 95)), 1)
    return out
