"""Congestion between jobs on one pod: traffic-aware placement and routing against
placement that ignores traffic with dimension-ordered routing.

The twin (``SimFabric``, virtual time) runs a 4x4x4 Trn2 UltraServer whose free chips
are fragmented: ``BUSY`` single-chip jobs (compute only) hold chips drawn at random
(one layout per seed), as short jobs leave a pod. Four communication-heavy data-parallel
jobs of ``JOB_CHIPS`` chips then arrive one after another, and three policies place
them:

* ``first-fit``: the first free chips in index order, ranks in that order, routed
  dimension-ordered (knows neither links nor traffic);

* both policies consider the same candidate chip sets for each job (the free chips in
  each axis order, snake-ranked; the first free ones in index order), routed by the
  twin, and take the best by ``scheduler.traffic.pick``: the lowest traffic cost, then
  the shortest ring;
* ``ignores-traffic`` counts the links in use as empty (it still prefers a ring that
  lies well on the torus) and routes dimension-ordered;
* ``traffic-aware`` counts the rings already running (``traffic_cost``) and routes
  adaptively (``routing="adaptive"``: each multi-hop ring edge takes the minimal path
  over the least-loaded links).

Two more policies take one half of traffic-aware each: ``placement-only`` (traffic-aware
placement, dimension-ordered routing) and ``routing-only`` (placement ignoring traffic,
adaptive routing), so the figures say where a gain comes from.

Each layout runs ``RUN_S`` virtual seconds per policy; every link is shared max-min
fairly (``fabric.sim.congestion``). Figures, summed over the layouts: aggregate
``tokens_per_s`` of the four jobs (from their step times); ``tokens_per_s_gain``
(traffic-aware over ignores-traffic, minus one: what knowing the traffic adds);
``tokens_per_s_gain_vs_first_fit`` (over first-fit: ring layout and traffic together);
``tokens_per_s_gain_placement_only`` / ``_routing_only``; ``jobs_at_ideal_traffic_aware``
(jobs whose ring runs at the bandwidth their step time assumed: no placement or routing
makes them faster, so where all are, the gain is the most any policy gets here);
``layouts_with_congestion`` (layouts where ignoring traffic left two jobs' rings on a
link); ``max_link_utilization`` (the busiest link's share while the jobs run).

``full_pod``: the plain reading of "four jobs on one pod", four 16-chip jobs on the
blocks the block scheduler gives them on an empty pod, healthy and then with each link
their rings use down in turn (``FULL_RUN_S`` virtual seconds each), dimension-ordered
against adaptive routing: ``links_shared_by_two_jobs_healthy``,
``tokens_per_s_gain_link_down`` and the runs where two jobs' rings crossed one link the
same way; ``box_mixes_with_shared_links``: of ``BOX_MIXES`` (job sizes filling the pod,
each placed by the block scheduler on an empty pod), those where two jobs' rings cross
one link the same way.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.sim import SimFabric
from podfleet.fabric.sim.congestion import Congestion
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.topology import GridTopology
from podfleet.scheduler import JobRequest, Scheduler
from podfleet.scheduler.traffic import Candidate, pick
from podfleet.scheduler.types import fmt_shape

NAME = "congestion"
DESCRIPTION = "four communication-heavy jobs on one pod: traffic-aware placement + adaptive routing vs DOR"
JOB_CHIPS = 12
JOBS = 4
BUSY = 16
RUN_S = 120.0
LAYOUTS = 12
# A data-parallel job whose exposed gradient all-reduce is about half its step (the
# twin's simple model: 2e9 parameters, 4,096 tokens per step, no overlap).
JOB_OPTIONS = {"params": 2e9, "tokens_per_step": 4096, "overlap": 0.0}
# policy -> (placement, routing). The last two take one half of traffic-aware each, so
# the figures say which half the gain comes from.
POLICIES = {
    "first-fit": ("first-fit", "dor"),
    "ignores-traffic": ("ignores-traffic", "dor"),
    "traffic-aware": ("traffic-aware", "adaptive"),
    "placement-only": ("traffic-aware", "dor"),
    "routing-only": ("ignores-traffic", "adaptive"),
}
FULL_CHIPS = 16  # the full pod: four jobs of 16 chips, one block each
FULL_RUN_S = 30.0


def _busy(seed: int, n_chips: int) -> list[int]:
    return sorted(np.random.default_rng(seed).choice(n_chips, BUSY, replace=False).tolist())


def _snake(topo: GridTopology, chips: list[int], order: tuple[int, ...]) -> tuple[int, ...]:
    """``chips`` sorted along axes ``order`` (slowest last), boustrophedon on each row."""
    def key(c: int) -> tuple[int, ...]:
        xyz = topo.coords(c)
        out, flip = [], False
        for k in reversed(order):
            v = xyz[k]
            out.append(topo.dims[k] - 1 - v if flip else v)
            flip = bool(v % 2) != flip
        return tuple(out)

    return tuple(sorted(chips, key=key))


def _candidates(topo: GridTopology, free: list[int], n: int) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [tuple(free[:n])]
    for order in itertools.permutations(range(len(topo.dims))):
        ranked = _snake(topo, free, order)
        for start in range(0, len(ranked) - n + 1, max(1, n // 4)):
            cand = _snake(topo, list(ranked[start:start + n]), order)
            if cand not in out:
                out.append(cand)
    return out


def _place(fab: SimFabric, topo: GridTopology, policy: str, free: list[int], n: int) -> tuple[int, ...]:
    """First-fit, or the best candidate by ``scheduler.traffic.pick``; ignoring traffic,
    the links in use count as empty (the candidate's own ring layout still counts)."""
    if policy == "first-fit":
        return tuple(free[:n])
    cong = fab.congestion
    cap = cong.capacity()
    load = cong.directed_load() if policy == "traffic-aware" else np.zeros_like(cap)
    cands = []
    for chips in _candidates(topo, free, n):
        f = cong.preview(chips)
        cands.append(Candidate(chips, f.links, f.weights))
    best, _cost = pick(cands, load, cap)
    return cands[best].chips


def _scenario(policy: str, seed: int, run_s: float) -> dict[str, float]:
    placement, routing = POLICIES[policy]
    tl = Timeline(seed=seed)
    fab = SimFabric("trn2-ultraserver", tl)
    topo = fab.topology
    assert isinstance(topo, GridTopology)
    fab.congestion.set_routing(routing)
    busy = _busy(seed, topo.n_chips)
    for i, c in enumerate(busy):
        fab.launch(WorkerGroupSpec(f"job-bg-{i}", (c,), "bg", 10**9, checkpoint_interval=0,
                                   options={"params": 1e9, "tokens_per_step": 4096}))
    jobs: list[str] = []
    for j in range(JOBS):
        taken = set(busy) | {c for job in jobs for c in fab.runner.jobs[job].chips}
        free = [c for c in range(topo.n_chips) if c not in taken]
        chips = _place(fab, topo, placement, free, JOB_CHIPS)
        job = f"job-comm-{j}"
        fab.launch(WorkerGroupSpec(job, chips, "dp", 10**9, checkpoint_interval=0, options=dict(JOB_OPTIONS)))
        jobs.append(job)
        tl.run(until=tl.now + 1.0)
    tl.run(until=tl.now + run_s)
    return _figures(fab, jobs)


def _figures(fab: SimFabric, jobs: list[str]) -> dict[str, float]:
    cong = fab.congestion
    slow = [(cong.slowdown(j, bw), cong.own_slowdown(j, bw))
            for j in jobs for bw in [fab.job_link_bw(fab.runner.jobs[j].chips)]]
    return {
        "tokens_per_s": float(sum(fab.runner.jobs[j].tokens_per_s for j in jobs)),
        "max_link_utilization": float(np.max(fab.link_metrics()["flow_utilization"])),
        # Slowdown beyond what each job's own ring layout costs: other jobs on its links.
        "shared": max(s / own for s, own in slow),
        # Jobs whose ring runs at the bandwidth their step time assumed: no policy can
        # make them faster by placing or routing.
        "at_ideal": float(sum(s <= 1.0 + 1e-9 for s, _own in slow)),
        # Directed links that two or more jobs' rings cross (they share its bandwidth).
        "shared_links": float((cong.flows_per_directed_link() > 1).sum()),
    }


def _full_pod(routing: str, link: int | None, blocks: list[tuple[int, ...]], run_s: float) -> dict[str, float]:
    """Four jobs on the blocks the scheduler gives them on an empty pod; ``link`` goes down
    once they run (None: all links up)."""
    tl = Timeline(seed=0)
    fab = SimFabric("trn2-ultraserver", tl)
    fab.congestion.set_routing(routing)
    jobs = [f"job-comm-{j}" for j in range(len(blocks))]
    for job, chips in zip(jobs, blocks, strict=True):
        fab.launch(WorkerGroupSpec(job, chips, "dp", 10**9, checkpoint_interval=0, options=dict(JOB_OPTIONS)))
    tl.run(until=tl.now + 1.0)
    if link is not None:
        fab.set_link_state(link, "down", "bench: one link down under four jobs")
    tl.run(until=tl.now + run_s)
    return _figures(fab, jobs)


# Job mixes that fill most of the pod, boxes crossing z links among them (4x4x2, 3x4x4).
BOX_MIXES = ((16, 16, 16, 16), (32, 16, 8, 8), (48, 16), (32, 32), (24, 24, 16), (36, 12, 8, 8),
             (12, 12, 12, 12, 12), (8,) * 8, (6,) * 10, (4,) * 16)


def _box_mixes() -> tuple[int, list[str]]:
    """(mixes where two jobs' rings cross one link the same way, the block shapes used):
    each mix placed by the block scheduler on an empty pod, rings routed DOR."""
    topo = get_topology("trn2-ultraserver")
    shared, shapes = 0, set()
    for mix in BOX_MIXES:
        sched = Scheduler(topo)
        for i, n in enumerate(mix):
            sched.submit(JobRequest(f"job-{i}", n))
        cong = Congestion(topo, len(topo.links))
        for d in sched.schedule():
            if d.placement is not None:
                cong.set_job(d.job_id, d.placement.chips)
                shapes.add(fmt_shape(d.placement.shape))
        shared += int((cong.flows_per_directed_link() > 1).any())
    return shared, sorted(shapes)


def _full_pod_figures(quick: bool) -> dict[str, Any]:
    """The plain reading of "four jobs on one pod": four 16-chip jobs on the blocks the
    block scheduler (``podfleet.scheduler``) chooses, healthy and with each link their
    rings use down in turn (one run per link and routing)."""
    topo = get_topology("trn2-ultraserver")
    sched = Scheduler(topo)
    for j in range(JOBS):
        sched.submit(JobRequest(f"job-comm-{j}", FULL_CHIPS))
    placed = [d.placement for d in sched.schedule() if d.placement is not None]
    blocks = [tuple(p.chips) for p in placed]
    healthy = _full_pod("dor", None, blocks, FULL_RUN_S)
    fab = SimFabric("trn2-ultraserver", Timeline(seed=0))
    for j, chips in enumerate(blocks):
        fab.congestion.set_job(f"j{j}", chips)
    used = np.unique(np.flatnonzero(fab.congestion.directed_load()) // 2).tolist()
    if quick:
        used = used[:: max(1, len(used) // 8)]
    runs = {r: [_full_pod(r, ln, blocks, FULL_RUN_S) for ln in used] for r in ("dor", "adaptive")}
    tps = {r: sum(x["tokens_per_s"] for x in rows) for r, rows in runs.items()}
    mixes_shared, mix_shapes = _box_mixes()
    return {
        "blocks": [f"{fmt_shape(p.shape)} at chip {min(p.chips)}" for p in placed],
        "box_mixes_with_shared_links": f"{mixes_shared} of {len(BOX_MIXES)}",
        "box_mix_shapes": mix_shapes,
        "links_shared_by_two_jobs_healthy": int(healthy["shared_links"]),
        "healthy_jobs_at_ideal": int(healthy["at_ideal"]),
        "links_down_tried": len(used),
        "tokens_per_s_gain_link_down": round(tps["adaptive"] / tps["dor"] - 1.0, 4),
        "link_down_tokens_per_s_ratio": round(tps["dor"] / (len(used) * healthy["tokens_per_s"]), 4),
        # Runs where two jobs' rings crossed one link the same way (the detour onto another's).
        "link_down_runs_with_shared_links_dor": sum(x["shared_links"] > 0 for x in runs["dor"]),
        "link_down_runs_with_shared_links_adaptive": sum(x["shared_links"] > 0 for x in runs["adaptive"]),
    }


def run(quick: bool = False) -> dict[str, Any]:
    run_s, layouts = (20.0, 4) if quick else (RUN_S, LAYOUTS)
    got = {p: [_scenario(p, seed, run_s) for seed in range(layouts)] for p in POLICIES}
    tps = {p: sum(r["tokens_per_s"] for r in rows) for p, rows in got.items()}
    aware_jobs = sum(r["at_ideal"] for r in got["traffic-aware"])
    per_layout = [a["tokens_per_s"] / b["tokens_per_s"] - 1.0
                  for a, b in zip(got["traffic-aware"], got["ignores-traffic"], strict=True)]
    return {
        "tokens_per_s_gain": round(tps["traffic-aware"] / tps["ignores-traffic"] - 1.0, 4),
        "goal_tokens_per_s_gain": 0.10,
        "tokens_per_s_gain_best_layout": round(max(per_layout), 4),
        "tokens_per_s_gain_vs_first_fit": round(tps["traffic-aware"] / tps["first-fit"] - 1.0, 4),
        "tokens_per_s_gain_placement_only": round(tps["placement-only"] / tps["ignores-traffic"] - 1.0, 4),
        "tokens_per_s_gain_routing_only": round(tps["routing-only"] / tps["ignores-traffic"] - 1.0, 4),
        "jobs_at_ideal_traffic_aware": f"{int(aware_jobs)} of {JOBS * layouts}",
        "layouts_with_congestion": sum(r["shared"] > 1.0 + 1e-9 for r in got["ignores-traffic"]),
        "layouts_with_congestion_traffic_aware": sum(r["shared"] > 1.0 + 1e-9 for r in got["traffic-aware"]),
        "layouts": layouts,
        "max_link_utilization": round(max(r["max_link_utilization"] for r in got["traffic-aware"]), 4),
        "max_link_utilization_ignores_traffic": round(
            max(r["max_link_utilization"] for r in got["ignores-traffic"]), 4),
        "max_link_utilization_first_fit": round(max(r["max_link_utilization"] for r in got["first-fit"]), 4),
        "tokens_per_s_per_layout": {p: round(v / layouts, 1) for p, v in tps.items()},
        "full_pod": _full_pod_figures(quick),
        "scenario": f"trn2-ultraserver 4x4x4, {BUSY} random single-chip jobs per layout, {JOBS} DP jobs x "
                    f"{JOB_CHIPS} chips, {run_s:.0f} virtual s per layout and policy",
    }
