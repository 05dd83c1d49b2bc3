"""Traffic-aware placement: score a candidate by the traffic it adds to links in use.

The rule (pure, numpy): a candidate's ring crosses directed links ``links`` with
``weights`` (ring edges per link, as the twin routes it: ``fabric.sim.congestion``).
Ideally every ring edge has a link to itself and the ring runs at the pace of its
slowest link, ``max(1 / capacity)``. Its own edges piling onto a link (a scattered
gang) and the rings already running, which put ``load`` (ring edges) on each link,
share a link max-min fairly, so the candidate's pace is bounded by
``max((load + weights) / capacity)`` over its links. ``traffic_cost`` is their ratio:
1 for a ring laid on quiet links, k when its hottest link carries k ring edges'
worth of traffic. With ``load`` all zero it judges the ring's own layout only.
``traffic_score`` turns it into the framework's 0-100.

In the scheduler (``candidate_traffic``): the fabric reports the running rings' load
per directed link (``Scheduler.set_link_traffic``); each candidate block's ring (its
chips in ring order, closing back to the first) is routed dimension-ordered on its pod's
grid, and ``topology_block`` multiplies the block's cost by its ``traffic_cost``. Nothing
is computed while no pod reports traffic.

``pick`` takes the best of several candidates: the fastest pace (``ring_pace``: the
hottest link's traffic over its capacity, so slow links count too), then the fewest
link-hops (a shorter ring leaves more room to the jobs that come next), then the
order given (so ties keep the caller's preference, e.g. the lowest block).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from podfleet.errors import InvalidInputError
from podfleet.hardware.routing import dor_route
from podfleet.hardware.topology import GridTopology

if TYPE_CHECKING:
    from podfleet.scheduler.extension import Candidates


@dataclass(frozen=True)
class Candidate:
    """A placement option: its chips in rank order and the directed links its ring crosses."""

    chips: tuple[int, ...]
    links: np.ndarray  # int64 directed link ids
    weights: np.ndarray  # float64 ring edges over each


def traffic_cost(load: np.ndarray, cap: np.ndarray, links: np.ndarray, weights: np.ndarray) -> float:
    """>= 1: the candidate's pace over an ideal ring's on the same links (own edges
    sharing links, and the ``load`` of rings already running)."""
    links = np.asarray(links, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    if links.shape != weights.shape:
        raise InvalidInputError(f"links ({links.size}) and weights ({weights.size}) differ in length",
                                field="links")
    if links.size == 0:
        return 1.0
    c = cap[links]
    if (c <= 0).any():
        raise InvalidInputError(f"link {int(links[c <= 0][0]) // 2} has no capacity (down)", field="links")
    ideal = float((1.0 / c).max())
    shared = float(((load[links] + weights) / c).max())
    return shared / ideal


def ring_pace(load: np.ndarray, cap: np.ndarray, links: np.ndarray, weights: np.ndarray) -> float:
    """Seconds per byte of one ring edge on the candidate's hottest link (lower is faster)."""
    if links.size == 0:
        return 0.0
    return float(((load[links] + weights) / cap[links]).max())


def traffic_score(cost: float) -> float:
    """0-100 (the framework's scale): 100 for a candidate on quiet links."""
    return 100.0 / max(cost, 1.0)


def pick(candidates: Sequence[Candidate], load: np.ndarray, cap: np.ndarray) -> tuple[int, float]:
    """(index of the best candidate, its ``traffic_cost``)."""
    if not candidates:
        raise InvalidInputError("no candidate placements to choose from", field="candidates")
    best, key = 0, (np.inf, np.inf)
    for i, c in enumerate(candidates):
        traffic_cost(load, cap, c.links, c.weights)  # validates the candidate
        k = (float(np.float32(ring_pace(load, cap, c.links, c.weights))), float(c.weights.sum()))
        if k < key:
            best, key = i, k
    c = candidates[best]
    return best, traffic_cost(load, cap, c.links, c.weights)


@functools.lru_cache(maxsize=8192)
def ring_links(grid: GridTopology, chips: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(directed links, ring edges over each) of a ring over ``chips`` (local, in ring
    order, closing back to the first), routed dimension-ordered on ``grid``."""
    count: dict[int, float] = {}
    src = [ln.src for ln in grid.links]
    for a, b in zip(chips, chips[1:] + chips[:1], strict=True):
        if a == b:
            continue
        route = dor_route(grid, a, b)
        for ln, c in zip(route.links, route.chips, strict=False):
            d = 2 * ln + (0 if src[ln] == c else 1)
            count[d] = count.get(d, 0.0) + 1.0
    links = np.fromiter(count, dtype=np.int64, count=len(count))
    weights = np.fromiter(count.values(), dtype=np.float64, count=len(count))
    links.setflags(write=False)
    weights.setflags(write=False)
    return links, weights


@functools.lru_cache(maxsize=64)
def _capacity(grid: GridTopology) -> np.ndarray:
    cap = np.repeat(np.array([ln.bw_bytes_per_s for ln in grid.links], dtype=np.float64), 2)
    cap.setflags(write=False)
    return cap


def candidate_traffic(cands: Candidates) -> np.ndarray | None:
    """``traffic_cost`` per candidate block (>= 1), or None while no candidate's pod has
    traffic on its links."""
    cl = cands.cluster
    pods = cl.traffic_pods.intersection(cands.pods.tolist())
    if not pods:
        return None
    out = np.ones(len(cands))
    for i in np.flatnonzero(np.isin(cands.pod, list(pods))).tolist():
        pod = cl.pods[int(cands.pod[i])]
        if pod.link_traffic is None:
            continue
        links, weights = ring_links(pod.grid, tuple(int(c) for c in cands.chips[i]))
        out[i] = traffic_cost(pod.link_traffic, _capacity(pod.grid), links, weights)
    return out
