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

Each layout runs ``RUN_S`` virtual seconds per policy; every link is shared max-min
fairly (``fabric.sim.congestion``). Figures, summed over the layouts: aggregate
``tokens_per_s`` of the four jobs (from their step times); ``tokens_per_s_gain``
(traffic-aware over ignores-traffic, minus one: what knowing the traffic adds);
``tokens_per_s_gain_vs_first_fit`` (over first-fit: ring layout and traffic together);
``layouts_with_congestion`` (layouts where ignoring traffic left two jobs' rings on a
link); ``max_link_utilization`` (the busiest link's share while the jobs run).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.sim import SimFabric
from podfleet.hardware.topology import GridTopology
from podfleet.scheduler.traffic import Candidate, pick

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
POLICIES = ("first-fit", "ignores-traffic", "traffic-aware")


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
    tl = Timeline(seed=seed)
    fab = SimFabric("trn2-ultraserver", tl)
    topo = fab.topology
    assert isinstance(topo, GridTopology)
    fab.congestion.set_routing("adaptive" if policy == "traffic-aware" else "dor")
    busy = _busy(seed, topo.n_chips)
    for i, c in enumerate(busy):
        fab.launch(WorkerGroupSpec(f"job-bg-{i}", (c,), "bg", 10**9, checkpoint_interval=0,
                                   options={"params": 1e9, "tokens_per_step": 4096}))
    jobs: list[str] = []
    for j in range(JOBS):
        taken = set(busy) | {c for job in jobs for c in fab.runner.jobs[job].chips}
        free = [c for c in range(topo.n_chips) if c not in taken]
        chips = _place(fab, topo, policy, free, JOB_CHIPS)
        job = f"job-comm-{j}"
        fab.launch(WorkerGroupSpec(job, chips, "dp", 10**9, checkpoint_interval=0, options=dict(JOB_OPTIONS)))
        jobs.append(job)
        tl.run(until=tl.now + 1.0)
    tl.run(until=tl.now + run_s)
    cong = fab.congestion
    return {
        "tokens_per_s": float(sum(fab.runner.jobs[j].tokens_per_s for j in jobs)),
        "max_link_utilization": float(np.max(fab.link_metrics()["flow_utilization"])),
        # Slowdown beyond what each job's own ring layout costs: other jobs on its links.
        "shared": max(cong.slowdown(j, bw) / cong.own_slowdown(j, bw)
                      for j in jobs for bw in [fab.job_link_bw(fab.runner.jobs[j].chips)]),
    }


def run(quick: bool = False) -> dict[str, Any]:
    run_s, layouts = (20.0, 4) if quick else (RUN_S, LAYOUTS)
    got = {p: [_scenario(p, seed, run_s) for seed in range(layouts)] for p in POLICIES}
    tps = {p: sum(r["tokens_per_s"] for r in rows) for p, rows in got.items()}
    per_layout = [a["tokens_per_s"] / b["tokens_per_s"] - 1.0
                  for a, b in zip(got["traffic-aware"], got["ignores-traffic"], strict=True)]
    return {
        "tokens_per_s_gain": round(tps["traffic-aware"] / tps["ignores-traffic"] - 1.0, 4),
        "goal_tokens_per_s_gain": 0.10,
        "tokens_per_s_gain_best_layout": round(max(per_layout), 4),
        "tokens_per_s_gain_vs_first_fit": round(tps["traffic-aware"] / tps["first-fit"] - 1.0, 4),
        "layouts_with_congestion": sum(r["shared"] > 1.0 + 1e-9 for r in got["ignores-traffic"]),
        "layouts_with_congestion_traffic_aware": sum(r["shared"] > 1.0 + 1e-9 for r in got["traffic-aware"]),
        "layouts": layouts,
        "max_link_utilization": round(max(r["max_link_utilization"] for r in got["traffic-aware"]), 4),
        "max_link_utilization_ignores_traffic": round(
            max(r["max_link_utilization"] for r in got["ignores-traffic"]), 4),
        "max_link_utilization_first_fit": round(max(r["max_link_utilization"] for r in got["first-fit"]), 4),
        "tokens_per_s_per_layout": {p: round(v / layouts, 1) for p, v in tps.items()},
        "scenario": f"trn2-ultraserver 4x4x4, {BUSY} random single-chip jobs per layout, {JOBS} DP jobs x "
                    f"{JOB_CHIPS} chips, {run_s:.0f} virtual s per layout and policy",
    }
