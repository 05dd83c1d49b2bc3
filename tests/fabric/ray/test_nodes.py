"""Chips numbered node by node, the head first; liveness from ``ray.nodes()`` records;
pinning selectors and the health check (``fabric/ray/nodes.py``: no Ray needed)."""

from __future__ import annotations

from podfleet.fabric.ray.nodes import HEAD_RESOURCE, NODE_ID_LABEL, NodeMap


def rec(node_id: str, ip: str, cpus: float, *, head: bool = False, alive: bool = True) -> dict:
    res = {"CPU": cpus, f"node:{ip}": 1.0, **({HEAD_RESOURCE: 1.0} if head else {})}
    return {"NodeID": node_id, "NodeManagerAddress": ip, "Alive": alive, "Resources": res}


NODES = [rec("b" * 56, "10.0.0.2", 1.0), rec("a" * 56, "10.0.0.1", 2.0, head=True), rec("c" * 56, "10.0.0.3", 0.0),
         rec("d" * 56, "10.0.0.4", 4.0, alive=False)]


def test_chips_fill_the_head_first_then_the_other_nodes() -> None:
    m = NodeMap(NODES, "CPU", 1.0, 3)
    assert m.chip_node == ["a" * 56, "a" * 56, "b" * 56]
    assert [m.host(c) for c in range(3)] == ["10.0.0.1", "10.0.0.1", "10.0.0.2"]
    assert m.chips_on("b" * 56) == [2] and m.selectors([2, 0]) == [{NODE_ID_LABEL: "b" * 56},
                                                                  {NODE_ID_LABEL: "a" * 56}]
    assert [d["chips"] for d in m.describe()] == [[0, 1], [2]]


def test_fractional_chips_and_leftovers() -> None:
    m = NodeMap(NODES, "CPU", 0.5, 7)  # head holds 4, the other node 2: chip 6 has no node
    assert m.chip_node.count("a" * 56) == 4 and m.chip_node[6] is None
    assert m.selectors([6]) == [{}] and m.check(6) is None and m.host(6) == ""


def test_a_node_that_dies_fails_the_check_and_is_reported_once() -> None:
    m = NodeMap(NODES, "CPU", 1.0, 3)
    assert m.check(2) is None
    alive = [r for r in NODES if r["NodeID"] != "b" * 56]
    [died] = m.update(alive)
    assert died.node_id == "b" * 56 and m.update(alive) == []
    assert "is not alive" in (m.check(2) or "") and m.check(0) is None
    m.updated_mono -= 3600
    assert "no fresh view" in (m.check(0) or "")


def test_a_node_that_joins_takes_the_chips_of_a_lost_one_and_only_those() -> None:
    m = NodeMap(NODES, "CPU", 1.0, 3)  # chips 0, 1 on the head, chip 2 on node b
    alive = [r for r in NODES if r["NodeID"] != "b" * 56]
    m.apply(alive)
    assert m.lost(2) and not m.lost(0)
    assert m.remap(2) is None  # the head is full, no other live node has room
    joined = m.apply([*alive, rec("e" * 56, "10.0.0.5", 1.0)]).joined
    assert [n.node_id for n in joined] == ["e" * 56]
    node = m.remap(2)
    assert node is not None and node.node_id == "e" * 56 and m.chip_node[2] == "e" * 56
    assert not m.lost(2) and m.check(2) is None and m.host(2) == "10.0.0.5"
    assert m.room(node) == 0 and m.remap(0) is m.nodes["a" * 56]  # a chip on a live node stays
    # A known node that comes back is reported as joined again.
    assert [n.node_id for n in m.apply([*alive, rec("b" * 56, "10.0.0.2", 1.0)]).joined] == ["b" * 56]


def test_chip_repair_re_maps_a_chip_whose_node_is_gone_or_refuses_with_the_fix() -> None:
    # RayFabric.set_chip_state (what `chip repair` calls) on a fabric's node map alone:
    # no Ray is needed to decide where a repaired chip goes.
    import threading
    from types import SimpleNamespace

    import pytest

    from podfleet.errors import ConflictError
    from podfleet.fabric.base import ChipState
    from podfleet.fabric.ray.fabric import RayFabric, ray_topology

    fab = RayFabric.__new__(RayFabric)
    fab.topology = ray_topology("CPU", 3)
    fab.state = SimpleNamespace(lock=threading.Lock())
    fab.nodes = NodeMap(NODES, "CPU", 1.0, 3)  # chips 0, 1 on the head, chip 2 on node b
    fab.per_chip, fab.resource = 1.0, "CPU"
    fab._states = [ChipState.HEALTHY, ChipState.HEALTHY, ChipState.ISOLATED]
    fab._reasons = ["", "", "Ray node bbbbbbbb (10.0.0.2) lost"]
    alive = [r for r in NODES if r["NodeID"] != "b" * 56]
    fab.nodes.apply(alive)
    with pytest.raises(ConflictError, match=r"chip 2's Ray node .* is gone and no live Ray node has 1 CPU free "
                                            r"for it \(start a raylet, then repair it again\)"):
        fab.set_chip_state(2, ChipState.HEALTHY, "repaired")
    assert fab.chip_states()[2] is ChipState.ISOLATED  # still out of service
    fab.nodes.apply([*alive, rec("e" * 56, "10.0.0.5", 1.0)])
    fab.set_chip_state(2, ChipState.HEALTHY, "repaired")
    assert fab.chip_states()[2] is ChipState.HEALTHY and fab.nodes.chip_node[2] == "e" * 56
    assert fab._reasons[2] == "repaired; now on Ray node eeeeeeeeeeee (10.0.0.5)"
