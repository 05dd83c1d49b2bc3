"""Link state feeds placement: blocks over down/degraded links are avoided when an
equal clean block exists, and a plan placed over a down link pays its detour."""

from __future__ import annotations

import pytest

from podfleet.errors import InvalidInputError
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.routing import Router
from podfleet.perf import collectives as col
from podfleet.perf.layout import block_health, job_topology
from podfleet.perf.models import get_model
from podfleet.perf.plan import Plan
from podfleet.perf.step import estimate
from podfleet.planner.adapter import PlannerAdapter
from podfleet.scheduler import DecisionKind, JobRequest, Scheduler
from podfleet.scheduler.links import block_link_health, link_penalty

POD = get_topology("trn2-ultraserver")  # 4x4x4 torus
N_LINKS = len(POD.links)


def states(**bad: str) -> list[str]:
    out = ["up"] * N_LINKS
    for k, v in bad.items():
        out[int(k.removeprefix("l"))] = v
    return out


def inner_link(chips: tuple[int, ...]) -> int:
    """A link both of whose chips are in ``chips``."""
    held = set(chips)
    return next(ln.index for ln in POD.links if ln.src in held and ln.dst in held)


def place(job: JobRequest, link_states: list[str] | None = None) -> tuple[Scheduler, object]:
    s = Scheduler(POD, planner=PlannerAdapter())
    if link_states is not None:
        s.set_link_states(link_states)
    s.submit(job)
    [d] = s.schedule()
    assert d.kind is DecisionKind.BIND
    return s, d.placement


def holds(chips: tuple[int, ...], link: int) -> bool:
    ln = POD.links[link]
    return ln.src in chips and ln.dst in chips


@pytest.mark.parametrize("state", ["down", "degraded"])
def test_equal_clean_block_is_chosen(state: str) -> None:
    job = JobRequest("j", 16, tp=4)
    _, clean = place(job)
    link = inner_link(clean.chips)
    _, p = place(job, states(**{f"l{link}": state}))
    assert p.shape == clean.shape  # an equal block, not a worse shape
    assert not holds(p.chips, link)
    assert p.chips != clean.chips


def test_no_clean_block_still_places() -> None:
    link = 0
    s, p = place(JobRequest("all", 64), states(**{f"l{link}": "down"}))
    assert holds(p.chips, link) and len(p.chips) == 64
    assert s.describe("all")["phase"] == "running"


def test_fewer_bad_links_win_when_none_is_clean() -> None:
    # Every 32-chip block of one shape holds some bad link: the one with fewest wins.
    job = JobRequest("j", 32)
    _, clean = place(job)
    bad = {f"l{ln.index}": "down" for ln in POD.links if holds(clean.chips, ln.index)}
    _, p = place(job, states(**bad))
    assert not any(holds(p.chips, int(k[1:])) for k in bad)


def test_link_states_are_validated_and_cleared() -> None:
    s = Scheduler(POD)
    with pytest.raises(InvalidInputError):
        s.set_link_states(["up"] * (N_LINKS - 1))
    with pytest.raises(InvalidInputError):
        s.set_link_states(states(l3="broken"))
    assert s.set_link_states(states(l3="down")) is True
    assert s.set_link_states(states(l3="down")) is False  # unchanged
    pod = s.cluster.pods[0]
    assert link_penalty(pod).max() > 1.0
    assert s.set_link_states(states()) is True
    assert not s.cluster.bad_link_pods and link_penalty(pod).max() == 1.0


def test_fleet_link_states_go_to_their_pod() -> None:
    fleet = get_topology("trn2-ultraserver:2")
    s = Scheduler(fleet)
    link_states = ["up"] * (2 * N_LINKS)
    link_states[N_LINKS + 5] = "down"
    s.set_link_states(link_states)
    assert s.cluster.bad_link_pods == {1}
    assert s.cluster.pods[1].bad_links == {5: "down"} and not s.cluster.pods[0].bad_links


# --- the plan's communication pays the detour --------------------------------------------
def test_collective_latency_grows_by_the_detours_stretch() -> None:
    """A latency-bound ring over a down link: each step takes the detour, so it pays the
    detour's hops over the direct hop (its stretch)."""
    shape = (4, 1, 1)
    topo = job_topology(POD, 4, shape)
    link = next(ln.index for ln in POD.links if ln.src == 0 and ln.dst == 1)
    stretch = Router(POD).detour(link).hops / 1
    health = block_health(POD, topo, (0, 0, 0), [link], stretch={link: stretch})
    group = tuple(range(4))
    clean = col.group_levels(topo, group)[0]
    down = col.group_levels(topo, group, health)[0]
    assert down.step_latency_s == pytest.approx(clean.step_latency_s * stretch)
    assert down.bw_bytes_per_s == pytest.approx(clean.bw_bytes_per_s * col.DETOUR_FACTOR)
    tiny = 8.0  # bytes: latency-bound
    assert col.all_reduce_s((down,), tiny) / col.all_reduce_s((clean,), tiny) == pytest.approx(stretch, rel=1e-3)
    # A longer detour (the other way round the ring) costs more.
    longer = block_health(POD, topo, (0, 0, 0), [link], stretch={link: 5.0})
    assert col.group_levels(topo, group, longer)[0].step_latency_s > down.step_latency_s


def test_plan_comm_time_is_larger_on_a_block_with_a_down_link() -> None:
    model = get_model("llama3-8b")
    shape = (4, 4, 1)
    topo = job_topology(POD, 16, shape)
    plan = Plan(4, 1, 4, 1, 64 // 4, "selective", 1)
    clean = estimate(model, plan, topo)
    offset = (0, 0, 2)  # a block away from the origin: link indices are mapped
    chip = POD.index((1, 0, 2))
    link = next(ln.index for ln in POD.links if ln.src == chip and ln.axis == 0)
    grid = POD
    health = block_link_health(grid, topo, offset, {link: "down"})
    assert health.down and health.stretch  # mapped into the block's own links
    down = estimate(model, plan, topo, health=health)
    comm_clean = clean.tp_comm_s + clean.dp_comm_exposed_s
    comm_down = down.tp_comm_s + down.dp_comm_exposed_s
    assert comm_down > comm_clean
    assert down.step_time_s > clean.step_time_s
    # Outside the block the link changes nothing.
    far = POD.index((1, 0, 0))
    other = next(ln.index for ln in POD.links if ln.src == far and ln.axis == 0)
    assert block_link_health(grid, topo, offset, {other: "down"}).empty


def test_placed_plan_pays_the_detour_when_no_clean_block_exists() -> None:
    pytest.importorskip("podfleet.planner")
    # 70B on the whole pod runs tensor parallel over x: its TP all-reduces cross the link.
    job = JobRequest("auto", 64, parallelism="auto", model="llama3-70b")
    _, clean = place(job)
    link = inner_link(clean.chips)
    _, p = place(job, states(**{f"l{link}": "down"}))
    assert p.plan is not None and clean.plan is not None
    assert p.plan.best.estimate.tp_comm_s > clean.plan.best.estimate.tp_comm_s
    assert p.plan.step_time_s > clean.plan.step_time_s


def test_block_health_maps_links_of_a_wrapped_block() -> None:
    """A block at an offset that wraps round the torus sees the parent's wrap link as its own."""
    topo = job_topology(POD, 16, (4, 4, 1))
    wrap = next(ln.index for ln in POD.links if ln.axis == 0 and ln.src == POD.index((3, 0, 1)))
    h = block_health(POD, topo, (2, 0, 1), [wrap])
    (inner,) = h.down
    ln = topo.links[inner]
    assert (topo.coords(ln.src)[0], topo.coords(ln.dst)[0]) == (1, 2)  # x 3->0 is local 1->2
    assert block_health(POD, POD, None, [wrap]).down == {wrap}
