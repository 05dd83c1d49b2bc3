"""Link health in placement: blocks over bad links cost more, and a placed block's plan
pays for its detours.

The fabric's link states reach the scheduler through ``Scheduler.set_link_states``
(``SchedulerView.bad_links`` per pod). A block "holds" a link when it holds both of its
chips: its rings and collectives run over it. Scoring multiplies a candidate's
communication cost by ``1 + sum of its bad links' weights``: a down link's detour
halves the ring through it (``perf.collectives.DETOUR_FACTOR``: weight 1), a degraded
link retrained at half width costs less (no extra hops: weight 0.5). So among blocks of
one shape the clean one wins, and a block with fewer bad links beats one with more;
when every candidate holds the link the job still places.

Nothing is computed while every link is up (``SchedulerView.bad_link_pods`` is empty),
and per-block penalties are built lazily, once per pod per link change.

The chosen block's plan (``parallelism: auto``) is re-estimated with the block's link
health (``perf.layout.block_health``): a down link's stretch (detour hops / direct
hops, from ``hardware.routing.Router.detour``) and a degraded link's bandwidth enter
its collective costs, so its predicted communication and step time say what the
detour costs.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from podfleet.hardware.routing import Router
from podfleet.hardware.topology import GridTopology, Topology
from podfleet.perf.collectives import DETOUR_FACTOR, HEALTHY, LinkHealth
from podfleet.scheduler.extension import Candidates
from podfleet.scheduler.state import PodState

if TYPE_CHECKING:
    from podfleet.perf.models import ModelSpec

DOWN_WEIGHT = 1.0 / DETOUR_FACTOR - 1.0
DEGRADED_WEIGHT = 0.5
DEGRADED_BW_FACTOR = 0.5  # a degraded link is retrained at half width (as the twin models it)
_CACHE_KEY = "link_penalty"


def link_penalty(pod: PodState) -> np.ndarray:
    """float [n_blocks]: the cost multiplier (>= 1) of each block of ``pod`` for its bad links."""
    hit = pod.cache.get(_CACHE_KEY)
    if hit is not None and hit[0] == pod.link_version:
        return hit[1]
    idx = pod.blocks
    out = np.ones(idx.n_blocks)
    links = pod.grid.links
    for li, state in pod.bad_links.items():
        ln = links[li]
        out += (DOWN_WEIGHT if state == "down" else DEGRADED_WEIGHT) * idx.holding(ln.src, ln.dst)
    out.setflags(write=False)
    pod.cache[_CACHE_KEY] = (pod.link_version, out)
    return out


def candidate_penalty(cands: Candidates) -> np.ndarray | None:
    """Cost multiplier per candidate, or None when no candidate's pod has a bad link."""
    cl = cands.cluster
    if not cl.bad_link_pods:
        return None
    pods = cl.bad_link_pods.intersection(cands.pods.tolist())
    if not pods:
        return None
    out = np.ones(len(cands))
    for p in pods:
        sel = cands.pod == p
        out[sel] = link_penalty(cl.pods[p])[cands.block[sel]]
    return out


@functools.lru_cache(maxsize=16)
def _router(grid: GridTopology) -> Router:
    return Router(grid)  # healthy: only its precomputed detours are read


def detour_stretch(grid: GridTopology, link: int) -> float | None:
    """Hops of the link's detour over its direct hop; None for a bridge (no detour)."""
    d = _router(grid).detour(link)
    return None if d is None else float(d.hops)


def block_links(pod: PodState, block: int) -> dict[int, str]:
    """The bad links (pod-local index -> state) that ``block`` holds."""
    if not pod.bad_links:
        return {}
    idx, links = pod.blocks, pod.grid.links
    chips = set(idx.chips(block).tolist())
    return {li: s for li, s in pod.bad_links.items() if links[li].src in chips and links[li].dst in chips}


def block_link_health(grid: GridTopology, job_topo: Topology, offset: tuple[int, ...], bad: dict[int, str]) -> LinkHealth:
    """The ``perf`` link health of a job's own topology on the block at ``offset``."""
    if not bad:
        return HEALTHY
    from podfleet.perf.layout import block_health

    down = [li for li, s in bad.items() if s == "down"]
    stretch = {li: s for li in down if (s := detour_stretch(grid, li)) is not None}
    degraded = {li: DEGRADED_BW_FACTOR for li, s in bad.items() if s == "degraded"}
    return block_health(grid, job_topo, offset, down, degraded, stretch)


def plan_on_block(plan: Any, model: str | ModelSpec | None, grid: GridTopology, shape: tuple[int, ...],
                  offset: tuple[int, ...], bad: dict[int, str]) -> Any:
    """``plan`` (a planner ``PlanResult``) re-estimated on a block holding ``bad`` links:
    every candidate's step time with the block's link health, fastest first. A plan of
    another kind, or a model the perf models do not know, is returned as it is."""
    cands = getattr(plan, "candidates", None)
    if not bad or not cands or model is None:
        return plan
    from podfleet.errors import PodfleetError
    from podfleet.perf.layout import job_topology
    from podfleet.perf.models import get_model
    from podfleet.perf.step import estimate

    try:
        spec = get_model(model) if isinstance(model, str) else model
        chips = int(np.prod(shape))
        topo = job_topology(grid, chips, tuple(shape))
        health = block_link_health(grid, topo, offset, bad)
        if health.empty:
            return plan
        redone = [replace(c, estimate=estimate(spec, c.plan, topo, health=health, memory=c.estimate.memory))
                  for c in cands]
    except (PodfleetError, AttributeError, TypeError, ValueError):
        return plan
    key = getattr(type(cands[0]), "sort_key", None)
    redone.sort(key=key if key is not None else (lambda c: c.estimate.step_time_s))
    return replace(plan, candidates=tuple(redone))
