"""Max-min fair link sharing between jobs on the twin (fabric.sim.congestion)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.sim import SimFabric
from podfleet.fabric.sim.congestion import Congestion, Flow, max_min_rates
from podfleet.hardware.catalog import custom_grid, get_topology

COMM_HEAVY = {"params": 2e9, "tokens_per_step": 4096, "overlap": 0.0}


@st.composite
def networks(draw: st.DrawFn) -> tuple[np.ndarray, list[Flow]]:
    n_links = draw(st.integers(1, 8))
    cap = np.array(draw(st.lists(st.floats(1.0, 100.0), min_size=n_links, max_size=n_links)))
    flows = []
    for _ in range(draw(st.integers(1, 6))):
        links = sorted(draw(st.sets(st.integers(0, n_links - 1), min_size=1, max_size=n_links)))
        w = draw(st.lists(st.integers(1, 3), min_size=len(links), max_size=len(links)))
        flows.append(Flow(np.array(links, dtype=np.int64), np.array(w, dtype=np.float64)))
    return cap, flows


@settings(max_examples=200, deadline=None)
@given(networks())
def test_rates_are_feasible_and_max_min_fair(net: tuple[np.ndarray, list[Flow]]) -> None:
    cap, flows = net
    rate, alone, ideal = max_min_rates(cap, flows)
    assert (rate > 0).all() and (rate <= alone * (1 + 1e-9)).all() and (alone <= ideal * (1 + 1e-9)).all()
    load = np.zeros_like(cap)
    for f, r in zip(flows, rate, strict=True):
        np.add.at(load, f.links, f.weights * r)
    assert (load <= cap * (1 + 1e-6)).all()
    # Max-min: every flow has a full link on which no other flow gets more than it.
    for f, r in zip(flows, rate, strict=True):
        full = [int(lk) for lk in f.links if load[lk] >= cap[lk] * (1 - 1e-6)]
        assert any(all(r2 <= r * (1 + 1e-6) for g, r2 in zip(flows, rate, strict=True) if lk in g.links)
                   for lk in full), (f, r)


def test_flows_on_separate_links_keep_their_own_rate() -> None:
    cap = np.array([10.0, 20.0, 30.0])
    flows = [Flow(np.array([0]), np.array([1.0])), Flow(np.array([1, 2]), np.array([2.0, 1.0]))]
    rate, alone, _ideal = max_min_rates(cap, flows)
    assert rate.tolist() == alone.tolist() == [10.0, 10.0]


def _ring8(tl: Timeline) -> SimFabric:
    return SimFabric(custom_grid([8], link_bw_bytes_per_s=100e9, name="ring8"), tl)


def test_two_jobs_on_shared_links_slow_each_other_and_recover_when_one_stops() -> None:
    tl = Timeline(seed=0)
    fab = _ring8(tl)
    # Job a's ring 0 -> 3 runs the + way over links 0-1, 1-2, 2-3, and back the - way; job
    # b's ring 1 <-> 2 needs link 1-2 in both directions: they share it.
    fab.launch(WorkerGroupSpec("job-a", (0, 3), "dp", 10**6, checkpoint_interval=0, options=COMM_HEAVY))
    tl.run(until=10)
    alone = fab.runner.jobs["job-a"].step_time_s
    assert fab.congestion.slowdown("job-a") == 1.0
    fab.launch(WorkerGroupSpec("job-b", (1, 2), "dp", 10**6, checkpoint_interval=0, options=COMM_HEAVY))
    tl.run(until=30)
    assert fab.congestion.slowdown("job-a") == pytest.approx(2.0)
    assert fab.congestion.slowdown("job-b") == pytest.approx(2.0)
    shared = fab.runner.jobs["job-a"].step_time_s
    assert shared > alone
    util = fab.link_metrics()["flow_utilization"]
    assert fab.congestion.flows_per_link().max() == 2 and util.max() > 0
    fab.stop("job-b")
    tl.run(until=50)
    assert fab.congestion.slowdown("job-a") == 1.0
    assert fab.runner.jobs["job-a"].step_time_s == pytest.approx(alone)


def test_a_paused_job_sends_nothing() -> None:
    tl = Timeline(seed=0)
    fab = _ring8(tl)
    for job, chips in (("job-a", (0, 3)), ("job-b", (1, 2))):
        fab.launch(WorkerGroupSpec(job, chips, "dp", 10**6, checkpoint_interval=0, options=COMM_HEAVY))
    tl.run(until=5)
    assert fab.congestion.slowdown("job-a") > 1.0
    fab.pause("job-b")
    assert fab.congestion.slowdown("job-a") == 1.0


def test_adaptive_routing_spreads_a_ring_over_quiet_links() -> None:
    topo = get_topology("trn2-ultraserver")
    cong = Congestion(topo, len(topo.links))
    busy = [topo.index([x, 0, 0]) for x in range(4)]
    cong.set_job("job-busy", busy)  # the x ring of row y=0, z=0
    a, b = topo.index([0, 0, 0]), topo.index([2, 1, 0])
    dor = cong.preview((a, b))
    cong.set_routing("adaptive")
    adaptive = cong.preview((a, b))
    load = cong.directed_load()
    # DOR goes x first, over the busy row's links; adaptive goes y first, around it.
    assert load[dor.links].max() >= 1 and load[adaptive.links].max() == 0
    assert adaptive.weights.sum() == dor.weights.sum()  # still a minimal path


def test_adaptive_routing_detours_a_one_hop_edge_off_a_busy_link() -> None:
    topo = get_topology("trn2-ultraserver")
    cong = Congestion(topo, len(topo.links))
    cong.set_job("job-busy", [topo.index([x, 0, 0]) for x in range(4)])  # the x ring of row y=0, z=0
    a, b = topo.index([0, 0, 0]), topo.index([1, 0, 0])  # neighbours on that row
    dor = cong.preview((a, b))
    cong.set_routing("adaptive")
    detour = cong.preview((a, b))
    load = cong.directed_load()
    assert load[dor.links].max() >= 1  # the direct link carries the busy ring's edge
    assert load[detour.links].max() == 0 and detour.weights.sum() == dor.weights.sum() + 2
    cong.set_job("job-edge", (a, b))
    assert cong.flows_per_directed_link().max() == 1  # no link carries both rings one way
    # A quiet one-hop edge keeps its direct link.
    c, d = topo.index([0, 2, 2]), topo.index([1, 2, 2])
    assert cong.preview((c, d)).weights.sum() == 2  # there and back, one link each way
    cong.set_routing("dor")
    assert cong.flows_per_directed_link().max() == 2  # routed directly, the two rings share


def test_adaptive_routing_takes_a_quiet_detour_around_a_down_link() -> None:
    topo = get_topology("trn2-ultraserver")
    cong = Congestion(topo, len(topo.links))
    cap = np.array([ln.bw_bytes_per_s for ln in topo.links])
    a, b = topo.index([0, 0, 0]), topo.index([1, 0, 0])
    down = next(ln.index for ln in topo.links if {ln.src, ln.dst} == {a, b})
    cap[down] = 0.0
    cong.set_capacity(cap, [down])
    router_way = cong.preview((a, b))
    # Another ring (two chips, one edge each way) loads the router's detour's first link:
    # the adaptive edge goes around both.
    first = topo.links[int(router_way.links[0]) // 2]
    cong.set_job("job-busy", [first.src, first.dst])
    cong.set_routing("adaptive")
    load = cong.directed_load()
    assert load[router_way.links].max() >= 1
    around = cong.preview((a, b))
    assert down not in (around.links // 2).tolist() and load[around.links].max() == 0


def test_unknown_routing_lists_the_valid_ones() -> None:
    topo = get_topology("trn2-ultraserver")
    with pytest.raises(Exception, match="dor"):
        Congestion(topo, len(topo.links)).set_routing("ecmp")


def test_a_down_link_is_routed_around() -> None:
    topo = custom_grid([8], link_bw_bytes_per_s=100e9, name="ring8")
    cong = Congestion(topo, len(topo.links))
    cap = np.full(len(topo.links), 100e9)
    cong.set_capacity(cap, [])
    direct = cong.preview((0, 1))
    cap[0] = 0.0
    cong.set_capacity(cap, [0])
    around = cong.preview((0, 1))
    assert not set((around.links // 2).tolist()) & {0}
    assert around.weights.sum() > direct.weights.sum()


@pytest.mark.parametrize("topo", [get_topology("trn2-ultraserver"), custom_grid([3, 4], wrap=False, name="mesh"),
                                  custom_grid([8], name="ring8"), custom_grid([2, 3, 5], name="odd")])
def test_vectorised_routes_are_the_dimension_ordered_ones(topo: object) -> None:
    from podfleet.fabric.sim.congestion import grid_paths
    from podfleet.hardware.routing import dor_route

    paths = grid_paths(topo)  # type: ignore[arg-type]
    n = topo.n_chips  # type: ignore[attr-defined]
    src, dst = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    e, links, hops = paths.dor_many(src, dst)
    for i in range(src.size):
        want = paths.dor(int(src[i]), int(dst[i]))
        assert links[e == i].tolist() == want
        assert hops[i] == len(want) == dor_route(topo, int(src[i]), int(dst[i])).hops  # type: ignore[arg-type]
