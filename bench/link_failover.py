"""Link failover under load: a link goes down while a job's ring crosses it.

Two figures, both from the twin on a 4x4x4 Trn2 UltraServer:

* ``reroute_ms_p99``: for every link the job's ring crosses (one at a time), the wall
  time the router (``hardware.routing.Router``, the code the twin and the control plane
  route with) takes, on this machine, to give every ring edge that crossed the link a
  working route again: ``fail_link`` then ``route`` for each affected edge, which takes
  the link's precomputed detour (local repair). ``global_recompute_ms_p99``: the
  following all-pairs shortest-path recompute (global repair), measured the same way.
  These are software times of the routing computation, not NeuronLink hardware
  retraining times (no figure for those is published; see docs/interconnect.md).
* ``throughput_dip_ratio``: the job's step time while its ring runs over the detour
  over its healthy step time, as the twin computes it (the detour link's bandwidth
  rule and the max-min sharing of the links the detour piles onto), median over the
  links tried; ``throughput_dip_ratio_max`` the worst link.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.sim import SimFabric
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.routing import Router
from podfleet.hardware.topology import GridTopology

NAME = "link-failover"
DESCRIPTION = "link down under a running ring: reroute_ms_p99 (detour, then global recompute) and throughput dip"
JOB = "job-ring"
# A data-parallel job whose exposed gradient all-reduce is about half its step.
OPTIONS = {"params": 2e9, "tokens_per_step": 4096, "overlap": 0.0}


def _ring(topo: GridTopology) -> tuple[int, ...]:
    """A 4x4 plane (z = 0), snake-ranked: the x/y links of one instance."""
    return tuple(topo.index([x if y % 2 == 0 else 3 - x, y, 0]) for y in range(4) for x in range(4))


def _ring_links(topo: GridTopology, ring: tuple[int, ...]) -> list[int]:
    router = Router(topo)
    return sorted({ln for a, b in zip(ring, ring[1:] + ring[:1], strict=True) for ln in router.route(a, b).links})


def _reroute_ms(topo: GridTopology, ring: tuple[int, ...], link: int) -> tuple[float, float]:
    router = Router(topo)
    edges = list(zip(ring, ring[1:] + ring[:1], strict=True))
    for a, b in edges:
        router.route(a, b)  # warm: the routes in use before the failure
    t0 = time.perf_counter()
    router.fail_link(link)
    for a, b in edges:
        router.route(a, b)
    local = time.perf_counter() - t0
    t0 = time.perf_counter()
    router.recompute()
    for a, b in edges:
        router.route(a, b)
    return local * 1e3, (time.perf_counter() - t0) * 1e3


def _dip(link: int, ring: tuple[int, ...]) -> float:
    tl = Timeline(seed=0)
    fab = SimFabric("trn2-ultraserver", tl)
    fab.launch(WorkerGroupSpec(JOB, ring, "dp", 10**9, checkpoint_interval=0, options=dict(OPTIONS)))
    tl.run(until=10.0)
    healthy = fab.runner.jobs[JOB].step_time_s
    fab.inject_fault("link-down", link=link)
    tl.run(until=tl.now + 10.0)
    return fab.runner.jobs[JOB].step_time_s / healthy


def run(quick: bool = False) -> dict[str, Any]:
    topo = get_topology("trn2-ultraserver")
    assert isinstance(topo, GridTopology)
    ring = _ring(topo)
    links = _ring_links(topo, ring)
    repeats = 3 if quick else 20
    local, glob = [], []
    for link in links:
        for _ in range(repeats):
            lo, gl = _reroute_ms(topo, ring, link)
            local.append(lo)
            glob.append(gl)
    dips = [_dip(link, ring) for link in (links[:4] if quick else links)]
    return {
        "reroute_ms_p99": round(float(np.percentile(local, 99)), 4),
        "reroute_ms_p50": round(float(np.percentile(local, 50)), 4),
        "global_recompute_ms_p99": round(float(np.percentile(glob, 99)), 3),
        "throughput_dip_ratio": round(statistics.median(dips), 3),
        "throughput_dip_ratio_max": round(max(dips), 3),
        "links_tried": len(links),
        "scenario": "trn2-ultraserver, one 16-chip DP job (4x4 plane, snake ring), each link of its ring "
                    "failed in turn",
    }
